"""Self-supervised local objectives (SimCLR, SimSiam) as pieces any algorithm can plug in.

The pieces
----------
* :func:`nt_xent` — SimCLR's normalized-temperature cross-entropy (Chen et al. 2020);
  :func:`supcon` — the supervised InfoNCE of Khosla et al. 2020 (NT-Xent is its special
  case where each sample's only positive is its other view); :func:`simsiam_loss` —
  SimSiam's symmetric negative cosine with stop-gradient (Chen & He 2021).
* :class:`Augment` — the standard SimCLR augmentation pipeline built from
  ``torchvision.transforms.v2`` on tensors, applied image by image.
* :class:`SSLHead` — a 2-layer MLP projector (hidden 256, out 128, BatchNorm on the
  hidden layer) and, for SimSiam, a 2-layer bottleneck predictor (128 -> 64 -> 128).
* :class:`SSLModelFactory` — a :class:`ModelFactory` whose models keep the encoder of the
  named model as ``body`` and replace its classifier by an :class:`SSLHead` as ``head``.
* :func:`knn_accuracy` — the k-nearest-neighbour monitor used for the accuracy columns
  during training (the paper's linear evaluation runs once, at the end of a run: see
  :mod:`fedclock.scenarios.linear_eval`).

Determinism of the augmentations
--------------------------------
torchvision's transforms draw their parameters from torch's *global* generator. Every call
of :meth:`Augment.__call__` therefore takes one 62-bit seed from the generator it is given
(the task generator seeded by (scenario seed, client, task index), or a generator derived
from it) and runs the pipeline inside ``torch.random.fork_rng(devices=[])`` after
``torch.manual_seed(seed)``: the global CPU generator is saved and restored around the
call, nothing outside is disturbed, and the same task always sees the same crops.

The plug-in contract (for FedAvg, FedPer, FedRep, FedProx, APFL, Ditto, ...)
------------------------------------------------------------------------------
An algorithm takes the self-supervised objective as a hyper-parameter in four steps:

1. Its ``Params`` inherit :class:`ObjectiveParams` (fields ``objective: supervised |
   simclr | simsiam``, ``temperature``, projector/predictor widths, ``knn_k``). With the
   default ``supervised`` nothing changes: same model, same loss, same random draws.
2. The class lists :class:`ObjectiveMixin` *before* ``Algorithm[...]`` in its bases. The
   mixin's ``__init__`` swaps the model factory for an :class:`SSLModelFactory` when the
   objective is self-supervised, so ``body`` stays the encoder and ``head`` becomes the
   projector (+ predictor): body/head algorithms then send or keep exactly the parts the
   paper adapts ("body = encoder, head = projector (+ predictor)").
3. Every call of :func:`~fedclock.algorithms.training.local_sgd` (or ``train_from``)
   passes ``loss_fn=self.objective_loss(rng)``. That returns None for ``supervised``
   (cross-entropy, the default) and otherwise a batch loss that ignores the labels, makes
   two augmented views and evaluates the objective; it first draws one seed from ``rng``
   for its own augmentation generator, so batches and views stay reproducible.
4. Evaluation: the mixin's ``evaluate_global``/``evaluate_client`` give k-NN accuracies
   of the encoder's features when the objective is self-supervised (the head is no
   classifier). An algorithm that overrides ``evaluate_client`` itself (personal models)
   must call ``self.objective_evaluate(features_module, data, batch_size)`` when
   ``self.ssl`` is true; it overrides ``representation(payload, client_state)`` to name
   the encoder its clients use, which both the k-NN monitor and the final linear
   evaluation read (the default is the body of ``payload["weights"]``).

A self-supervised step passes two augmented views per sample; the task's counted cost
(:mod:`fedclock.algorithms.task_cost`) sees both.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from fedclock.algorithms.base import AlgorithmParams, ClientData, EvalResult, ServerState, Tensors, evaluate_flat
from fedclock.algorithms.models import FedModel, ModelFactory

if TYPE_CHECKING:
    from fedclock.algorithms.training import BatchLoss

Objective = Literal["supervised", "simclr", "simsiam"]
SSL_OBJECTIVES: tuple[str, ...] = ("simclr", "simsiam")


# --------------------------------------------------------------------------- losses
def supcon(z: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """Supervised contrastive loss (Khosla et al. 2020, the ``L_out`` form).

    ``z``: (N, D) embeddings (L2-normalized here); ``labels``: (N,) integers. For anchor
    ``i`` with positives ``P(i) = {p != i : labels[p] == labels[i]}``::

        l_i = -1/|P(i)| * sum_{p in P(i)} log( exp(s_ip / t) / sum_{a != i} exp(s_ia / t) )

    with ``s`` the cosine similarities and ``t`` the temperature; the loss is the mean of
    ``l_i`` over anchors that have at least one positive (0 when none has).
    """
    z = F.normalize(z, dim=1)
    n = z.shape[0]
    logits = z @ z.t() / temperature
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positives = (labels.view(-1, 1) == labels.view(1, -1)) & ~self_mask
    counts = positives.sum(dim=1)
    has = counts > 0
    if not bool(has.any()):
        return z.sum() * 0.0
    per_anchor = -(log_prob.masked_fill(~positives, 0.0).sum(dim=1)[has]) / counts[has]
    return per_anchor.mean()


def nt_xent(z_a: torch.Tensor, z_b: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCLR's NT-Xent over 2B embeddings: views ``z_a[i]`` and ``z_b[i]`` are each
    other's only positive, the other 2B - 2 embeddings are negatives; mean over all 2B
    anchors. Equal to :func:`supcon` with the pair index as label."""
    b = z_a.shape[0]
    pair = torch.arange(b, device=z_a.device)
    return supcon(torch.cat([z_a, z_b]), torch.cat([pair, pair]), temperature)


