"""MoFedSAM (Qu et al. 2022): FedCM's client momentum with SAM local gradients."""
from __future__ import annotations

from typing import ClassVar

from fedclock.algorithms.base import AlgorithmParams
from fedclock.algorithms.fedcm import FedCMParams
from fedclock.algorithms.momentum import ClientMomentum
from fedclock.algorithms.sam import rho_field


class MoFedSAMParams(FedCMParams):
    """FedCM's hyper-parameters plus the SAM radius ``rho``."""

    rho: float = rho_field()


class MoFedSAM(ClientMomentum):
    """MoFedSAM.

    Qu, Li, Duan, Liu, Tang, Lu, "Generalized Federated Learning via Sharpness Aware
    Minimization", ICML 2022.

    FedCM (:class:`~fedclock.algorithms.momentum.ClientMomentum`) with ``g`` replaced by the
    SAM gradient of radius ``rho`` (two forward/backward passes per step: sample cost 2).
    **Choice**: default ``rho = 0.5`` and ``alpha = 0.1``, the values of the FedMRUR paper's
    setups in which MoFedSAM is the baseline.
    """

    name: ClassVar[str] = "mofedsam"
    summary: ClassVar[str] = "MoFedSAM: FedCM client momentum with sharpness-aware (SAM) local gradients"
    paper: ClassVar[str] = "Qu et al., Generalized Federated Learning via Sharpness Aware Minimization, ICML 2022"
    Params: ClassVar[type[AlgorithmParams]] = MoFedSAMParams
    use_sam: ClassVar[bool] = True
