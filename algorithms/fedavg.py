"""FedAvg (McMahan et al. 2017), the synchronous baseline."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors
from fedclock.algorithms.schedules import ScheduleParams, decayed, params_for_round, payload_round, round_bytes, \
    round_payload
from fedclock.algorithms.ssl import ObjectiveMixin, ObjectiveParams
from fedclock.algorithms.training import delta_result, local_sgd
from fedclock.algorithms.vectorized import SGDTask


class FedAvgParams(ScheduleParams, ObjectiveParams):
    """FedAvg hyper-parameters: local SGD ones (with the local lr decay), the local objective
    (supervised, or the unlabeled SimCLR / SimSiam of :mod:`fedclock.algorithms.ssl`) and the
    server learning rate and its decay."""

    server_lr: float = Field(default=1.0, gt=0, description="server learning rate eta_g applied to the "
                             "weighted mean delta")
    weighting: Literal["samples", "steps"] = Field(
        default="samples", description="weight of a delta: its client's samples n_p, or the local steps tau_p it ran")
    server_lr_decay: float = Field(default=1.0, gt=0, le=1, description="server lr of round t is "
                                   "server_lr * server_lr_decay**t")


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
    * ``weighting: steps`` replaces ``n_p`` by the local steps ``tau_p`` each client reported
      (``Arrival.steps``; clients may do partial work): ``w <- w + eta_g * sum_p (tau_p /
      sum_q tau_q) Delta_p``, equal weights if every client ran zero steps. This is a
      heuristic option, not the paper's rule (see FedNova for the principled correction).
    * Late results: with the sync mode's ``late_results: drop`` this is the SPFL/PLGA
      paper's "FedAvg (Sync)". With ``include``, a stale arrival (dispatched in an earlier
      round, ``staleness > 0``) is folded into the round it arrives in with exactly the same
      ``n_p`` weight as a punctual one: its delta, computed against the older ``w_tau``, is
      added to the current ``w`` (no staleness discount).
    * Schedules (:mod:`~fedclock.algorithms.schedules`): round ``t`` = the server version;
      local lr ``lr * lr_decay**t`` (the payload carries ``t`` when it decays), server lr
      ``server_lr * server_lr_decay**t``. Both decays default to 1 (constant rates).
    * Objective (``objective``): ``supervised`` is the paper's cross-entropy. ``simclr`` /
      ``simsiam`` make it the FedAvg baseline of unsupervised federated representation
      learning (FedStyle's Table 1 "FedAvg"): the model is encoder + projector (+ predictor),
      the local loss is the unlabeled two-view objective, and the whole model is averaged.
    * Vectorized clients (``runtime.vectorize``, :mod:`~fedclock.algorithms.vectorized`):
      supported with the ``supervised`` objective (the client step is plain local SGD of the
      shared loop); the unlabeled objectives are rejected by the loader. Subclasses do not
      inherit this.
    """

    name: ClassVar[str] = "fedavg"
    stateless_clients: bool = True  # the client state passes through: None in, None out
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised", "simclr", "simsiam"})
    summary: ClassVar[str] = "Federated Averaging: sample-weighted mean of local SGD deltas"
    paper: ClassVar[str] = ("McMahan et al., Communication-Efficient Learning of Deep Networks from "
                            "Decentralized Data, AISTATS 2017")
    Params: ClassVar[type[AlgorithmParams]] = FedAvgParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    vectorizable: ClassVar[bool] = True
    upload_is_delta: ClassVar[bool] = True
    aggregates_deltas: ClassVar[bool] = True

    @classmethod
    def vectorize_params_problem(cls, params: AlgorithmParams) -> str | None:
        """Vectorized clients train the supervised objective only."""
        objective = getattr(params, "objective", "supervised")
        if objective != "supervised":
            return (f"vectorized clients train the supervised objective only "
                    f"(algorithm.objective is {objective!r})")
        return None

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"weights": state.tensors["weights"], **round_payload(self.params, state.version)}

    def download_bytes(self) -> int:
        return super().download_bytes() + round_bytes(self.params)

    def server_lr_at(self, version: int) -> float:
        """The server learning rate applied when the server is at ``version``."""
        return decayed(self.params.server_lr, self.params.server_lr_decay, version)

    def local_train(self, payload: Tensors, data: ClientData, rng: torch.Generator,
                    **hooks: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """:func:`~fedclock.algorithms.training.local_sgd` from ``payload["weights"]`` on the
        workspace, ``task_steps(data)`` steps at the payload round's local learning rate;
        ``hooks`` are passed through (``extra_loss``, ``loss_fn``, ``grad_fn``, ...)."""
        params = params_for_round(self.params, payload_round(payload))
        return local_sgd(self.workspace, self.model_factory, payload["weights"], data, params, rng,
                         self.task_steps(data), **hooks)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        local, metrics = self.local_train(payload, data, rng, loss_fn=self.objective_loss(rng))
        return self.sgd_result(payload, client_state, data, local, metrics)

    def sgd_task(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """The supervised client step's local SGD (for vectorized clients)."""
        params = params_for_round(self.params, payload_round(payload))
        return SGDTask(payload["weights"], data, params, rng, self.task_steps(data))

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Upload ``"delta" = local - w_t``; the client state passes through."""
        return delta_result(local, payload["weights"], self.keep_local_body(client_state, local), data, metrics)

    def server_step_kind(self, state: ServerState, arrivals: list[Arrival]) -> str:
        """``"aggregate"``: every step averages its arrivals' deltas and applies the mean, whatever
        the state (:mod:`fedclock.algorithms.server_cost`)."""
        return "aggregate"

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        weights = state.tensors["weights"]
        sizes = [a.num_samples for a in arrivals] if self.params.weighting == "samples" else \
            [arrival_steps(a) for a in arrivals]
        total = sum(sizes)
        step = torch.zeros_like(weights)
        for a, size in zip(arrivals, sizes):
            coef = size / total if total > 0 else 1.0 / len(arrivals)
            step.add_(a.upload["delta"].to(step), alpha=coef)
        new_weights = weights + self.server_lr_at(state.version) * step
        return state.evolve(tensors={**state.tensors, "weights": new_weights},
                            extra=dict(state.extra)), True


class FedAvgWithServerVector(FedAvg):
    """Base of FedAvg variants (not registered itself) whose server also holds one
    model-sized vector, zero at start and named ``server_vector`` in the state, that goes
    down with the weights in every payload (so the download is twice the model): SCAFFOLD's
    server control, FedCM's momentum."""

    server_vector: ClassVar[str]

    def init_server(self, rng: torch.Generator) -> ServerState:
        weights = self.model_factory.initial_weights(rng)
        return ServerState(tensors={"weights": weights, self.server_vector: torch.zeros_like(weights)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"weights": state.tensors["weights"], self.server_vector: state.tensors[self.server_vector],
                **round_payload(self.params, state.version)}

    def download_bytes(self) -> int:
        return 2 * self.model_factory.num_params * 4 + round_bytes(self.params)


def arrival_steps(arrival: Arrival) -> int:
    """The local steps an arrival reports; an error when the runtime did not pass them."""
    if arrival.steps is None:
        raise ValueError(f"arrival from client {arrival.client} does not say how many local steps it ran")
    return arrival.steps