def simsiam_loss(p_a: torch.Tensor, p_b: torch.Tensor, z_a: torch.Tensor, z_b: torch.Tensor) -> torch.Tensor:
    """SimSiam: ``D(p_a, sg(z_b)) / 2 + D(p_b, sg(z_a)) / 2`` with ``D = -cosine``
    (mean over the batch); ``p`` are predictor outputs, ``z`` projector outputs."""
    def neg_cos(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return -F.cosine_similarity(p, z.detach(), dim=1).mean()

    return 0.5 * neg_cos(p_a, z_b) + 0.5 * neg_cos(p_b, z_a)


# --------------------------------------------------------------------------- Sobel
def sobel(x: torch.Tensor) -> torch.Tensor:
    """Per-channel Sobel gradient magnitude ``sqrt(gx^2 + gy^2)`` of images (N, C, H, W),
    same shape and channels; borders are replicate-padded (a flat border gives 0)."""
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], dtype=x.dtype, device=x.device)
    kernels = torch.stack([kx, kx.t()]).unsqueeze(1)  # (2, 1, 3, 3)
    n, c, h, w = x.shape
    padded = F.pad(x.reshape(n * c, 1, h, w), (1, 1, 1, 1), mode="replicate")
    g = F.conv2d(padded, kernels)  # (n*c, 2, h, w)
    return g.pow(2).sum(dim=1).sqrt().reshape(n, c, h, w)


