"""FedNova (Wang et al. 2020): normalized averaging for clients that run different amounts
of local work."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors
from fedclock.algorithms.fedavg import arrival_steps
from fedclock.algorithms.local_sgd_client import LocalSGDClient
from fedclock.algorithms.training import delta_result


def normalizer(steps: int, momentum: float) -> float:
    """``||a_i||_1`` of a client that ran ``steps`` local SGD steps with heavy-ball momentum
    ``rho`` (PyTorch's ``v <- rho v + g; w <- w - eta v``, momentum reset each task).

    The gradient of step ``k`` (0-based) moves the weights by ``eta * sum_{j=0}^{tau-1-k}
    rho^j`` in total, so ``a_i[k] = (1 - rho^(tau-k)) / (1 - rho)`` and
    ``||a_i||_1 = (tau - rho (1 - rho^tau) / (1 - rho)) / (1 - rho)``; for ``rho = 0`` it
    is ``tau`` (vanilla SGD).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if momentum == 0:
        return float(steps)
    rho = momentum
    return (steps - rho * (1 - rho ** steps) / (1 - rho)) / (1 - rho)


class FedNovaParams(AlgorithmParams):
    """FedNova hyper-parameters: local SGD ones (``momentum`` enters the normalizer) plus the
    server learning rate."""

    server_lr: float = Field(default=1.0, gt=0, description="server learning rate eta_g applied to the "
                             "normalized step")


class FedNova(LocalSGDClient, Algorithm[FedNovaParams]):
    """Federated normalized averaging.

    Wang, Liu, Liang, Joshi, Poor, "Tackling the Objective Inconsistency Problem in
    Heterogeneous Federated Optimization", NeurIPS 2020.

    * Client: the task's ``tau_i`` local SGD steps (the clock's ``data.steps``, fewer than the
      full count when the client completes only part of its work) from the received ``w``;
      uploads ``"delta" = w_local - w`` (same bytes as FedAvg). The step count travels with
      the result (``Arrival.steps``).
    * Server, on a cohort ``S`` with ``p_i = n_i / sum_{j in S} n_j``: with ``||a_i||_1`` from
      :func:`normalizer` (``tau_i`` for vanilla SGD), the normalized update of client ``i``
      is ``Delta_i / ||a_i||_1`` (the paper's ``-eta d_i``); the effective step count is
      ``tau_eff = sum_i p_i ||a_i||_1`` (the paper's default choice) and
      ``w <- w + eta_g * tau_eff * sum_i p_i Delta_i / ||a_i||_1``. The local learning rate
      cancels, so the server never needs it. ``tau_eff`` is kept in
      ``state.extra["tau_eff"]``.
    * Choices: the weights ``p_i`` are renormalized over the cohort that arrived (as this
      package's FedAvg does); an arrival that ran zero steps (a time budget too short for
      even one step) carries no gradient and is left out of the cohort; a cohort with no
      steps at all, or an empty one, leaves the state and version unchanged. With
      ``late_results: include`` a stale arrival is normalized and weighted exactly like a
      punctual one. Momentum is the local heavy-ball momentum of :func:`normalizer`
      (momentum buffers do not outlive a task); the paper's server-side (global) momentum
      and its proximal-term normalizer are not implemented.
    """

    name: ClassVar[str] = "fednova"
    summary: ClassVar[str] = "FedNova: average deltas normalized by each client's local steps"
    paper: ClassVar[str] = ("Wang et al., Tackling the Objective Inconsistency Problem in Heterogeneous Federated "
                            "Optimization, NeurIPS 2020")
    Params: ClassVar[type[AlgorithmParams]] = FedNovaParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    vectorizable: ClassVar[bool] = True  # the shared local SGD (LocalSGDClient)
    upload_is_delta: ClassVar[bool] = True

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Upload ``"delta" = local - w_t`` and report the steps run (``tau_i``)."""
        return delta_result(local, payload["weights"], client_state, data, metrics, steps=int(metrics["steps"]))

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        cohort = [(a, normalizer(arrival_steps(a), self.params.momentum)) for a in arrivals]
        cohort = [(a, norm) for a, norm in cohort if norm > 0]
        if not cohort:
            return state, False
        total = sum(a.num_samples for a, _ in cohort)
        weights = state.tensors["weights"]
        direction = torch.zeros_like(weights)
        tau_eff = 0.0
        for a, norm in cohort:
            p = a.num_samples / total if total > 0 else 1.0 / len(cohort)
            tau_eff += p * norm
            direction.add_(a.upload["delta"].to(direction), alpha=p / norm)
        new_weights = weights + self.params.server_lr * tau_eff * direction
        return state.evolve(tensors={**state.tensors, "weights": new_weights},
                            extra={**state.extra, "tau_eff": tau_eff}), True
