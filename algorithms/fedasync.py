"""FedAsync (Xie, Koyejo, Gupta 2019): staleness-weighted model mixing on every arrival."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors
from fedclock.algorithms.training import model_result, proximal_loss, train_from
from fedclock.algorithms.vectorized import SGDTask

StalenessFn = Literal["constant", "polynomial", "hinge"]


def mixing_weight(alpha: float, fn: StalenessFn, staleness: int, a: float, b: float) -> float:
    """FedAsync's ``a_t = alpha * S(staleness)`` with

    * constant: ``S(s) = 1``;
    * polynomial: ``S(s) = (s + 1) ** (-a)``;
    * hinge: ``S(s) = 1`` if ``s <= b`` else ``1 / (a (s - b) + 1)``.
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if fn == "constant":
        factor = 1.0
    elif fn == "polynomial":
        factor = float(staleness + 1) ** (-a)
    elif fn == "hinge":
        factor = 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)
    else:
        raise ValueError(f"staleness_fn: unknown function {fn!r} (allowed: constant, polynomial, hinge)")
    return alpha * factor


class FedAsyncParams(AlgorithmParams):
    """FedAsync hyper-parameters (the paper's alpha, S, a, b and rho)."""

    alpha: float = Field(default=0.6, gt=0, le=1, description="base mixing weight")
    staleness_fn: StalenessFn = Field(default="polynomial", description="staleness discount S")
    a: float = Field(default=0.5, ge=0, description="polynomial exponent / hinge slope")
    b: float = Field(default=4.0, ge=0, description="hinge: staleness tolerated without discount")
    rho: float = Field(default=0.0, ge=0, description="proximal weight: local loss + rho/2 ||w - w_tau||^2")
    window: Literal["sequential", "stale_mix_mean"] = Field(
        default="sequential", description="several arrivals in one call (a window): sequential mixes each into "
        "the global model in turn; stale_mix_mean mixes only stale ones with the current global model, then takes "
        "the sample-weighted mean of the call's models (the PLGA authors' FedAsync)")


class FedAsync(Algorithm[FedAsyncParams]):
    """Asynchronous federated optimization.

    Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", arXiv:1903.03934, 2019.

    * Client: ``local_steps(n)`` SGD steps from the received ``w_tau`` on the local loss,
      plus ``rho/2 ||w - w_tau||^2`` when ``rho > 0`` (the paper's regularized objective);
      uploads its final model under ``"weights"``.
    * Server, on each arrival with staleness ``s = t - tau``:
      ``a_t = alpha * S(s)`` (:func:`mixing_weight`) and ``w <- (1 - a_t) w + a_t w_new``.
      Every non-empty call yields a new version (+1) and records the last ``a_t`` in
      ``state.extra["last_mixing_weight"]``. Several arrivals in one call are mixed in
      order, each with its own staleness, as one version (``window: sequential``, the
      default). An empty call returns ``(state, False)``.
    * ``window: stale_mix_mean``, for the windowed async mode (one call per window): each
      arrival with staleness ``s > 0`` is first mixed with the current global model,
      ``w_k <- a_s w_k + (1 - a_s) w``, a punctual one (``s = 0``) is taken as it is, and the
      new global model is the sample-weighted mean of the call's models. This is the FedAsync
      baseline of the PLGA paper's Table 2 as its authors ran it (github.com/MondayCat/PLGA,
      Algorithms/users/userFedAsync.py mixes a late client's model with the current global
      at ``0.8 (delay + 1)^-0.5`` before uploading; Algorithms/servers/serverFedAsync.py
      averages a round's uploads by sample count). Read sequentially, alpha = 0.8 would
      leave the first arrivals of a window weights of order 0.2^k: the window collapses onto
      its last punctual client.
    * Sample counts do not enter the rule (as in the paper).
    * Vectorized clients: supported (the client step is plain local SGD of the shared loop,
      with the proximal gradient ``rho (w - w_tau)`` when ``rho > 0``).
    """

    name: ClassVar[str] = "fedasync"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    stateless_clients: bool = True  # the client state passes through: None in, None out
    summary: ClassVar[str] = "FedAsync: mix each arriving model in with a staleness-discounted weight"
    paper: ClassVar[str] = "Xie, Koyejo, Gupta, Asynchronous Federated Optimization, arXiv:1903.03934, 2019"
    Params: ClassVar[type[AlgorithmParams]] = FedAsyncParams
    modes: ClassVar[frozenset[str]] = frozenset({"async"})
    upload_is_model: ClassVar[bool] = True
    vectorizable: ClassVar[bool] = True

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        extra = proximal_loss(start, self.params.rho, self.workspace) if self.params.rho > 0 else None
        local, metrics = train_from(self, start, data, rng, extra_loss=extra)
        return self.sgd_result(payload, client_state, data, local, metrics)

    def sgd_task(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """The client step's local SGD (for vectorized clients)."""
        return SGDTask(payload["weights"], data, self.params, rng, self.task_steps(data), prox_mu=self.params.rho)

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Upload the local model under ``"weights"``."""
        return model_result(local, client_state, data, metrics)

    def server_step_kind(self, state: ServerState, arrivals: list[Arrival]) -> str:
        """``"mix"``: each arrival mixed into the model in turn, whatever the state; with
        ``window: stale_mix_mean``, ``"mix N stale"``: only the ``N`` stale arrivals are mixed
        before the mean (:mod:`fedclock.algorithms.server_cost`)."""
        if self.params.window == "stale_mix_mean":
            return f"mix {sum(a.staleness > 0 for a in arrivals)} stale"
        return "mix"

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        p = self.params
        weights = state.tensors["weights"]
        a_t = 0.0
        if p.window == "stale_mix_mean":
            models, sizes = [], []
            for arrival in arrivals:
                local = arrival.upload["weights"].to(weights)
                if arrival.staleness > 0:
                    a_t = mixing_weight(p.alpha, p.staleness_fn, arrival.staleness, p.a, p.b)
                    local = a_t * local + (1.0 - a_t) * weights
                models.append(local)
                sizes.append(float(max(arrival.num_samples, 0)))
            total = sum(sizes)
            share = [n / total for n in sizes] if total > 0 else [1.0 / len(models)] * len(models)
            weights = sum((w * m for w, m in zip(share, models)), torch.zeros_like(weights))
            return state.evolve(tensors={**state.tensors, "weights": weights},
                                extra={**state.extra, "last_mixing_weight": a_t}), True
        for arrival in arrivals:
            a_t = mixing_weight(p.alpha, p.staleness_fn, arrival.staleness, p.a, p.b)
            weights = (1.0 - a_t) * weights + a_t * arrival.upload["weights"].to(weights)
        return state.evolve(tensors={**state.tensors, "weights": weights},
                            extra={**state.extra, "last_mixing_weight": a_t}), True