# --------------------------------------------------------------------------- augmentation
class Augment:
    """The SimCLR augmentation pipeline on a batch of image tensors.

    Per image: ``RandomResizedCrop(side, scale=(crop_min, 1))``, ``RandomHorizontalFlip``,
    with probability 0.8 ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` (brightness and contrast only
    for one-channel images) and, for three channels, ``RandomGrayscale(p=0.2)`` — the CIFAR
    variant of SimCLR's pipeline (no blur for small images). The colour operations expect
    [0, 1] values while the federation's tensors are standardized, so each image is mapped
    to [0, 1] by its own min and max and mapped back afterwards (an affine map per image,
    which keeps the image's style). Flat (N, D) inputs are returned unchanged.
    """

    def __init__(self, input_shape: Sequence[int], crop_min: float = 0.2) -> None:
        from torchvision.transforms import v2

        self.input_shape = tuple(int(d) for d in input_shape)
        self.pipeline: Callable[[torch.Tensor], torch.Tensor] | None = None
        if len(self.input_shape) == 3:
            channels, height, width = self.input_shape
            ops: list[Any] = [v2.RandomResizedCrop((height, width), scale=(crop_min, 1.0), antialias=True),
                              v2.RandomHorizontalFlip()]
            if channels == 3:
                ops += [v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), v2.RandomGrayscale(p=0.2)]
            else:
                ops += [v2.RandomApply([v2.ColorJitter(0.4, 0.4)], p=0.8)]
            self.pipeline = v2.Compose(ops)

    def __call__(self, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        """One augmented view of every image in ``x``, seeded by one draw from ``rng``.

        On the meta device (a counted task, :mod:`fedclock.algorithms.flop_count`) the view is
        an empty meta tensor of the batch's shape and dtype, the seed drawn all the same: every
        operation of the pipeline (crops resized by interpolation, flips, colour arithmetic,
        the min-max map) keeps the shape and is element-wise work, which the FLOP counter does
        not count, on data that needs no gradient, so autograd saves none of it. Run image by
        image on meta tensors it took most of a counted self-supervised task's time; the
        counted FLOPs and memory are the same either way (tests/algorithms/test_ssl.py)."""
        seed = int(torch.randint(0, 2**62, (1,), generator=rng))
        if self.pipeline is None or x.dim() != 4:
            return x
        if x.is_meta:
            return torch.empty_like(x)
        return self.apply(x, seed)

    def apply(self, x: torch.Tensor, seed: int) -> torch.Tensor:
        """The pipeline on every image of the batch ``x`` (N, C, H, W), its draws seeded by
        ``seed`` (``x`` itself for flat inputs, which have no pipeline)."""
        pipeline = self.pipeline
        if pipeline is None:
            return x
        lo = x.amin(dim=(1, 2, 3), keepdim=True)
        span = (x.amax(dim=(1, 2, 3), keepdim=True) - lo).clamp_min(1e-6)
        unit = (x - lo) / span
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = torch.stack([pipeline(img) for img in unit])
        return out * span + lo


# --------------------------------------------------------------------------- heads and factory
def mlp2(in_features: int, hidden: int, out: int) -> nn.Sequential:
    """Linear - BatchNorm (batch statistics only) - ReLU - Linear.

    The BatchNorm keeps no running statistics (``track_running_stats=False``): nothing but
    parameters lives in the module, so flat weight vectors describe it completely and a
    pooled executor's workspace carries no state from one client to the next."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.BatchNorm1d(hidden, track_running_stats=False),
                         nn.ReLU(), nn.Linear(hidden, out))


class SSLHead(nn.Module):
    """Projector g (2-layer MLP) and, for SimSiam, predictor h; ``forward`` gives g(h)."""

    def __init__(self, in_features: int, hidden: int, out: int, predictor_hidden: int | None) -> None:
        super().__init__()
        self.projector = mlp2(in_features, hidden, out)
        self.predictor: nn.Module | None = mlp2(out, predictor_hidden, out) if predictor_hidden else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.projector(h)


@dataclass(frozen=True)
class SSLModelFactory(ModelFactory):
    """Models whose ``body`` is the encoder of model ``name`` and whose ``head`` is an
    :class:`SSLHead` (projector; plus predictor when ``predictor_hidden`` is set)."""

    projector_hidden: int = 256
    projector_out: int = 128
    predictor_hidden: int | None = None

    def _construct(self) -> FedModel:
        base = super()._construct()
        if not isinstance(base.head, nn.Linear):  # pragma: no cover - every shipped model ends in a Linear
            raise ValueError(f"model.name: {self.name} has no linear classifier to replace by a projector")
        head = SSLHead(base.head.in_features, self.projector_hidden, self.projector_out, self.predictor_hidden)
        stages = {k: v for k, v in base.stages.items() if k != "head"}
        stages["head"] = ("head.",)
        return FedModel(base.body, head, stages)

    @cached_property
    def feature_dim(self) -> int:
        """Width of the encoder's output."""
        return int(self.build().head.projector[0].in_features)  # type: ignore[index, union-attr]


def ssl_factory(factory: ModelFactory, objective: str, hidden: int, out: int,
                predictor_hidden: int) -> SSLModelFactory:
    """The self-supervised counterpart of ``factory`` (same encoder and seed)."""
    return SSLModelFactory(factory.name, factory.input_shape, factory.num_classes, factory.hidden,
                           factory.init_seed, factory.builder, projector_hidden=hidden, projector_out=out,
                           predictor_hidden=predictor_hidden if objective == "simsiam" else None)


# --------------------------------------------------------------------------- unsupervised batch loss
def two_view_loss(objective: str, temperature: float, encode: Callable[[torch.Tensor], torch.Tensor],
                  head: SSLHead, x_a: torch.Tensor, x_b: torch.Tensor) -> torch.Tensor:
    """``L_u`` of two views given the features-to-loss path: ``encode`` maps a batch of
    both views (stacked, 2B) to features; ``head``'s projector (and predictor) follow."""
    return projected_loss(objective, temperature, head, encode(torch.cat([x_a, x_b])))


def projected_loss(objective: str, temperature: float, head: SSLHead, h: torch.Tensor) -> torch.Tensor:
    """``L_u`` from the features ``h`` (2B rows: view a of the batch, then view b) through
    ``head``: NT-Xent of the projections (SimCLR) or the symmetric SimSiam loss of the
    predictions against the stopped projections. Both views go through the projector
    together, so its BatchNorm sees 2B >= 2 rows."""
    b = h.shape[0] // 2
    z = head.projector(h)
    if objective == "simclr":
        return nt_xent(z[:b], z[b:], temperature)
    if head.predictor is None:
        raise ValueError("simsiam needs a predictor (SSLModelFactory.predictor_hidden)")
    p = head.predictor(z)
    return simsiam_loss(p[:b], p[b:], z[:b], z[b:])


def unsupervised_loss(objective: str, temperature: float, augment: Augment, rng: torch.Generator) -> BatchLoss:
    """A ``local_sgd`` batch loss: two augmented views of the batch (labels unused),
    through ``model.body`` and ``model.head`` (an :class:`SSLHead`)."""
    def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_a, x_b = augment(x, rng), augment(x, rng)
        return two_view_loss(objective, temperature, model.body, model.head, x_a, x_b)  # type: ignore[arg-type]

    return loss


def derived_generator(rng: torch.Generator) -> torch.Generator:
    """A CPU generator seeded by one draw from ``rng`` (a separate stream for augmentations)."""
    gen = torch.Generator()
    gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=rng)))
    return gen


