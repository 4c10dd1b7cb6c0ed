"""FedExp (Jhunjhunwala et al. 2023): FedAvg with an extrapolated server step size."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, Arrival, ServerState
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.schedules import ScheduleParams


class FedExpParams(ScheduleParams):
    """Local SGD hyper-parameters (with the local lr decay) and FedExp's ``eps``; the server
    step size is adaptive, so there is no ``server_lr``."""

    eps: float = Field(default=1e-3, gt=0, description="eps in eta_g = max(1, sum ||D_p||^2 / (2|S| (||D||^2 + eps)))")


def fedexp_step_size(deltas: torch.Tensor, eps: float) -> float:
    """FedExp's ``eta_g = max(1, sum_p ||D_p||^2 / (2 |S| (||mean_p D_p||^2 + eps)))`` for
    stacked client deltas (one row per client)."""
    mean = deltas.mean(dim=0)
    ratio = float((deltas ** 2).sum()) / (2 * deltas.shape[0] * (float((mean ** 2).sum()) + eps))
    return max(1.0, ratio)


class FedExp(FedAvg):
    """FedExp.

    Jhunjhunwala, Wang, Joshi, "FedExP: Speeding Up Federated Averaging via
    Extrapolation", ICLR 2023.

    * Client: FedAvg's local SGD (with the local lr schedule); upload ``w_local - w_t``.
    * Server: ``D = mean_p D_p`` (**choice**: unweighted, uniform client weights as in the
      formula), ``eta_g = max(1, sum_p ||D_p||^2 / (2 |S| (||D||^2 + eps)))`` with
      ``eps = 1e-3``, ``w <- w + eta_g D``. The step size of each round is kept in the
      state's ``extra["eta_g"]``. **Not done**: the paper reports the average of the last
      two iterates as its final model; here the last iterate is evaluated.
    """

    name: ClassVar[str] = "fedexp"
    summary: ClassVar[str] = "FedExp: FedAvg with an adaptive extrapolated server step size"
    paper: ClassVar[str] = ("Jhunjhunwala et al., FedExP: Speeding Up Federated Averaging via Extrapolation, "
                            "ICLR 2023")
    Params: ClassVar[type[AlgorithmParams]] = FedExpParams
    vectorizable: ClassVar[bool] = True  # FedAvg's client step (sgd_task, sgd_result)
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised"})  # not FedAvg's unlabeled objectives

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        weights = state.tensors["weights"]
        deltas = torch.stack([a.upload["delta"].to(weights) for a in arrivals])
        eta_g = fedexp_step_size(deltas, self.params.eps)
        new_weights = weights + eta_g * deltas.mean(dim=0)
        return state.evolve(tensors={**state.tensors, "weights": new_weights},
                            extra={**state.extra, "eta_g": eta_g}), True
