"""FedReCo: consensus optimization at the representation, and its private variant."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn
from torch.func import functional_call, grad, vmap

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult, \
    ServerState, Tensors, evaluate_flat
from fedclock.algorithms.dp import DPParams, add_noise, clip_to_norm, state_privacy_report, with_upload_counts
from fedclock.algorithms.models import FedModel, ModelFactory
from fedclock.algorithms.personal import epoch_steps, finetune_evaluate, train_part, with_head
from fedclock.algorithms.training import BatchLoss, batches


Reduction = Literal["mean", "sum"]
"""How the representation penalty reduces over a batch's samples."""

INIT_BODY = "body_init"
"""Server tensor: the global body u_0 as initialized (for :func:`body_motion`)."""
LAST_CHANGE = "body_change"
"""Server bookkeeping: the relative change of u_0 in the latest server step."""


def relative_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """``||a - b|| / ||b||`` (L2 over every coordinate; NaN when ``b`` is zero)."""
    norm = float(b.double().norm())
    return float((a.double() - b.double()).norm()) / norm if norm > 0 else float("nan")


def body_motion(state: ServerState, body: slice) -> dict[str, float]:
    """Whether the consensus acts, as two run metrics of ``state``: ``global_body_drift``,
    ``||u_0 - u_0(init)|| / ||u_0(init)||``, how far the global body has moved from its
    initialization; ``global_body_change``, ``||u_0^t - u_0^{t-1}|| / ||u_0^{t-1}||`` of the latest
    server step (NaN before the first). NaN for a state without the initial body."""
    init = state.tensors.get(INIT_BODY)
    drift = relative_distance(state.tensors["weights"][body], init) if init is not None else float("nan")
    return {"global_body_drift": drift, "global_body_change": float(state.extra.get(LAST_CHANGE, float("nan")))}


class FedReCoParams(AlgorithmParams):
    """FedReCo hyper-parameters; defaults are the paper's Table 1 setup. ``lr`` is eta_v and
    eta_u unless ``head_lr``/``body_lr`` are set; ``local_epochs``/``local_steps`` give K_u."""

    lr: float = Field(default=0.01, gt=0, description="local learning rate (eta_v and eta_u unless set apart)")
    batch_size: int = Field(default=48, ge=1)
    max_grad_norm: float | None = Field(default=10.0, gt=0, description="clip local gradients to this norm")
    head_lr: float | None = Field(default=None, gt=0, description="eta_v, head steps (default: lr)")
    body_lr: float | None = Field(default=None, gt=0, description="eta_u, body steps (default: lr)")
    server_lr: float = Field(default=0.001, gt=0, description="gradient: eta_0, the server's step on the global "
                             "body (the full paper gives no value; 0.001 is the workshop's number); average: the "
                             "learning rate of the client's copy of the global body (workshop App. A.2: 0.001)")
    lam: float = Field(default=0.01, ge=0, description="lambda of the representation penalty lambda/2 H")
    head_epochs: float = Field(default=1.0, gt=0, description="K_v as epochs of head steps")
    head_steps: int | None = Field(default=None, ge=1, description="K_v as a step count (overrides head_epochs)")
    server_update: Literal["gradient", "average"] = Field(
        default="gradient", description="gradient: the full paper's server step with the penalty's gradient; "
        "average: the workshop version, the server averages locally trained copies of the global body")
    penalty_reduction: Reduction = Field(
        default="mean", description="mean: H averages ||h - h0||^2 over the batch (the paper's eq. (5)); sum: sums "
        "it (the authors' code), i.e. an effective mean-form lambda of lam x batch (0.01 x 48 = 0.48)")
    server_gradient_data: Literal["batch", "all"] = Field(
        default="batch", description="the data of the uploaded g_p: batch, one fresh batch (Alg. 1, line 18); all, "
        "the client's whole training split in one pass (the authors' code)")
    server_clip: float | None = Field(default=None, gt=0, description="clip the cohort-mean gradient to this L2 "
                                      "norm before the server step (the authors' code: 10); default none")
    finetune_head_epochs: float = Field(default=0.0, ge=0, description="epochs of head-only fine-tuning of the "
                                        "personal model before each personalized test (the authors' final "
                                        "round: 9); 0 tests it as it is")


