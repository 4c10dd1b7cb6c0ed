"""FedAvg (Async), the asynchronous FedAvg baseline of the SPFL/PLGA paper."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors
from fedclock.algorithms.local_sgd_client import LocalSGDClient
from fedclock.algorithms.training import model_result


class FedAvgAsyncParams(AlgorithmParams):
    """The local SGD hyper-parameters and what the server does with stale models."""

    stale_results: Literal["include", "drop"] = Field(
        default="include", description="include: stale models are averaged in (FedAvg (Async)); drop: models with "
        "staleness > 0 are discarded (FedAvg (Sync) on the same straggler schedule)")


class FedAvgAsync(LocalSGDClient, Algorithm[FedAvgAsyncParams]):
    """FedAvg with stale models averaged in, as the SPFL/PLGA paper's "FedAvg (Async)".

    The baseline named "FedAvg (Async)" in the SPFL/PLGA paper (the stage-wise
    personalized FL paper whose PLGA handles stragglers by leap gradient approximation; Sec. 4:
    "the stragglers participate directly in server aggregation"). FedAvg itself is McMahan et
    al., AISTATS 2017.

    * Rounds are the sync mode's rounds, paced by the punctual clients; run it with
      ``late_results: include`` so stragglers' results join the round in which they arrive.
    * Client: ``local_steps(n)`` SGD steps from the received weights; uploads its final
      local **model** under ``"weights"`` (not a delta).
    * Server: ``w <- (1/|R|) sum_{k in R} w_k`` over every model ``R`` received in the round,
      punctual ones and stale ones (dispatched in an earlier round, ``staleness > 0``) alike,
      each with **equal weight** -- neither the sample counts nor the staleness enter, which
      is how the paper describes the baseline. An empty round returns ``(state, False)``;
      otherwise the version advances by one.
    * Windowed async mode (``mode: {type: async, aggregation: {window_s: ...}}``, one server
      round per window) runs the same rule on each window's arrivals; with scripted
      lateness (``aggregation.late_windows``) every method then has the same stragglers,
      late by the same number of rounds (the paper's Sec. 4.2 set-up). Unwindowed async
      mode is refused: one arrival would replace the global model.
    * ``stale_results: drop`` discards the models with ``staleness > 0`` (the paper's
      "FedAvg (Sync) ... discard the stragglers"); a round with only stale models changes
      nothing.
    * Vectorized clients: supported (the client step is plain local SGD of the shared loop).
    """

    name: ClassVar[str] = "fedavg_async"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    stateless_clients: bool = True  # the client state passes through: None in, None out
    summary: ClassVar[str] = "FedAvg (Async): equal-weight mean of punctual and stale local models"
    paper: ClassVar[str] = ("FedAvg (Async) baseline of the SPFL/PLGA paper (stage-wise personalized FL with "
                            "leap gradient approximation); FedAvg: McMahan et al., AISTATS 2017")
    Params: ClassVar[type[AlgorithmParams]] = FedAvgAsyncParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync", "async"})
    upload_is_model: ClassVar[bool] = True
    vectorizable: ClassVar[bool] = True

    @classmethod
    def mode_problem(cls, mode: object) -> str | None:
        if getattr(mode, "type", None) == "async" and getattr(mode, "aggregation", None) is None:
            return ("mode.aggregation: fedavg_async in async mode needs windowed aggregation ({window_s: ...}); "
                    "one arrival at a time would replace the global model")
        return None

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Upload the local model under ``"weights"``."""
        return model_result(local, client_state, data, metrics)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if self.params.stale_results == "drop":
            arrivals = [a for a in arrivals if a.staleness == 0]
        if not arrivals:
            return state, False
        weights = state.tensors["weights"]
        total = torch.zeros_like(weights)
        for a in arrivals:
            total.add_(a.upload["weights"].to(total))
        new_weights = total / len(arrivals)
        return state.evolve(tensors={**state.tensors, "weights": new_weights},
                            extra=dict(state.extra)), True
