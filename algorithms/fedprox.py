"""FedProx (Li et al. 2020): FedAvg with a proximal term in the local objective."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, Tensors
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.training import delta_result, proximal_loss
from fedclock.algorithms.vectorized import SGDTask


class FedProxParams(FedAvgParams):
    """FedAvg's hyper-parameters plus the proximal weight ``mu``."""

    mu: float = Field(default=0.01, ge=0, description="proximal weight: local loss + mu/2 ||w - w_t||^2")


class FedProx(FedAvg):
    """FedProx.

    Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous
    Networks", MLSys 2020.

    * Client: ``local_steps(n)`` SGD steps on ``f_p(w) + mu/2 ||w - w_t||^2`` from the
      received ``w_t`` (the proximal term is an ``extra_loss`` of the shared loop); upload
      ``"delta" = w_local - w_t``. Every client runs the same number of steps (the paper's
      variable amount of local work, "gamma-inexact" solutions, is not simulated here: a
      slow device just takes longer in virtual time).
    * Server: exactly FedAvg's sample-weighted mean of deltas times ``server_lr``; schedules
      as in FedAvg.
    * Objective (``objective``): ``supervised`` is the paper's cross-entropy; ``simclr`` /
      ``simsiam`` give FedStyle's Table 1 "FedProx" baseline: the unlabeled two-view loss of
      encoder + projector (+ predictor) plus the same proximal term on the whole model.
    * Vectorized clients: supported with the ``supervised`` objective (plain local SGD of
      the shared loop plus the proximal gradient ``mu (w - w_t)``).
    """

    name: ClassVar[str] = "fedprox"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    stateless_clients: bool = True  # the client state passes through: None in, None out
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised", "simclr", "simsiam"})
    summary: ClassVar[str] = "FedAvg with a proximal term mu/2 ||w - w_t||^2 in the local objective"
    paper: ClassVar[str] = "Li et al., Federated Optimization in Heterogeneous Networks, MLSys 2020"
    Params: ClassVar[type[AlgorithmParams]] = FedProxParams
    vectorizable: ClassVar[bool] = True
    upload_is_delta: ClassVar[bool] = True
    aggregates_deltas: ClassVar[bool] = True

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        extra = proximal_loss(start, self.params.mu, self.workspace) if self.params.mu > 0 else None
        local, metrics = self.local_train(payload, data, rng, extra_loss=extra, loss_fn=self.objective_loss(rng))
        return delta_result(local, start, self.keep_local_body(client_state, local), data, metrics)

    def sgd_task(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """FedAvg's local SGD plus the proximal term around the received weights."""
        task = super().sgd_task(payload, client_state, data, rng)
        task.prox_mu = self.params.mu
        return task
