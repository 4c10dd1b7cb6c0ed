"""FedMRUR (NeurIPS 2023) and its two ablations FedMRUR-N and FedMRUR-H."""
from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams
from fedclock.algorithms.mofedsam import MoFedSAM, MoFedSAMParams

_PAPER = "Federated Learning with Manifold Regularization and Normalized Update Reaggregation, NeurIPS 2023"


class FedMRURParams(MoFedSAMParams):
    """MoFedSAM's hyper-parameters plus the manifold regularizer's."""

    gamma: float = Field(default=0.005, ge=0, description="weight of the hyperbolic regularizer")
    sigma: float = Field(default=10000.0, gt=0, description="temperature: R = exp(d_L^2 / sigma)")
    beta: float = Field(default=1.0, gt=0, description="hyperboloid parameter: <x, x>_L = -beta")


class FedMRUR(MoFedSAM):
    """FedMRUR: manifold regularization and normalized update reaggregation.

    "Federated Learning with Manifold Regularization and Normalized Update Reaggregation",
    NeurIPS 2023.

    MoFedSAM (client momentum ``alpha`` + SAM radius ``rho``, see
    :class:`~fedclock.algorithms.momentum.ClientMomentum`) with both of the paper's parts
    (Sec. 3.2, Algorithm 1):

    * Local objective ``f_p(w) + gamma R(w, w_t)`` (Eq. (5)), ``R = exp(d^2(L_p, L_g) / sigma)``
      (Eq. (3)), where ``L_p`` and ``L_g`` are the body outputs of the local model and of the
      received, frozen global model for the same batch, lifted onto the hyperboloid of
      parameter ``beta`` as in the paper's reference [19] (Law et al., ICML 2019):
      ``L = (sqrt(||z||^2 + beta), z)``, and ``d^2 = -2 beta - 2 <L_p, L_g>_L``, the squared
      Lorentzian distance (:mod:`~fedclock.algorithms.hyperbolic`). ``d^2`` lies between 0 and
      ``||z_p - z_g||^2``, so no cap is needed and none is applied.
      **Choices** (the paper gives no more; the authors' code was not found in the sources
      searched): ``R`` is one distance per sample, averaged over the batch; the
      SAM gradient is taken of the regularized objective; ``z`` is the body's output (the
      512-d pooled features of ResNet-18-GN) without scaling. The global model's features
      cost one forward pass per sample: sample cost 2 + 1/3.
      **Size of the term.** Its gradient is ``(gamma / sigma) exp(d^2 / sigma) grad d^2``.
      At the paper's constants ``d^2 / sigma`` is small for ResNet-18-GN's features, so
      ``R ~ 1`` and ``gamma / sigma = 5e-7`` sets the pull, a tiny fraction of the
      cross-entropy's gradient (``benchmarks/fedmrur_regularizer.py`` prints the ratio per local
      step): FedMRUR then trains almost as FedMRUR-N and FedMRUR-H almost as MoFedSAM. The
      ablation files therefore add a labelled pair at a larger ``gamma / sigma``
      (``fedmrur/ablation_cifar100_dir03``: runs ``*_lifted`` at ``gamma = 0.5``,
      ``sigma = 1000``; ``fedmrur/quick_ablation``: ``gamma = 1``, ``sigma = 10``). While
      ``d^2 / sigma`` stays well below 1, ``gamma exp(d^2 / sigma) ~ gamma + (gamma / sigma) d^2``:
      with such a lift the term is, to first order, a feature-distance penalty of weight
      ``gamma / sigma`` on ``d^2`` (the squared Lorentzian distance, at most
      ``||z_p - z_g||^2``), not a distinctively hyperbolic one; ``docs/reproductions/fedmrur.md``
      reports what it does.
    * Server: the normalized aggregate of the model deltas ``Delta_p = w_p^{t,K_p} - w_t``,
      ``(mean_p ||Delta_p||) sum_p Delta_p / ||sum_p Delta_p||`` (Algorithm 1, line 15), as
      the model step with ``eta_g`` and, divided by the mean ``K_p eta_l``, as the next
      round's client momentum (:mod:`~fedclock.algorithms.momentum`).

    Defaults follow the paper: ``rho = 0.5``, ``alpha = 0.1``, ``gamma = 0.005``,
    ``sigma = 10000``, ``beta = 1``; the shared training fields (lr, decay, weight decay,
    batch) keep the engine defaults and are set by the scenario files (0.1, 0.998, 5e-4).
    """

    name: ClassVar[str] = "fedmrur"
    summary: ClassVar[str] = "FedMRUR: MoFedSAM + hyperbolic manifold regularizer + normalized aggregation"
    paper: ClassVar[str] = _PAPER
    Params: ClassVar[type[AlgorithmParams]] = FedMRURParams
    normalized: ClassVar[bool] = True
    hyperbolic: ClassVar[bool] = True


class FedMRURN(MoFedSAM):
    """FedMRUR-N, the paper's ablation with the normalized aggregation only: MoFedSAM local
    steps (no manifold regularizer; MoFedSAM's parameters and sample cost) and FedMRUR's
    normalized aggregation on the server. See :class:`FedMRUR`."""

    name: ClassVar[str] = "fedmrur_n"
    summary: ClassVar[str] = "FedMRUR ablation: MoFedSAM + normalized aggregation (no regularizer)"
    paper: ClassVar[str] = _PAPER
    normalized: ClassVar[bool] = True


class FedMRURH(FedMRUR):
    """FedMRUR-H, the paper's ablation with the hyperbolic regularizer only: FedMRUR's local
    objective, parameters and steps, and the plain mean (MoFedSAM's aggregation) on the server.
    See :class:`FedMRUR`."""

    name: ClassVar[str] = "fedmrur_h"
    summary: ClassVar[str] = "FedMRUR ablation: MoFedSAM + hyperbolic regularizer (plain aggregation)"
    normalized: ClassVar[bool] = False
