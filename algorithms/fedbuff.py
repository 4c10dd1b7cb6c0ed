"""FedBuff (Nguyen et al. 2022): buffered asynchronous aggregation of deltas."""
from __future__ import annotations

import math
from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors
from fedclock.algorithms.local_sgd_client import LocalSGDClient
from fedclock.algorithms.training import delta_result


def staleness_weight(staleness: int, enabled: bool) -> float:
    """FedBuff's optional staleness weight ``1 / sqrt(1 + s)`` (1 when disabled)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    return 1.0 / math.sqrt(1.0 + staleness) if enabled else 1.0


class FedBuffParams(AlgorithmParams):
    """FedBuff hyper-parameters: buffer size K, server learning rate, staleness weighting."""

    buffer_size: int = Field(default=4, ge=1, description="K: deltas buffered per server update")
    server_lr: float = Field(default=1.0, gt=0, description="server learning rate eta_g")
    staleness_weighting: bool = Field(default=False, description="weight each delta by 1/sqrt(1 + staleness)")


class FedBuff(LocalSGDClient, Algorithm[FedBuffParams]):
    """Buffered asynchronous aggregation.

    Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with Buffered
    Asynchronous Aggregation", AISTATS 2022.

    * Client: ``local_steps(n)`` SGD steps from the received ``w_tau``; uploads
      ``"delta" = w_local - w_tau``.
    * Server, per arrival with staleness ``s``: adds ``c(s) * Delta`` to the running sum in
      ``state.tensors["buffer"]`` (``c(s) = 1/sqrt(1+s)`` with ``staleness_weighting``, else 1)
      and counts it in ``state.extra["buffered"]``. When the count reaches ``K``
      (``buffer_size``): ``w <- w + eta_g * (1/K) * sum``, the buffer is cleared, the version
      advances by one and the call returns ``True``; otherwise ``(state, False)`` with the
      model and the version unchanged.
    * The sum is divided by ``K``, not by the sum of the staleness weights (as in the paper's
      algorithm): staleness weighting therefore shrinks the server step when the buffer holds
      stale deltas instead of only re-weighting them among themselves.
    * Sample counts do not enter the rule. Several arrivals in one call are buffered in
      order; if that fills the buffer more than once, each fill is applied and the call
      still counts as one version.
    * Vectorized clients: supported (the client step is plain local SGD of the shared loop).
    """

    name: ClassVar[str] = "fedbuff"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    summary: ClassVar[str] = "FedBuff: buffer K asynchronous deltas, then apply their mean"
    paper: ClassVar[str] = ("Nguyen et al., Federated Learning with Buffered Asynchronous Aggregation, "
                            "AISTATS 2022")
    Params: ClassVar[type[AlgorithmParams]] = FedBuffParams
    modes: ClassVar[frozenset[str]] = frozenset({"async"})
    vectorizable: ClassVar[bool] = True
    upload_is_delta: ClassVar[bool] = True
    aggregates_deltas: ClassVar[bool] = True

    @classmethod
    def aggregation_problem(cls, params: AlgorithmParams) -> str | None:
        """Staleness weighting gives the buffered deltas unequal weights."""
        if getattr(params, "staleness_weighting", False):
            return "staleness_weighting weights the buffered deltas unequally (set it to false)"
        return None

    def deltas_per_step(self, arrivals: list[Arrival]) -> int:
        """``K``: a flush sums the buffer's ``buffer_size`` deltas."""
        return int(self.params.buffer_size)

    def init_server(self, rng: torch.Generator) -> ServerState:
        weights = self.model_factory.initial_weights(rng)
        return ServerState(tensors={"weights": weights, "buffer": torch.zeros_like(weights)},
                           extra={"buffered": 0})

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Upload ``"delta" = local - w_tau``."""
        start = payload["weights"]
        return delta_result(local, start, client_state, data, metrics)

    def server_step_kind(self, state: ServerState, arrivals: list[Arrival]) -> str:
        """``"append"`` when these arrivals only fill the buffer, ``"flush"`` when they fill
        it once (the append, the mean applied, the buffer cleared), ``"flush xN"`` ``N`` times
        (:mod:`fedclock.algorithms.server_cost`)."""
        flushes = (int(state.extra.get("buffered", 0)) + len(arrivals)) // self.params.buffer_size
        return "append" if flushes == 0 else "flush" if flushes == 1 else f"flush x{flushes}"

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        p = self.params
        weights = state.tensors["weights"]
        buffer = state.tensors.get("buffer")
        if buffer is None:
            buffer = torch.zeros_like(weights)
        count = int(state.extra.get("buffered", 0))
        changed = False
        for arrival in arrivals:
            buffer = buffer + staleness_weight(arrival.staleness, p.staleness_weighting) * \
                arrival.upload["delta"].to(buffer)
            count += 1
            if count >= p.buffer_size:
                weights = weights + (p.server_lr / p.buffer_size) * buffer
                buffer = torch.zeros_like(weights)
                count = 0
                changed = True
        new_state = state.evolve(tensors={**state.tensors, "weights": weights, "buffer": buffer},
                                 extra={**state.extra, "buffered": count})
        return new_state, changed