# --------------------------------------------------------------------------- k-NN monitor
@torch.no_grad()
def features_of(encoder: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``encoder`` applied batch by batch (no gradients)."""
    if x.shape[0] == 0:
        return x.new_zeros((0, 0))
    return torch.cat([encoder(x[s:s + batch_size]) for s in range(0, x.shape[0], batch_size)])


@torch.no_grad()
def knn_accuracy(bank: torch.Tensor, bank_y: torch.Tensor, query: torch.Tensor, query_y: torch.Tensor,
                 k: int, leave_one_out: bool = False, chunk: int = 1024) -> EvalResult:
    """Majority vote of the ``k`` nearest bank features by cosine similarity (ties to the
    smaller class id). With ``leave_one_out`` the query set is the bank and a sample never
    votes for itself. Queries go ``chunk`` at a time (memory ``chunk x bank``).
    ``loss_sum`` is 0 (the monitor has no loss)."""
    n = query_y.shape[0]
    if n == 0 or bank_y.shape[0] == 0:
        return EvalResult(0.0, 0, 0.0)
    b, q = F.normalize(bank.float(), dim=1), F.normalize(query.float(), dim=1)
    kk = max(1, min(k, bank_y.shape[0] - (1 if leave_one_out else 0)))
    classes = int(max(bank_y.max(), query_y.max())) + 1
    correct = 0.0
    for s in range(0, n, chunk):
        sim = q[s:s + chunk] @ b.t()
        if leave_one_out:
            rows = torch.arange(sim.shape[0], device=sim.device)
            sim[rows, rows + s] = float("-inf")
        idx = sim.topk(kk, dim=1).indices
        pred = F.one_hot(bank_y[idx], classes).sum(dim=1).argmax(dim=1)
        correct += float((pred == query_y[s:s + chunk]).sum())
    return EvalResult(correct, int(n), 0.0)


# --------------------------------------------------------------------------- the plug-in
class ObjectiveParams(AlgorithmParams):
    """Hyper-parameters of the local objective (see the module docstring's contract)."""

    objective: Objective = Field(default="supervised", description="local objective: supervised cross-entropy, "
                                 "or unlabeled SimCLR / SimSiam on two augmented views")
    temperature: float = Field(default=0.5, gt=0, description="SimCLR NT-Xent temperature")
    projector_hidden: int = Field(default=256, ge=1)
    projector_out: int = Field(default=128, ge=1)
    predictor_hidden: int = Field(default=64, ge=1, description="SimSiam predictor bottleneck width")
    crop_min: float = Field(default=0.2, gt=0, le=1, description="smallest crop area of RandomResizedCrop")
    knn_k: int = Field(default=10, ge=1, description="neighbours of the k-NN accuracy monitor")


class ObjectiveMixin:
    """Plugs :class:`ObjectiveParams` into an algorithm (list it before ``Algorithm``)."""

    params: Any
    model_factory: ModelFactory
    workspace: FedModel
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised"})
    """Objectives the class trains with. Only a class that sets ``objectives`` in its own body
    supports more than ``supervised`` (see :meth:`supported_objectives`)."""

    @classmethod
    def supported_objectives(cls) -> frozenset[str]:
        """The objectives this very class declares. A subclass that does not declare them
        again (say a FedAvg variant whose client step passes no ``objective_loss``) trains
        supervised only, so the loader rejects an unlabeled objective for it in one line."""
        return cls.objectives  # reset on every Algorithm subclass that does not declare it

    @classmethod
    def adapted_problem(cls, params: AlgorithmParams) -> str | None:
        """``evaluation.adapted`` adapts a classifier by supervised cross-entropy: refused for
        a self-supervised objective (its global model is an encoder, scored by k-NN)."""
        objective = getattr(params, "objective", "supervised")
        if objective in SSL_OBJECTIVES:
            return (f"evaluation.adapted: needs a classifier to adapt, algorithm.objective {objective!r} trains an "
                    f"encoder (allowed: supervised)")
        return None

    def __init__(self, params: ObjectiveParams, model_factory: ModelFactory) -> None:
        if getattr(params, "objective", "supervised") in SSL_OBJECTIVES:  # params without the field: supervised
            model_factory = ssl_factory(model_factory, params.objective, params.projector_hidden,
                                        params.projector_out, params.predictor_hidden)
        super().__init__(params, model_factory)  # type: ignore[call-arg]
        self._augment: Augment | None = None
        if self.ssl:  # clients keep their local encoder (keep_local_body): never stateless
            self.stateless_clients = False

    @property
    def ssl(self) -> bool:
        """True when the local objective is self-supervised."""
        return getattr(self.params, "objective", "supervised") in SSL_OBJECTIVES

    @property
    def augment(self) -> Augment:
        if self._augment is None:
            self._augment = Augment(self.model_factory.input_shape, self.params.crop_min)
        return self._augment

    def objective_loss(self, rng: torch.Generator) -> BatchLoss | None:
        """The batch loss to pass to ``local_sgd`` (None: cross-entropy). For SSL it draws
        one seed from ``rng`` for its augmentation generator."""
        if not self.ssl:
            return None
        return unsupervised_loss(self.params.objective, self.params.temperature, self.augment,
                                 derived_generator(rng))

    # ------------------------------------------------------------------ representations
    def encoder_from_weights(self, weights: torch.Tensor) -> nn.Module:
        """The workspace's body after loading flat content weights."""
        self.model_factory.load_flat(self.workspace, weights)
        return self.workspace.body

    def global_representation(self, state: ServerState) -> Callable[[torch.Tensor], torch.Tensor]:
        """Features of the global model (generalization evaluation)."""
        return self.encoder_from_weights(state.tensors["weights"])

    def representation(self, payload: Tensors, client_state: Tensors | None
                       ) -> Callable[[torch.Tensor], torch.Tensor]:
        """Features a client uses (personalization evaluation); default: its local encoder
        (``client_state["local_body"]``, see :meth:`keep_local_body`) when it has one, else
        the payload's body."""
        if client_state is not None and "local_body" in client_state:
            weights = payload["weights"].clone()
            weights[self.model_factory.body] = client_state["local_body"].to(weights)
            return self.encoder_from_weights(weights)
        return self.encoder_from_weights(payload["weights"])

    def keep_local_body(self, state: Tensors | None, local: torch.Tensor) -> Tensors | None:
        """The client state after a task that trained the flat model ``local``: with a
        self-supervised objective ``state`` plus ``"local_body"``, the encoder as trained
        locally (FedStyle's personalization protocol "fix[es] local model(s)"); unchanged
        with the supervised objective."""
        if not self.ssl:
            return state
        return {**(state or {}), "local_body": local[self.model_factory.body].detach().clone()}

    def personal_probe(self, payload: Tensors, client_state: Tensors | None
                       ) -> tuple[Callable[[torch.Tensor], torch.Tensor], nn.Module | None]:
        """(frozen feature map, module trained with the linear classifier on its output or
        None) for personalization linear evaluation; default: the representation, nothing
        trainable."""
        return self.representation(payload, client_state), None

    def objective_evaluate(self, encoder: Callable[[torch.Tensor], torch.Tensor], data: ClientData,
                           batch_size: int) -> EvalResult:
        """k-NN accuracy of the client's test split against its train split."""
        was = self.workspace.training
        self.workspace.eval()
        try:
            bank = features_of(encoder, data.x_train, batch_size)
            query = features_of(encoder, data.x_test, batch_size)
        finally:
            self.workspace.train(was)
        return knn_accuracy(bank, data.y_train, query, data.y_test, self.params.knn_k)

    def evaluate_personal(self, payload: Tensors, client_state: Tensors | None, data: ClientData, batch_size: int,
                          weights: Callable[[Tensors, Tensors | None], torch.Tensor]) -> EvalResult:
        """A client's personalized evaluation: with a self-supervised objective, k-NN on its
        :meth:`representation`; else the accuracy on its test split of the flat model
        ``weights(payload, client_state)`` (APFL's mixture, Ditto's personal model, FedPer's
        and FedRep's body + own head)."""
        if self.ssl:
            return self.objective_evaluate(self.representation(payload, client_state), data, batch_size)
        return evaluate_flat(self.workspace, self.model_factory, weights(payload, client_state), data.x_test,
                             data.y_test, batch_size)

    def evaluate_global(self, state: ServerState, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> EvalResult:
        if not self.ssl:
            return super().evaluate_global(state, x, y, batch_size)  # type: ignore[misc]
        encoder = self.global_representation(state)
        was = self.workspace.training
        self.workspace.eval()
        try:
            feats = features_of(encoder, x, batch_size)
        finally:
            self.workspace.train(was)
        return knn_accuracy(feats, y, feats, y, self.params.knn_k, leave_one_out=True)

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        if not self.ssl:
            return super().evaluate_client(payload, client_state, data, batch_size)  # type: ignore[misc]
        return self.objective_evaluate(self.representation(payload, client_state), data, batch_size)
