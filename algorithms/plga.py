"""LGA and PLGA: asynchronous FL with leap gradient approximation of stragglers' models and
(PLGA) stage-wise personalized models."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult, \
    ServerState, Tensors, evaluate_flat
from fedclock.algorithms.similarity import ModelStages, cosine, leap_weight
from fedclock.algorithms.spfl import SPFL_PAPER
from fedclock.algorithms.training import delta_result, train_from


class PLGAParams(AlgorithmParams):
    """LGA/PLGA hyper-parameters (paper's async setup: B 64, beta 0.001, E 20)."""

    lr: float = Field(default=0.001, gt=0, description="beta, the local learning rate")
    batch_size: int = Field(default=64, ge=1)
    leap: Literal["eq10", "eq11"] = Field(default="eq11", description="leap approximation form: eq10 starts "
                                          "from w^{t0}, eq11 from w^{tau} (the paper's better one)")
    stagewise: bool = Field(default=True, description="PLGA: personalize per model stage (eq 13/14) instead "
                            "of with one whole-model weight (eq 12)")
    max_staleness: int = Field(default=16, ge=1, description="global models kept for the leap; an arrival "
                               "staler than this is ignored")
    taylor: bool = Field(default=True, description="the leap's first-order Taylor term S~ d*d*(w^tau - w^t1); "
                         "false: a straggler's model is w^tau + d (eq11) or w^t0 + d (eq10), a control")
    train_from: Literal["global", "personal"] = Field(
        default="global", description="PLGA: clients train from the global model w^t and the personalized model is "
        "used only to evaluate (Alg. 2, the authors' code); personal: train from the personalized model")


def _hist(version: int) -> str:
    return f"hist{version}"


class LGA(ModelStages, Algorithm[PLGAParams]):
    """Leap Gradient Approximation (LGA), the non-personalized part of PLGA.

    Xie et al., "Personalized Heterogeneous Federated Learning with Gradient Similarity"
    (PLGA for asynchronous FL: Sec. 3, Algorithm 2). Meant for the windowed async
    mode (``mode: {type: async, aggregation: {window_s: ...}}``): one server round per window.

    * Client ``k`` trains ``local_steps(n)`` SGD steps (lr = beta) from the global model it
      received (Algorithm 2's ClientUpdate(w^t, C_k, beta)).
      Algorithm 2's "local step E" (E = 20, Sec. 4.2) is a number of mini-batch steps, not
      epochs: the authors' client runs ``local_epochs`` iterations of one batch each
      (github.com/MondayCat/PLGA, Algorithms/users/userPLGP.py at commit 8735226,
      ``train``), so the paper's files set ``local_steps: 20``
      and uploads its update ``d = w_end - w_start``, applied to the global model ``w^{t0}``
      of the version it was dispatched at: ``w_k^{t0} = w^{t0} + d``.
    * The server keeps the global models of the last ``max_staleness + 1`` versions. For an
      arrival dispatched at ``t0`` handled at version ``tau > t0`` (a straggler), with
      ``w^{t1}`` the global model of version ``t0 + 1``:
      ``S(k) = cos(w^{t1} - w^{t0}, d)``, ``S~(k) = e^{S(k)} / (e^1 + e^{S(k)})`` and
      eq (10): ``w_k^{tau} = w^{t0} + S~(k) d*d*(w^{tau} - w^{t1}) + d``, or
      eq (11) (default): ``w_k^{tau} = w^{tau} + S~(k) d*d*(w^{tau} - w^{t1}) + d``
      (elementwise products). A punctual arrival (``tau = t0``) is used as ``w^{t0} + d``.
      ``taylor: false`` drops the Taylor term (``w_k^{tau} = w^{tau} + d``, or ``w^{t0} + d``
      with eq10): the control that isolates it. The authors' live client
      (github.com/MondayCat/PLGA, Algorithms/users/userPLGP.py, ``run``, at commit 8735226)
      weights the term with the raw cosine ``S(k)``, not ``S~(k)`` of eq. (9), takes
      ``w^{t1}`` as the global model it sees first after its dispatch, and applies the leap
      only for delays above 1 (a delay of 1 uploads ``w^{tau} + d``); this class follows the
      paper's eqs. (8)-(11). The term is small by construction: ``d*d*(w^tau - w^t1)`` is a
      product of three model differences.
      Arrivals staler than ``max_staleness`` are ignored (counted in
      ``extra["ignored_too_stale"]``).
    * ``w^{tau+1}`` = equal-weight mean of the punctual models and the approximated
      stragglers' models of the call (one window); an empty call changes nothing.
    * LGA sends every client the global model.
    """

    name: ClassVar[str] = "lga"
    moves_global_model: ClassVar[bool] = False  # keeps every version's model
    summary: ClassVar[str] = "LGA: stragglers' stale models moved forward by a leap gradient approximation"
    paper: ClassVar[str] = SPFL_PAPER
    Params: ClassVar[type[AlgorithmParams]] = PLGAParams
    modes: ClassVar[frozenset[str]] = frozenset({"async"})
    personalize: ClassVar[bool] = False

    def init_server(self, rng: torch.Generator) -> ServerState:
        w0 = self.model_factory.initial_weights(rng)
        return ServerState(tensors={"weights": w0, _hist(0): w0}, extra={"ignored_too_stale": 0})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        own = state.tensors.get(f"personal{client}")
        if own is None or not self.personalize:
            return {"weights": state.tensors["weights"]}
        if self.params.train_from == "personal":
            return {"weights": own}
        return {"weights": state.tensors["weights"], "personal": own}

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        """The client's personalized model (PLGA; the global one until it has one) on its test split."""
        return evaluate_flat(self.workspace, self.model_factory, payload.get("personal", payload["weights"]),
                             data.x_test, data.y_test, batch_size)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        local, metrics = train_from(self, start, data, rng)
        return delta_result(local, start, client_state, data, metrics)

    def leap(self, w_t0: torch.Tensor, w_t1: torch.Tensor, w_tau: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """The approximated straggler model ``w_k^{tau}`` (eq. 10 or 11)."""
        weight = leap_weight(cosine(w_t1 - w_t0, d))
        base = w_t0 if self.params.leap == "eq10" else w_tau
        if not self.params.taylor:
            return base + d
        return base + weight * d * d * (w_tau - w_t1) + d

    def personal_model(self, w_t0: torch.Tensor, w_t1: torch.Tensor, d: torch.Tensor, w_k: torch.Tensor,
                       w_tau: torch.Tensor) -> torch.Tensor:
        """PLGA's model for client ``k`` (eq. 12, or per stage eq. 13/14):
        ``w^{t0} + (1 - S~)(w_k^{tau} - w^{t0}) + S~ (w^{tau} - w^{t0})`` with
        ``S~ = e^S / (e + e^S)``, ``S = cos(w^{t1} - w^{t0}, d)``; ``w_k`` is the client's
        (leap-approximated) model and ``w^{tau}`` the global model of the round, before the
        aggregation."""
        ref = w_t1 - w_t0
        groups = self.stages.values() if self.params.stagewise else [torch.arange(w_t0.numel())]
        out = w_t0.clone()
        for idx in groups:
            s = leap_weight(cosine(ref[idx], d[idx]))
            out[idx] = w_t0[idx] + (1.0 - s) * (w_k[idx] - w_t0[idx]) + s * (w_tau[idx] - w_t0[idx])
        return out

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        tensors = dict(state.tensors)
        extra = dict(state.extra)
        tau = state.version
        w_tau = tensors["weights"]
        used: list[tuple[Arrival, torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (arrival, w^{t0}, d, model)
        for a in arrivals:
            t0 = a.version_dispatched
            if _hist(t0) not in tensors or (t0 < tau and _hist(t0 + 1) not in tensors):
                extra["ignored_too_stale"] = int(extra["ignored_too_stale"]) + 1
                continue
            w_t0 = tensors[_hist(t0)]
            d = a.upload["delta"].to(w_t0)
            model = w_t0 + d if t0 >= tau else self.leap(w_t0, tensors[_hist(t0 + 1)], w_tau, d)
            used.append((a, w_t0, d, model))
        if not used:
            return state.evolve(tensors=tensors, extra=extra), False
        w_new = torch.stack([m for _, _, _, m in used]).mean(dim=0)
        if self.personalize:
            for a, w_t0, d, model in used:
                t0 = a.version_dispatched
                w_t1 = w_new if t0 >= tau else tensors[_hist(t0 + 1)]
                tensors[f"personal{a.client}"] = self.personal_model(w_t0, w_t1, d, model, w_tau)
        tensors["weights"] = w_new
        tensors[_hist(tau + 1)] = w_new
        for key in [k for k in tensors if k.startswith("hist") and int(k[4:]) < tau + 1 - self.params.max_staleness]:
            del tensors[key]
        return state.evolve(tensors=tensors, extra=extra), True


class PLGA(LGA):
    """Personalized LGA (PLGA): LGA's server plus a personalized model per client.

    When client ``k``'s result (dispatched at ``t0``) is handled at round ``tau``, the server
    stores for ``k``
    ``w_kp = w^{t0} + (1 - S~_s(k)) (w_k^{tau} - w^{t0}) + S~_s(k) (w^{tau} - w^{t0})``
    per stage ``s`` (eq 13/14; ``stagewise: false`` gives eq 12 with one whole-model weight),
    ``S~_s(k) = e^{S_s(k)} / (e + e^{S_s(k)})``, ``S_s(k) = cos(w_s^{t1} - w_s^{t0}, d_s)`` with
    ``d`` the client's update; ``w_k^{tau}`` is the (leap-approximated) model of ``k``.
    ``w^{tau}`` is the global model of round ``tau`` *before* the aggregation: Algorithm 2
    applies (8), (13), (11), (14) in sequence and only then aggregates. For a punctual client
    (``t0 = tau``) the last term vanishes and ``t1`` is the model the aggregation produces
    (the only later global model there is), so ``w_kp = w^{t0} + (1 - S~) d``. ``k`` is
    evaluated with ``w_kp`` (personalized accuracy; clients never aggregated with the global
    model) but trains from the global model ``w^t``, as Algorithm 2's ClientUpdate(w^t, ...)
    and the authors' client do (``train_from: global``, default; ``train_from: personal``
    trains from ``w_kp`` instead, the reading this library used before). The authors' live
    client computes no personalized model at all (its lines are commented out and it tests
    its locally trained model; github.com/MondayCat/PLGA, Algorithms/users/userPLGP.py at
    commit 8735226), so eq. (12)-(14) here follow the paper. The global accuracy is the
    global model's.
    """

    name: ClassVar[str] = "plga"
    summary: ClassVar[str] = "PLGA: LGA plus stage-wise similarity-weighted personalized models"
    payload_is_shared: ClassVar[bool] = False
    personalize: ClassVar[bool] = True
