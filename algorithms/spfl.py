"""SPFL, SPFL (1-step), SPFL-w and SPFL-w (1-step): personalized FL with softmax-normalized
gradient similarity (SNGS) per model stage."""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

import torch
from pydantic import Field, field_validator
from torch import nn

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult, \
    ServerState, Tensors, evaluate_flat
from fedclock.algorithms.similarity import ModelStages, row_softmax, stage_cosines
from fedclock.algorithms.training import local_sgd

SPFL_PAPER = ("Xie, Yin, Zhang, Chen, Wen, Yang, Mo, Personalized Heterogeneous Federated Learning with Gradient "
              "Similarity, 2021 (ICLR 2022 submission, OpenReview c4iTLTkpY5)")
SPFL_CODE = "github.com/MondayCat/PLGA"
"""The authors' code, linked from the paper (Sec. 4)."""


class SPFLParams(AlgorithmParams):
    """SPFL hyper-parameters (paper Sec. 4: B 128, alpha = beta = 0.01, Gamma 10, E 1, S 2)."""

    lr: float = Field(default=0.01, gt=0, description="beta, the local SGD step (each of the two steps per batch of "
                      "the twice local update, or the one step of the 1-step variants)")
    batch_size: int = Field(default=128, ge=1)
    server_step: Literal["code", "eq7"] = Field(
        default="code", description="code: w_i <- w_i - sum_j S~(i,j) g_j, the authors' code (no alpha, no |D_j|/|D|); "
        "eq7: w_i <- w_i - alpha sum_j (|D_j|/|D|) S~(i,j) g_j, eq. (7) literally (SPFL, SPFL 1-step only)")
    alpha: float = Field(default=0.01, gt=0, description="server learning rate of eq. (7); used only with "
                         "server_step: eq7")
    gamma: int = Field(default=10, ge=1, description="Gamma: model updates between two similarity refreshes")
    similarity_weights: Literal["sngs", "uniform"] = Field(
        default="sngs", description="sngs: the softmax-normalized gradient similarity rows (eq. 6); uniform: 1/M for "
        "each of the round's M arrivals, a control that isolates SNGS from the twice local update")
    finetune_steps: int = Field(default=0, ge=0, description="SGD steps each client runs on its train split "
                                "before its personalized test (0: no fine-tuning)")
    finetune_lr: float | None = Field(default=None, gt=0, description="fine-tuning step (default: lr = beta)")
    finetune_batch_size: int | None = Field(default=None, ge=1, description="fine-tuning batch (default: "
                                            "batch_size)")

    @field_validator("momentum")
    @classmethod
    def _plain_sgd(cls, value: float) -> float:
        if value != 0:
            raise ValueError("SPFL's local update is plain SGD (two steps per batch); momentum must be 0")
        return value


def _model_key(client: int) -> str:
    return f"model{client}"


def twice_grad_fn(lr: float, weight_decay: float, max_grad_norm: float | None) -> Callable[[nn.Module, Any], None]:
    """A ``local_sgd`` ``grad_fn`` for the "twice local update": it takes a first plain SGD
    step on the batch (``lr``, ``weight_decay``, clipping as the optimizer would), then
    recomputes the gradient at the moved weights for the optimizer's second step. Two
    successive SGD steps on the same batch, as ``client_train_schedule`` with
    ``local_two_update`` does in the authors' code (github.com/MondayCat/PLGA,
    SPFL/client/client.py)."""

    def grad_fn(model: nn.Module, closure: Any) -> None:
        closure().backward()
        moving = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(moving, max_grad_norm)
        with torch.no_grad():
            for p in moving:
                g = p.grad
                assert g is not None  # moving holds parameters with a gradient
                step = g + weight_decay * p if weight_decay else g
                p.sub_(lr * step)
        model.zero_grad(set_to_none=True)
        closure().backward()

    return grad_fn


