"""FedSAM (Qu et al. 2022; Caldarola et al. 2022): FedAvg with SAM local steps."""
from __future__ import annotations

from typing import ClassVar

import torch

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, Tensors
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.sam import rho_field, sam_grad_fn
from fedclock.algorithms.training import delta_result


class FedSAMParams(FedAvgParams):
    """FedAvg's hyper-parameters plus the SAM radius ``rho``."""

    rho: float = rho_field()


class FedSAM(FedAvg):
    """FedSAM.

    Qu, Li, Duan, Liu, Tang, Lu, "Generalized Federated Learning via Sharpness Aware
    Minimization", ICML 2022 (also Caldarola, Caputo, Ciccone, "Improving Generalization in
    Federated Learning by Seeking Flat Minima", ECCV 2022).

    * Client: every local step is a SAM step, ``e = rho g/||g||``, ``g_sam = grad f(w + e)``,
      ``w <- w - eta_l g_sam`` (:func:`~fedclock.algorithms.sam.sam_grad_fn`, two passes per
      step: sample cost 2). Upload ``w_local - w_t`` as FedAvg.
    * Server: FedAvg's sample-weighted mean times ``server_lr``; schedules as in FedAvg.
    **Choice**: default ``rho = 0.5`` (the FedMRUR paper's setup).
    """

    name: ClassVar[str] = "fedsam"
    summary: ClassVar[str] = "FedSAM: FedAvg with sharpness-aware (SAM) local steps"
    paper: ClassVar[str] = "Qu et al., Generalized Federated Learning via Sharpness Aware Minimization, ICML 2022"
    Params: ClassVar[type[AlgorithmParams]] = FedSAMParams
    upload_is_delta: ClassVar[bool] = True
    aggregates_deltas: ClassVar[bool] = True

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        local, metrics = self.local_train(payload, data, rng, grad_fn=sam_grad_fn(self.params.rho))
        return delta_result(local, start, client_state, data, metrics)
