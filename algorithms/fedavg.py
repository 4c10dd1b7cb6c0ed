"""FedAvg (McMahan et al. 2017), the synchronous baseline."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors
from fedclock.algorithms.ssl import ObjectiveMixin, ObjectiveParams
from fedclock.algorithms.training import train_from


class FedAvgParams(ObjectiveParams):
    """FedAvg hyper-parameters: local SGD ones, the local objective (supervised, or the
    unlabeled SimCLR / SimSiam of :mod:`fedclock.algorithms.ssl`) and the server learning rate."""

    server_lr: float = Field(default=1.0, gt=0, description="server learning rate eta_g applied to the "
                             "weighted mean delta")


class FedAvg(ObjectiveMixin, Algorithm[FedAvgParams]):
    """Federated Averaging.

    McMahan, Moore, Ramage, Hampson, Aguera y Arcas, "Communication-Efficient Learning of
    Deep Networks from Decentralized Data", AISTATS 2017.

    * Client: ``local_steps(n)`` mini-batch SGD steps from the received weights ``w_t``
      (:func:`~fedclock.algorithms.training.local_sgd`), upload ``"delta" = w_local - w_t``.
    * Server, on a cohort: ``w <- w + eta_g * sum_p (n_p / sum_q n_q) * Delta_p`` (``eta_g``
      = ``server_lr``, 1 gives the paper's weighted model average). An empty cohort leaves
      the state and the version unchanged (returns ``False``); otherwise the version
      advances by one. If every arrival reports zero samples, the deltas get equal weight.
    * Late results: with the sync mode's ``late_results: drop`` this is the SPFL/PLGA
      paper's "FedAvg (Sync)". With ``include``, a stale arrival (dispatched in an earlier
      round, ``staleness > 0``) is folded into the round it arrives in with exactly the same
      ``n_p`` weight as a punctual one: its delta, computed against the older ``w_tau``, is
      added to the current ``w`` (no staleness discount).
    * Objective (``objective``): ``supervised`` is the paper's cross-entropy. ``simclr`` /
      ``simsiam`` make it the FedAvg baseline of unsupervised federated representation
      learning (FedStyle's Table 1 "FedAvg"): the model is encoder + projector (+ predictor),
      the local loss is the unlabeled two-view objective, and the whole model is averaged.
    """

    name: ClassVar[str] = "fedavg"
    summary: ClassVar[str] = "Federated Averaging: sample-weighted mean of local SGD deltas"
    paper: ClassVar[str] = ("McMahan et al., Communication-Efficient Learning of Deep Networks from "
                            "Decentralized Data, AISTATS 2017")
    Params: ClassVar[type[AlgorithmParams]] = FedAvgParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    def init_server(self, rng: torch.Generator) -> ServerState:
        return ServerState(tensors={"weights": self.model_factory.initial_weights(rng)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"weights": state.tensors["weights"]}

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        local, metrics = train_from(self, start, data, rng, loss_fn=self.objective_loss(rng))
        return ClientResult(upload={"delta": local - start.to(local.device)}, state=client_state,
                            num_samples=data.num_train, metrics=metrics)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        weights = state.tensors["weights"]
        total = sum(a.num_samples for a in arrivals)
        step = torch.zeros_like(weights)
        for a in arrivals:
            coef = a.num_samples / total if total > 0 else 1.0 / len(arrivals)
            step.add_(a.upload["delta"].to(step), alpha=coef)
        new_weights = weights + self.params.server_lr * step
        return ServerState(tensors={**state.tensors, "weights": new_weights}, version=state.version + 1,
                           extra=dict(state.extra)), True