class SPFL(ModelStages, Algorithm[SPFLParams]):
    """Subclass Personalized FL (SPFL), Xie et al., Sec. 3.1 and Algorithm 1.

    Readings (paper first; where it is ambiguous the authors' code, github.com/MondayCat/PLGA,
    settles it, and the file is named):

    * The server keeps one model ``w_i`` per client (``payload_is_shared = False``); a client
      never seen yet holds the initial model. Clients train from their own ``w_i``
      (SPFL/experiment_fed_persional_comperssion_v9_1_1.py, ``federate_train_v1``).
    * ClientUpdate: E epochs of B (``local_steps(n)`` batches). **Twice local update** ("mimic
      MAML", Sec. 4.1): on every batch two successive SGD steps of ``beta`` with the gradient
      recomputed at the moved weights (:func:`twice_grad_fn`; SPFL/client/client.py,
      ``local_two_update``; both counted). The 1-step variants take one step of beta.
      Upload ``g = w_start - w_end`` (eq. 2).
    * **Similarity refresh** (Algorithm 1, ``t % Gamma == 0``), realised on the clock: before
      the first model update and after every ``gamma`` model updates the next server round is
      a *similarity round*: every client receives ``w_bar = 1/N sum_i w_i`` (mean over the
      clients the server holds models for; the initial model before any) and runs
      ClientUpdate(w_bar); the server sets, per stage ``s`` (the model's ``stages``: ``base``
      / ``head`` for ``spfl_cnn``, as SPFL/aggregation_utils/aggregation_v4_1_1.py splits
      fc2 from the rest; parameters in no stage form one extra stage),
      ``S_s(i, j) = cos(g_i^s, g_j^s)`` (eq. 3) for the clients of that round, and **every
      personalized model restarts from the mean**, ``w_i <- w_bar`` (the box's
      ``w_gi^t = 1/N sum_i w_i^t``; the code restarts the head from the plain mean too,
      ``routine_set_v1``). No new server version; the round costs one ClientUpdate, as the
      clock charges; ``stop.rounds`` counts it, ``stop.versions`` counts model updates only.
      Pairs never measured have similarity 0. The refresh updates themselves are discarded
      (the box computes ClientUpdate(w_gi) twice; the code's ``init_set_v1`` likewise).
    * **Model update round** (eq. 7): each arriving client ``j`` uploads ``g_j`` from its own
      ``w_j``; for every client ``i`` the server holds (arrivals included), per stage,
      ``S~_s(i, .) = softmax_j S_s(i, j)`` over the round's arrivals (eq. 6; with full
      participation the paper's softmax over all clients) and

      - ``server_step: code`` (default): ``w_{s,i} <- w_{s,i} - sum_j S~_s(i, j) g_{s,j}``.
        No alpha and no ``|D_j| / |D|``, as in the authors' code, which however agrees with
        this rule only in part (SPFL/aggregation_utils/aggregation_v4_1_1.py):
        ``aggregation_op_v4`` adds ``sum_j S~(i, j) (w_j^end - w_j^start)`` to the last model
        on every layer, but no experiment script reaches it (it is behind
        ``get_aggregation_result_v3``, which nothing calls); the script
        experiment_fed_persional_comperssion_v9_3_2.py calls ``aggregation_op_v5``, the same
        rule on the base layers with the head (``fc2``) kept local (identity weights: each
        client adds only its own head update), and v9_1_1.py calls ``aggregation_op_v2``,
        which fuses the trained *models* with the softmax rows (SPFL-w's rule). This class
        applies the rule of ``aggregation_op_v4`` to every stage, head included. Taken
        literally, eq. (7) with
        alpha = 0.01 and weights summing to about 1/N moves a model by ~0.001 of one local
        update per round, which no run of the paper's length can turn into its accuracies;
        this reading is the one that reaches the paper's regime.
      - ``server_step: eq7``: ``w_{s,i} <- w_{s,i} - alpha sum_j (|D_j| / |D|) S~_s(i, j)
        g_{s,j}`` with ``|D| = sum_j |D_j|`` over the arrivals (eq. 7 literally; an ablation).
      - ``similarity_weights: uniform`` replaces every row of ``S~_s`` by ``1/M`` over the
        round's M arrivals (a control the paper lacks: SNGS off, the twice local update and
        everything else kept; every personalized model then moves by the same mean update).
    * Global (server) accuracy: ``w_bar`` on the global test set. Personalized accuracy: ``w_i``
      on client ``i``'s test split, optionally after ``finetune_steps`` SGD steps (``finetune_lr``,
      ``finetune_batch_size``) on its train split with batches drawn from a generator seeded by
      the client id (App. E, Table 8; applied at every evaluation, so set ``evaluation.every``
      to the run length to fine-tune only at the end).
    * Diagnostics (App. C, Figs. 4/5): at every refresh, per stage and client, the mean
      cosine of its refresh update with the other clients' (:meth:`diagnostics`, written to
      ``diagnostics.parquet``).
    """

    name: ClassVar[str] = "spfl"
    moves_global_model: ClassVar[bool] = False  # stage models, no single global "weights"
    summary: ClassVar[str] = "SPFL: per-client server models moved by per-stage softmax gradient similarity"
    paper: ClassVar[str] = SPFL_PAPER
    Params: ClassVar[type[AlgorithmParams]] = SPFLParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    payload_is_shared: ClassVar[bool] = False
    twice: ClassVar[bool] = True
    """Twice local update (two SGD steps per batch) instead of one."""
    """Two forward/backward passes per sample with the twice local update."""
    fuse_weights: ClassVar[bool] = False
    """SPFL-w: fuse the clients' trained weights instead of their updates."""

    # ------------------------------------------------------------------ state helpers
    @staticmethod
    def known_clients(state: ServerState) -> list[int]:
        """Clients the server holds a personalized model for, ascending."""
        return sorted(int(k[5:]) for k in state.tensors if k.startswith("model"))

    def client_model(self, state: ServerState, client: int) -> torch.Tensor:
        return state.tensors.get(_model_key(client), state.tensors["init"])

    def mean_model(self, state: ServerState) -> torch.Tensor:
        """``w_bar``: the mean of the personalized models (the initial model before any)."""
        known = self.known_clients(state)
        if not known:
            return state.tensors["init"]
        return torch.stack([state.tensors[_model_key(c)] for c in known]).mean(dim=0)

    def refresh_due(self, state: ServerState) -> bool:
        updates = int(state.extra["updates"])
        return updates % self.params.gamma == 0 and int(state.extra["refreshed_at"]) != updates

    @staticmethod
    def similarity(state: ServerState, stage: str, rows: list[int], cols: list[int]) -> torch.Tensor:
        """``S_s`` restricted to ``rows x cols`` (0 for pairs never measured)."""
        sim = state.tensors[f"sim/{stage}"]
        m = sim.shape[0]
        out = torch.zeros(len(rows), len(cols))
        for a, i in enumerate(rows):
            for b, j in enumerate(cols):
                if i < m and j < m:
                    out[a, b] = sim[i, j]
        return out

    # ------------------------------------------------------------------ hooks
    def init_server(self, rng: torch.Generator) -> ServerState:
        tensors = {"init": self.model_factory.initial_weights(rng), "diag/similarity": torch.zeros(0, 4)}
        for stage in self.stages:
            tensors[f"sim/{stage}"] = torch.zeros(0, 0)
        return ServerState(tensors=tensors, extra={"updates": 0, "refreshed_at": -1})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        if self.refresh_due(state):
            return {"weights": self.client_model(state, client), "refresh_from": self.mean_model(state)}
        return {"weights": self.client_model(state, client)}

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        refresh = "refresh_from" in payload
        start = payload["refresh_from"] if refresh else payload["weights"]
        p = self.params
        grad_fn = twice_grad_fn(p.lr, p.weight_decay, p.max_grad_norm) if self.twice else None
        local, metrics = local_sgd(self.workspace, self.model_factory, start, data, p, rng, self.task_steps(data),
                                   grad_fn=grad_fn)
        start = start.to(local.device)
        if refresh:
            upload = {"refresh": start - local}
        elif self.fuse_weights:
            upload = {"weights": local}
        else:
            upload = {"update": start - local}
        return ClientResult(upload=upload, state=client_state, num_samples=data.num_train, metrics=metrics)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        tensors = dict(state.tensors)
        extra = dict(state.extra)
        refresh = [a for a in arrivals if "refresh" in a.upload]
        regular = [a for a in arrivals if "refresh" not in a.upload]
        if refresh:
            self._refresh(state, tensors, refresh, int(extra["updates"]))
            extra["refreshed_at"] = extra["updates"]
        if not regular:
            return state.evolve(tensors=tensors, extra=extra), False
        probe = ServerState(tensors=tensors, version=state.version, extra=extra)
        targets = sorted(set(self.known_clients(probe)) | {a.client for a in regular})
        cols = [a.client for a in regular]
        models = torch.stack([self.client_model(probe, c) for c in targets])
        key = "weights" if self.fuse_weights else "update"
        uploads = torch.stack([a.upload[key].to(models) for a in regular])
        if self.params.server_step == "eq7":
            total = sum(a.num_samples for a in regular)
            share = torch.tensor([a.num_samples / total if total > 0 else 1.0 / len(regular) for a in regular])
            scale = self.params.alpha * share
        else:
            scale = torch.ones(len(regular))
        for stage, idx in self.stages.items():
            if self.params.similarity_weights == "uniform":
                weights = torch.full((len(targets), len(cols)), 1.0 / len(cols))
            else:
                weights = row_softmax(self.similarity(probe, stage, targets, cols))
            if self.fuse_weights:
                models[:, idx] = weights @ uploads[:, idx]
            else:
                models[:, idx] -= (weights * scale) @ uploads[:, idx]
        for row, c in enumerate(targets):
            tensors[_model_key(c)] = models[row].clone()
        extra["updates"] = int(extra["updates"]) + 1
        return state.evolve(tensors=tensors, extra=extra), True

    def _refresh(self, state: ServerState, tensors: dict[str, torch.Tensor], arrivals: list[Arrival],
                 updates: int) -> None:
        """Store the per-stage cosines of the refresh updates (growing the matrices), log each
        client's mean similarity per stage, and restart every personalized model (the
        arrivals' included) from the mean ``w_bar`` the clients trained from."""
        clients = [a.client for a in arrivals]
        grads = torch.stack([a.upload["refresh"].float() for a in arrivals])
        cos = stage_cosines(grads, self.stages)
        index = torch.tensor(clients)
        rows = []
        n = len(clients)
        for s, (stage, block) in enumerate(cos.items()):
            old = tensors[f"sim/{stage}"]
            m = max(old.shape[0], max(clients) + 1)
            sim = torch.zeros(m, m)
            sim[:old.shape[0], :old.shape[1]] = old
            sim[index.unsqueeze(1), index.unsqueeze(0)] = block
            tensors[f"sim/{stage}"] = sim
            others = (block.sum(dim=1) - block.diagonal()) / (n - 1) if n > 1 else torch.full((n,), float("nan"))
            for k, c in enumerate(clients):
                rows.append([float(updates), float(s), float(c), float(others[k])])
        tensors["diag/similarity"] = torch.cat([tensors["diag/similarity"], torch.tensor(rows)])
        mean = self.mean_model(state)
        for c in sorted(set(self.known_clients(state)) | set(clients)):
            tensors[_model_key(c)] = mean.clone()

    def diagnostics(self, state: ServerState) -> list[dict[str, Any]]:
        """One row per (refresh, stage, client): ``mean_similarity``, the mean cosine
        ``S_s(i, j)`` of the client's refresh update with the other clients' of that refresh
        (App. C, Figs. 4/5: mean gradient similarity per client and per stage);
        ``updates`` is the number of model updates before the refresh."""
        names = list(self.stages)
        return [{"table": "similarity", "updates": int(u), "stage": names[int(s)], "client": int(c),
                 "mean_similarity": float(v)} for u, s, c, v in state.tensors["diag/similarity"].tolist()]

    # ------------------------------------------------------------------ evaluation
    def global_weights(self, state: ServerState) -> torch.Tensor:
        """The mean of the personalized models, ``w_bar`` (:meth:`mean_model`)."""
        return self.mean_model(state)

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        weights = payload["weights"]
        p = self.params
        if p.finetune_steps > 0 and data.num_train > 0:
            ft = p.model_copy(update={"lr": p.finetune_lr or p.lr, "batch_size": p.finetune_batch_size or p.batch_size})
            rng = torch.Generator().manual_seed(data.client)
            weights, _ = local_sgd(self.workspace, self.model_factory, weights, data, ft, rng, p.finetune_steps)
        return evaluate_flat(self.workspace, self.model_factory, weights, data.x_test, data.y_test, batch_size)