def representation_penalty(h: torch.Tensor, h0: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """``H = mean over the batch of ||h - h0||^2`` (features flattened per sample); with
    ``reduction="sum"`` the sum over the batch (``||h - h0||_F^2``, the authors' code)."""
    diff = (h - h0).reshape(h.shape[0], -1)
    per_sample = (diff ** 2).sum(dim=1)
    return per_sample.sum() if reduction == "sum" else per_sample.mean()


class FedReCo(Algorithm[FedReCoParams]):
    """FedReCo: personalized FL by consensus on the representation.

    "Consensus Optimization at Representation: Improving Personalized Federated Learning
    via Data-Centric Regularization" (full version: the server steps the global body with
    the aggregated gradient of the representation penalty; workshop version: the server
    averages locally trained copies of the global body).

    Notation: client p keeps a body u_p and a head v_p (persistent state ``{"weights":
    [u_p, v_p]}``); the server keeps the global body u_0. ``h(x; u)`` is the body's output and
    ``H(u, u') = mean_batch ||h(x; u) - h(x; u')||^2`` on the same batch.

    ``server_update: gradient`` (default, full version), per task with u_0^t received:
      1. K_v head steps (eta_v) on ``f_p(u_p, v)``, u_p fixed;
      2. K_u body steps (eta_u) on ``f_p(u, v_p) + lam/2 H(u, u_0^t)``, u_0^t fixed, the same
         batch through both bodies;
      3. on one fresh batch, ``g_p = grad_{u_0} H(u_p^{t+1}, u_0^t)`` — uploaded (body-sized);
      4. server: ``u_0 <- u_0 - eta_0 mean_p g_p`` (unweighted mean over the cohort).
    ``server_update: average`` (workshop version): the client also keeps a head v_{0,p}
    paired with the global body (state ``"global_head"``). First it trains v_{0,p} for K_v
    steps (eta_v) on ``f_p(u_0^t, v)``, then a copy u_{0,p} of u_0^t for K_u steps (learning
    rate ``server_lr``, the workshop's rate of the global feature extractor) on
    ``f_p(u, v_{0,p}) + lam/2 H(u, u_p^t)`` (u_p^t: the personal body before this task), then
    (u_p, v_p) as in steps 1-2; it uploads u_{0,p} and the server sets u_0 to the unweighted
    mean of the uploaded bodies. (**Resolved**: the paper's ``H(u_{0,p}, u_{0,p})`` and
    ``H(u_p, u_p^t)`` are typos whose gradients vanish; the pairs above are used.)

    Defaults are the Table 1 setup (workshop App. A): eta_u = eta_v = 0.01, lam = 0.01, batch
    48, gradient clipping to norm 10 in every local step, K_v = K_u = one epoch, and
    ``server_lr`` = 0.001. In the workshop version 0.001 is the learning rate "for the global
    feature extractor", i.e. of the client's K_u body steps on the copy u_{0,p} (its head
    v_{0,p} trains at eta_v): ``server_update: average`` uses ``server_lr`` exactly there.
    The full version's server step size eta_0 of eq. (8) is a different quantity for which
    the paper gives no value (its appendix with the details is missing); the default
    eta_0 = 0.001 of ``server_update: gradient`` is borrowed from the workshop's number, not
    taken from the full paper.
    **Choices:** on a client's first task u_p and v_p (and v_{0,p}) start from the download,
    which is the global body plus the shared initial head drawn by the server (the head part
    of the download never changes, so download bytes are the whole model and upload bytes
    the body only); batches come from the task's generator in the order of the phases above;
    virtual-time cost: one pass per head-step sample, two per body-step sample (two bodies
    forward), two per sample of the gradient batch. The result reports the local steps run
    (head plus body steps of every pair trained; the gradient batch is not a step), like
    FedRep's. Personalized accuracy: (u_p, v_p).
    Global accuracy: u_0 with the shared initial head (FedReCo trains no global classifier).

    **The authors' code** (``oyhah/FedReCo``, ``models/distributed_training_utils.py``:
    ``train_cnn_FedReCo``, ``global_gradient``, ``Server.first_part_update``; ``main_fed.py``)
    differs from the paper's text in four places; each is an option here, off by default
    (the defaults follow the paper's Algorithm 1 and eq. (5)):

    * ``penalty_reduction: sum`` — the code's penalty is ``||h - h0||_F^2`` over the batch, a
      sum over samples, where eq. (5)'s ``H_i`` is an expectation (our batch mean). On a
      batch of ``b`` samples the sum is ``b`` times the mean, so ``lam`` with ``sum`` acts as
      an **effective lambda of lam x b** in the mean form: the paper's 0.01 at batch 48 is
      0.48 (a smaller last batch of an epoch gets less). It also scales the uploaded
      gradient by the number of samples it is taken on (below).
    * ``server_gradient_data: all`` — the code computes ``g_p`` on the client's whole
      training split in one pass (a loader with batch = the split), not on one fresh batch;
      with ``sum`` this is ``n`` times the split's mean gradient (n = 980 on FMNIST).
    * ``server_clip: 10`` — the server clips the cohort-mean gradient to L2 norm 10 (the
      code's ``max_norm``) before its step. With the two options above the mean gradient is
      hundreds of times larger than the batch-mean one, so the clip binds and the server
      moves ``u_0`` by about ``eta_0 x 10`` per round (the code's ``lr_server`` default is
      0.01; the paper's workshop version gives 0.001).
    * ``finetune_head_epochs: 9`` — the code's last round (every client) trains the head for
      ``last_local_ep - local_rep_ep = 10 - 1 = 9`` epochs (then the body one epoch) and
      reports that model. Here the head is fine-tuned at evaluation (not kept), so the final
      evaluation of a run is the code's final round without its last body epoch.
    """

    name: ClassVar[str] = "fedreco"
    partial_work: ClassVar[bool] = False  # head steps then body steps (and the workshop variant's global pair)
    summary: ClassVar[str] = "personal bodies and heads, consensus of representations with a global body"
    paper: ClassVar[str] = ("Consensus Optimization at Representation: Improving Personalized Federated Learning "
                            "via Data-Centric Regularization (FedReCo)")
    Params: ClassVar[type[AlgorithmParams]] = FedReCoParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    def __init__(self, params: FedReCoParams, model_factory: ModelFactory) -> None:
        super().__init__(params, model_factory)
        self._anchor: FedModel | None = None

    @property
    def anchor(self) -> FedModel:
        """A second model holding the fixed body of the penalty (u_0^t or u_p^t)."""
        if self._anchor is None:
            self._anchor = self.model_factory.build().to(next(self.workspace.parameters()).device)
        return self._anchor

    def to(self, device: torch.device | str) -> "FedReCo":
        super().to(device)
        self._anchor = self.anchor.to(device)
        return self

    # ------------------------------------------------------------------ steps
    def head_step_count(self, n: int) -> int:
        """K_v for a client with ``n`` training samples."""
        p = self.params
        return p.head_steps if p.head_steps is not None else epoch_steps(n, p.batch_size, p.head_epochs)

    def penalized_loss(self, anchor_weights: torch.Tensor) -> BatchLoss:
        """``CE(model(x), y) + lam/2 H(u, u_anchor)`` with the anchor body frozen."""
        anchor = self.anchor
        self.model_factory.load_flat(anchor, anchor_weights)
        lam, reduction = self.params.lam, self.params.penalty_reduction

        def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            h = model.body(x)  # type: ignore[operator]
            with torch.no_grad():
                h0 = anchor.body(x)
            logits = model.head(h)  # type: ignore[operator]
            return F.cross_entropy(logits, y) + 0.5 * lam * representation_penalty(h, h0, reduction)

        return loss

    def train_pair(self, start: torch.Tensor, anchor_weights: torch.Tensor, data: ClientData,
                   rng: torch.Generator, body_lr: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """K_v head steps (eta_v), then K_u body steps (``body_lr``, default eta_u) with the
        penalty towards the body of ``anchor_weights``; returns the trained flat model and
        metrics (losses and the steps run)."""
        p, ws, f = self.params, self.workspace, self.model_factory
        n = data.num_train
        headed, m_head = train_part(ws, f, start, data, p, rng, self.head_step_count(n), "head", lr=p.head_lr)
        out, m_body = train_part(ws, f, headed, data, p, rng, self.local_steps(n), "body",
                                 lr=body_lr if body_lr is not None else p.body_lr,
                                 loss_fn=self.penalized_loss(anchor_weights))
        return out, {"head_loss": m_head["train_loss"], "train_loss": m_body["train_loss"],
                     "steps": m_head["steps"] + m_body["steps"]}

    def gradient_batch(self, personal: torch.Tensor, global_weights: torch.Tensor, data: ClientData,
                       rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Step 3's data: ``(x, h(x; u_p))`` with ``x`` one fresh batch drawn from ``rng``
        (after the training phases) or, with ``server_gradient_data: all``, the whole training
        split (no draw); the anchor model is loaded with ``global_weights``."""
        f, ws = self.model_factory, self.workspace
        if self.params.server_gradient_data == "all":
            x = data.x_train
        else:
            idx = next(batches(data.num_train, self.params.batch_size, 1, rng)).to(data.x_train.device)
            x = data.x_train[idx]
        f.load_flat(ws, personal)
        f.load_flat(self.anchor, global_weights)
        with torch.no_grad():
            h = ws.body(x)
        return x, h

    def penalty_gradient(self, personal: torch.Tensor, global_weights: torch.Tensor, data: ClientData,
                         rng: torch.Generator) -> torch.Tensor:
        """``g_p = grad_{u_0} H(u_p, u_0)`` on the data of :meth:`gradient_batch`, reduced by
        ``penalty_reduction`` (flat, body-sized, CPU float32)."""
        f, anchor = self.model_factory, self.anchor
        if data.num_train == 0:
            return torch.zeros(f.body.stop - f.body.start)
        x, h = self.gradient_batch(personal, global_weights, data, rng)
        body_params = list(anchor.body.parameters())
        penalty = representation_penalty(h, anchor.body(x), self.params.penalty_reduction)
        grads = torch.autograd.grad(penalty, body_params)
        return torch.cat([g.reshape(-1) for g in grads]).detach().to("cpu", torch.float32)

    def upload_gradient(self, personal: torch.Tensor, global_weights: torch.Tensor, data: ClientData,
                        rng: torch.Generator) -> torch.Tensor:
        """What goes up in place of ``g_p`` (FedReCo: ``g_p`` itself; FedReCo-DP privatizes it)."""
        return self.penalty_gradient(personal, global_weights, data, rng)

    # ------------------------------------------------------------------ hooks
    def init_server(self, rng: torch.Generator) -> ServerState:
        weights = self.model_factory.initial_weights(rng)
        return ServerState(tensors={"weights": weights, INIT_BODY: weights[self.model_factory.body].clone()})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"weights": state.tensors["weights"]}

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        f = self.model_factory
        received = payload["weights"].to(torch.float32)
        personal = received if client_state is None else client_state["weights"]
        metrics: dict[str, float] = {}
        state: Tensors = {}
        steps = 0.0
        if self.params.server_update == "average":
            global_head = received[f.head] if client_state is None else client_state["global_head"]
            copy, m_global = self.train_pair(with_head(f, received, global_head), personal, data, rng,
                                             body_lr=self.params.server_lr)
            steps += m_global.pop("steps")
            metrics.update({f"global_{k}": v for k, v in m_global.items()})
            state["global_head"] = copy[f.head].clone()
            upload = {"body": copy[f.body].clone()}
        new_personal, m_personal = self.train_pair(personal, received, data, rng)
        steps += m_personal.pop("steps")
        metrics.update(m_personal, steps=steps)
        if self.params.server_update == "gradient":
            upload = {"grad": self.upload_gradient(new_personal, received, data, rng)}
        state["weights"] = new_personal
        return ClientResult(upload=upload, state=state, num_samples=data.num_train, metrics=metrics)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        body = self.model_factory.body
        weights = state.tensors["weights"].clone()
        key = "grad" if self.params.server_update == "gradient" else "body"
        mean = torch.stack([a.upload[key].to(weights) for a in arrivals]).mean(dim=0)
        if key == "grad":
            if self.params.server_clip is not None:
                mean = clip_to_norm(mean, self.params.server_clip)
            weights[body] -= self.params.server_lr * mean
        else:
            weights[body] = mean
        change = relative_distance(weights[body], state.tensors["weights"][body])
        return state.evolve(tensors={**state.tensors, "weights": weights},
                            extra={**state.extra, LAST_CHANGE: change}), True

    def server_metrics(self, state: ServerState) -> dict[str, float]:
        """How far u_0 has moved from its initialization and in the latest step (:func:`body_motion`)."""
        return body_motion(state, self.model_factory.body)

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        """The personal model (the download before a client's first task), its head first
        fine-tuned for ``finetune_head_epochs`` at eta_v when set (batches from
        :func:`~fedclock.algorithms.personal.finetune_rng`: the same number for the same weights)."""
        p = self.params
        weights = payload["weights"] if client_state is None else client_state["weights"]
        if p.finetune_head_epochs > 0:
            tune = p if p.head_lr is None else p.model_copy(update={"lr": p.head_lr})
            return finetune_evaluate(self.workspace, self.model_factory, weights, data, tune,
                                     p.finetune_head_epochs, batch_size, part="head")
        return evaluate_flat(self.workspace, self.model_factory, weights, data.x_test, data.y_test, batch_size)

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The personal model (u_p, v_p) after one more task (CKA analysis)."""
        state = self.client_update(payload, client_state, data, rng).state
        assert state is not None  # FedReCo's tasks always keep the personal model
        return state["weights"]

    # ------------------------------------------------------------------ costs
    def upload_bytes(self) -> int:
        """Body-sized: the penalty gradient (or the trained copy of the global body)."""
        return (self.model_factory.body.stop - self.model_factory.body.start) * 4


class FedReCoDPParams(FedReCoParams, DPParams):
    """FedReCo hyper-parameters plus the Gaussian mechanism's budget, clipping and accounting."""

    @model_validator(mode="after")
    def _gradient_only(self) -> "FedReCoDPParams":
        if self.server_update != "gradient":
            raise ValueError("server_update: FedReCo-DP privatizes the penalty gradient, so only 'gradient' "
                             f"is allowed (got {self.server_update!r})")
        return self


class FedReCoDP(FedReCo):
    """FedReCo-DP: FedReCo (``server_update: gradient``) whose clients privatize ``g_p``
    before uploading (full version, Sec. 4.2 and 6.2: "injecting the Gaussian noise to the
    stochastic gradient"), with (epsilon, delta)-local DP per upload.

    ``dp_clip_granularity: batch`` (default) clips ``g_p`` to L2 norm ``dp_clip`` (C);
    ``example`` clips each sample's gradient ``grad_{u_0} ||h(x_j; u_p) - h(x_j; u_0)||^2`` to
    C and averages over the fresh batch (per-sample gradients by ``torch.func.vmap``). Then
    Gaussian noise of standard deviation ``z * 2C`` is added (sensitivity 2C of local DP;
    ``z`` from ``calibration``), drawn from the task's generator after the gradient batch
    (:mod:`fedclock.algorithms.dp` states and justifies each of these choices). Personal
    models never leave the client, so only the global body feels the noise. The server
    counts each client's uploads (``state.tensors["dp_uploads"]``) and reports, with every
    evaluation, the cumulative epsilon of the most-participating client at
    ``accounting_delta`` (:meth:`server_metrics`, PLD accounting with ``dp-accounting``).
    ``budget_scope: run`` reads (epsilon, delta) as the run's budget over ``budget_uploads``
    uploads instead (:mod:`fedclock.algorithms.dp`).

    **What decides the loss to the noise.** The noise reaches only ``u_0``: the server step
    adds ``eta_0 z 2C / sqrt(M)`` per coordinate and round (``M`` uploads averaged), and the
    personal models feel it only through the penalty's pull towards ``h(x; u_0)`` (at
    ``lam = 0`` FedReCo-DP and FedReCo train the same personal models). So the loss grows
    with ``eta_0``, ``z`` and ``lam`` and shrinks with ``M`` and with the local steps per
    round that pull the personal models back to their own data; the measured comparisons are
    in ``docs/reproductions/fedreco.md`` (``fedclock reproduce fedreco``).
    """

    name: ClassVar[str] = "fedreco_dp"
    summary: ClassVar[str] = "FedReCo with the Gaussian mechanism on the uploaded penalty gradient"
    paper: ClassVar[str] = FedReCo.paper + ", privacy table"
    Params: ClassVar[type[AlgorithmParams]] = FedReCoDPParams

    def per_example_clipped_gradient(self, personal: torch.Tensor, global_weights: torch.Tensor,
                                     data: ClientData, rng: torch.Generator, clip: float) -> torch.Tensor:
        """Mean over the data of :meth:`gradient_batch` of per-sample ``grad_{u_0} ||h(x_j; u_p) -
        h(x_j; u_0)||^2``, each clipped to L2 norm ``clip`` (flat, body-sized, CPU float32).
        Always the mean, whatever ``penalty_reduction``: a sum of ``n`` clipped gradients could
        reach norm ``n * clip``, past the sensitivity the noise is calibrated to."""
        f, anchor = self.model_factory, self.anchor
        if data.num_train == 0:
            return torch.zeros(f.body.stop - f.body.start)
        x, h = self.gradient_batch(personal, global_weights, data, rng)
        body = anchor.body
        names = [name for name, _ in body.named_parameters()]
        weights = {name: p.detach() for name, p in body.named_parameters()}

        def sample_penalty(w: dict[str, torch.Tensor], xj: torch.Tensor, hj: torch.Tensor) -> torch.Tensor:
            out = functional_call(body, w, (xj.unsqueeze(0),))
            return ((out - hj.unsqueeze(0)) ** 2).sum()

        per_sample = vmap(grad(sample_penalty), in_dims=(None, 0, 0))(weights, x, h)
        flat = torch.cat([per_sample[name].reshape(x.shape[0], -1) for name in names], dim=1)
        scale = (clip / flat.norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
        return (flat * scale[:, None]).mean(dim=0).detach().to("cpu", torch.float32)

    def upload_gradient(self, personal: torch.Tensor, global_weights: torch.Tensor, data: ClientData,
                        rng: torch.Generator) -> torch.Tensor:
        p = self.params
        assert isinstance(p, FedReCoDPParams)
        if p.dp_clip_granularity == "example":
            clipped = self.per_example_clipped_gradient(personal, global_weights, data, rng, p.dp_clip)
        else:
            clipped = clip_to_norm(self.penalty_gradient(personal, global_weights, data, rng), p.dp_clip)
        return add_noise(clipped, p, rng)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        new, changed = super().server_receive(state, arrivals, rng)
        return with_upload_counts(state, new, [a.client for a in arrivals]), changed

    def server_metrics(self, state: ServerState) -> dict[str, float]:
        """u_0's motion (:meth:`FedReCo.server_metrics`) and the privacy spent so far
        (:func:`fedclock.algorithms.dp.privacy_report`)."""
        return {**super().server_metrics(state), **state_privacy_report(self.params, state)}  # type: ignore[arg-type]