class SPFLOneStep(SPFL):
    """SPFL (1-step): as :class:`SPFL` with one SGD step of ``beta`` per batch instead of the
    twice local update (the paper's ablation, Table 1)."""

    name: ClassVar[str] = "spfl_1step"
    summary: ClassVar[str] = "SPFL (1-step): SPFL with one local SGD step per batch"
    twice: ClassVar[bool] = False


class SPFLW(SPFL):
    """SPFL-w (Sec. 4.1): as :class:`SPFL` (same refresh rounds, same twice local update), but
    the server fuses weights: clients upload their trained model ``w_j^end`` and the server
    sets ``w_{s,i} <- sum_j S~_s(i, j) w_{s,j}^end``. The paper writes ``1/M sum_j S~_s w_j``;
    rows of ``S~`` already sum to 1 over the round's arrivals, and the authors' code fuses
    with the softmax rows alone (github.com/MondayCat/PLGA,
    SPFL/aggregation_utils/aggregation_v4_1_1.py, ``aggregation_op_v2``), so neither 1/M,
    alpha nor ``|D_j|`` enters."""

    name: ClassVar[str] = "spfl_w"
    summary: ClassVar[str] = "SPFL-w: per-stage softmax-similarity fusion of the clients' trained weights"
    fuse_weights: ClassVar[bool] = True


class SPFLWOneStep(SPFLW):
    """SPFL-w (1-step): :class:`SPFLW` with one SGD step of ``beta`` per batch (Table 1)."""

    name: ClassVar[str] = "spfl_w_1step"
    summary: ClassVar[str] = "SPFL-w (1-step): SPFL-w with one local SGD step per batch"
    twice: ClassVar[bool] = False
