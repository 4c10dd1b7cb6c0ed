"""FedStyle: federated unsupervised representation learning with local style infusion.

"More Generalized and Personalized Unsupervised Representation Learning in a Distributed
System" (FedStyle; the paper's text is in our copy without most symbols and the bodies
of Algorithms 1-4 and Eqs. 1-4: where a symbol is unreadable the class docstring says so
and names the choice made).
"""
from __future__ import annotations

import math
from typing import Callable, ClassVar, Literal

import torch
from pydantic import Field
from torch import nn

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult, \
    ServerState, Tensors
from fedclock.algorithms.models import FedModel, ModelFactory
from fedclock.algorithms.ssl import ObjectiveMixin, ObjectiveParams, SSLHead, SSLModelFactory, derived_generator, \
    projected_loss, sobel, ssl_factory, supcon
from fedclock.algorithms.training import local_sgd


class FedStyleParams(ObjectiveParams):
    """FedStyle hyper-parameters (the objective must be self-supervised)."""

    objective: Literal["simclr", "simsiam"] = Field(
        default="simclr", description="unsupervised loss L_u: SimCLR NT-Xent or SimSiam")
    style_weight: float = Field(default=0.5, ge=0, description="lambda, weight of the style-infused L_u")
    style_temperature: float = Field(default=0.5, gt=0, description="tau of the style-extraction SupCon")
    style_epochs: float = Field(default=10.0, ge=0, description="E_s, epochs of style extraction (0: the "
                                "paper's ablation, an untrained style model)")
    generator_hidden: int = Field(default=256, ge=1, description="hidden width of the generator MLP G")
    server_lr: float = Field(default=1.0, gt=0, description="server learning rate on the mean content delta")
    personal_features: Literal["both", "content"] = Field(
        default="both", description="personalization features: generalized and stylized content (Eq. 4) or the "
                                    "generalized content feature alone (the paper's ablation)")
    probe_style: Literal["own", "swapped", "zero"] = Field(
        default="own", description="style fed to the personalization probe's generator: the client's own f_s "
                                   "(Eq. 4), the next client's (swapped) or zeros (a control, not in the paper)")


class Generator(nn.Module):
    """G: a 2-layer MLP from ``[content feature, style feature]`` (2d) to a d-wide feature."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([content, style], dim=1))


class LocalModel(nn.Module):
    """What one client trains: content model (f_c, g_c), generator G and the frozen style
    encoder f_s. Flat order: content body, content head, generator, style encoder."""

    def __init__(self, content: FedModel, generator: Generator, style: nn.Module) -> None:
        super().__init__()
        self.content = content
        self.generator = generator
        self.style = style


class StyleInfusion(nn.Module):
    """Personalization adapter: from ``[f_c(x), f_s(x)]`` to ``[f_c(x), G(f_c(x), f_s(x))]``."""

    def __init__(self, generator: Generator, dim: int) -> None:
        super().__init__()
        self.generator = generator
        self.dim = dim

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        content = z[:, :self.dim]
        return torch.cat([content, self.generator(content, z[:, self.dim:])], dim=1)


class FedStyle(ObjectiveMixin, Algorithm[FedStyleParams]):
    """FedStyle, in SimCLR or SimSiam form (``objective``).

    * **Models** (Sec. "Federated learning settings"). Content model = encoder f_c
      (``body``) + projector g_c (+ SimSiam predictor) (``head``), from
      :class:`~fedclock.algorithms.ssl.SSLModelFactory`. Style model = an encoder f_s of the
      same architecture + its own projector g_s. Generator G = 2-layer MLP (2d ->
      ``generator_hidden`` -> d). **Only f_c travels** ("The clients in FedStyle only
      transmit local content models to the server"): the payload is ``{"body"}`` and the
      upload ``{"delta": f_c,local - f_c}``; g_c, G, f_s and the local f_c stay in the
      client's state (``head``, ``generator``, ``style``, ``local_body``).
    * **Style extraction** (Eq. 2, Algorithm 2; a client's first task, before its first
      local training): the batch x and its Sobel copy (:func:`~fedclock.algorithms.ssl.sobel`,
      per-channel gradient magnitude) form 2B images labelled {local, sobel}; SGD (the
      task's lr and batch size) on the SupCon loss of g_s(f_s(.)) with temperature
      ``style_temperature`` for ``style_epochs`` epochs (E_s). **choose**: the paper's
      E_s per table and its tau are unreadable in our copy; defaults tau = 0.5 (the paper
      uses one temperature "for all InfoNCE loss functions", unreadable) and E_s = 10 (one
      of the values of its E_s ablation {0, 10, 100}). ``style_epochs = 0`` is that
      ablation: the style model keeps its random initialization ("only biased noise
      infused with the content feature"). f_s is frozen afterwards and g_s discarded.
    * **Local training** (Eq. 3, Algorithm 3; every task, ``local_steps`` SGD steps): two
      augmented views x_a, x_b; ``L = L_u(g_c(f_c(x_a)), g_c(f_c(x_b))) + lambda *
      L_u(g_c(G[f_c(x_a), f_s(x_a)]), g_c(G[f_c(x_b), f_s(x_b)]))``, lambda =
      ``style_weight``. **choose** (the equation's symbols are lost): each view is infused
      with the style f_s extracts from that same view, so "the two representations [are]
      infused with different local styles" and content and style come from one image, as
      in the paper's "z is a product of the content feature and the style feature" of an
      image; f_s runs without gradient; f_c, g_c and G move.
    * **Server** (Algorithm 1): FedAvg on f_c — ``f_c <- f_c + server_lr * sum_p (n_p/n)
      Delta_p``. The server's copy of g_c is never used.
    * **Personalization features** (Eq. 4): ``[f_c(x), G(f_c(x), f_s(x))]`` with the
      client's *local* f_c (its encoder after its last task) and its f_s ("FedStyle fixes
      both the local content model and local style model"); in linear evaluation G starts
      from the client's G and is trained together with the linear classifier ("we
      optimize the generator along with the linear classifier").
      ``personal_features: content`` is the paper's "only the generalized feature"
      ablation: f_c,local(x) alone. **choose**: a client that never ran a task has no
      local models and is evaluated on the received f_c(x) alone.
    * **Initial local parts** (first task): g_c, G and the style model are drawn from the
      task generator (PyTorch's default initializers), so they differ between clients.
    * **Virtual-time cost**: a training step costs 2 + 2/3 passes per sample (two views
      forward and backward through f_c, two views forward through f_s). The one-off style
      extraction is not charged (the clock's cost model has no per-client first-task
      term); it is the paper's stage "before federated training".
    * **Monitor**: the accuracy columns during training are k-NN accuracies (global: the
      global f_c, leave-one-out on the test set; personal: the personalization features
      with the client's current G); the paper's linear evaluation runs at the end
      (:mod:`fedclock.scenarios.linear_eval`).
    """

    name: ClassVar[str] = "fedstyle"
    objectives: ClassVar[frozenset[str]] = frozenset({"simclr", "simsiam"})
    partial_work: ClassVar[bool] = False  # style extraction on a first task, then content training
    summary: ClassVar[str] = ("FedStyle: SimCLR/SimSiam content model plus a local Sobel-contrast style model "
                              "infused by a generator; only the content encoder is uploaded")
    paper: ClassVar[str] = ("More Generalized and Personalized Unsupervised Representation Learning in a "
                            "Distributed System (FedStyle)")
    Params: ClassVar[type[AlgorithmParams]] = FedStyleParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    def __init__(self, params: FedStyleParams, model_factory: ModelFactory) -> None:
        super().__init__(params, model_factory)
        p = self.params
        self.style_factory = ssl_factory(model_factory, "simclr", p.projector_hidden, p.projector_out,
                                         p.predictor_hidden)
        self._style_model: FedModel | None = None
        self._local: LocalModel | None = None

    # ------------------------------------------------------------------ parts
    @property
    def dim(self) -> int:
        """Width d of the encoder's features."""
        factory = self.model_factory
        assert isinstance(factory, SSLModelFactory)  # the builder gives self-supervised objectives SSL models
        return factory.feature_dim

    def _device(self) -> torch.device:
        return next(self.workspace.parameters()).device

    @property
    def style_model(self) -> FedModel:
        """Workspace for style extraction: f_s (body) + g_s (head)."""
        if self._style_model is None:
            self._style_model = self.style_factory.build().to(self._device())
        return self._style_model

    def _new_generator(self, seed: int = 0) -> Generator:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return Generator(self.dim, self.params.generator_hidden)

    def _new_style_encoder(self, flat_body: torch.Tensor) -> nn.Module:
        """A separate, frozen style encoder f_s holding ``flat_body`` (a client state's ``style``)."""
        model = self.style_factory.build().to(self._device())
        ModelFactory.load_flat(model.body, flat_body.to(self._device()))
        model.body.requires_grad_(False)
        return model.body

    @property
    def local_model(self) -> LocalModel:
        """Workspace for local training (shares the content workspace)."""
        if self._local is None:
            gen = self._new_generator()
            style_body = self.style_model.body
            self._local = LocalModel(self.workspace, gen, style_body).to(self._device())
        return self._local

    def to(self, device: torch.device | str) -> "FedStyle":
        super().to(device)
        self._style_model, self._local = None, None
        return self

    def _generator_init(self, rng: torch.Generator) -> torch.Tensor:
        return ModelFactory.flatten(self._new_generator(int(torch.randint(0, 2**62, (1,), generator=rng))))

    # ------------------------------------------------------------------ server
    def init_server(self, rng: torch.Generator) -> ServerState:
        return ServerState(tensors={"weights": self.model_factory.initial_weights(rng)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"body": state.tensors["weights"][self.model_factory.body]}

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        weights = state.tensors["weights"]
        body = self.model_factory.body
        total = sum(a.num_samples for a in arrivals)
        step = torch.zeros_like(weights[body])
        for a in arrivals:
            coef = a.num_samples / total if total > 0 else 1.0 / len(arrivals)
            step.add_(a.upload["delta"].to(step), alpha=coef)
        new = weights.clone()
        new[body] += self.params.server_lr * step
        return state.evolve(tensors={**state.tensors, "weights": new},
                            extra=dict(state.extra)), True

    def download_bytes(self) -> int:
        body = self.model_factory.body
        return (body.stop - body.start) * 4

    def upload_bytes(self) -> int:
        return self.download_bytes()

    # ------------------------------------------------------------------ client
    def extract_style(self, data: ClientData, rng: torch.Generator) -> torch.Tensor:
        """Train a fresh style model (f_s and g_s, drawn first from ``rng``) on local images
        vs their Sobel copies (SupCon, Eq. 2) for ``style_epochs`` epochs; return the whole
        trained style model, flat (``style_factory``'s layout). With ``style_epochs = 0``
        the freshly drawn model comes back untrained."""
        p = self.params
        start = self.style_factory.initial_weights(rng)
        tau = p.style_temperature

        def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            both = torch.cat([x, sobel(x)])
            labels = torch.cat([torch.zeros(x.shape[0], dtype=torch.long, device=x.device),
                                torch.ones(x.shape[0], dtype=torch.long, device=x.device)])
            return supcon(model.head.projector(model.body(both)), labels, tau)  # type: ignore[union-attr,operator]

        per_epoch = max(1, math.ceil(data.num_train / p.batch_size))
        steps = round(p.style_epochs * per_epoch)
        weights, _ = local_sgd(self.style_model, self.style_factory, start, data, p, rng, steps, loss_fn=loss)
        return weights

    def fedstyle_loss(self, aug_rng: torch.Generator) -> Callable[[nn.Module, torch.Tensor, torch.Tensor],
                                                                   torch.Tensor]:
        """The local batch loss (Eq. 3) ``L_u(g_c(f_c(x_a)), g_c(f_c(x_b))) + lambda *
        L_u(g_c(G[f_c(x_a), f_s(x_a)]), g_c(G[f_c(x_b), f_s(x_b)]))`` on a :class:`LocalModel`:
        each view is infused with the style of its own image, so the two representations
        carry different local styles."""
        p = self.params

        def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            assert isinstance(model, LocalModel)
            views = torch.cat([self.augment(x, aug_rng), self.augment(x, aug_rng)])
            h = model.content.body(views)
            with torch.no_grad():
                s = model.style(views)  # f_s(x_a) then f_s(x_b)
            head: SSLHead = model.content.head  # type: ignore[assignment]
            plain = projected_loss(p.objective, p.temperature, head, h)
            infused = projected_loss(p.objective, p.temperature, head, model.generator(h, s))
            return plain + p.style_weight * infused

        return loss

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        body = payload["body"]
        metrics: dict[str, float] = {}
        if client_state is None:
            head = self.model_factory.initial_weights(rng)[self.model_factory.head]
            generator = self._generator_init(rng)
            style = self.extract_style(data, rng)[self.style_factory.body]
            metrics["style_extracted"] = 1.0 if data.num_train > 0 and self.params.style_epochs > 0 else 0.0
        else:
            head, generator, style = client_state["head"], client_state["generator"], client_state["style"]
        local = self.local_model
        start = torch.cat([body.cpu(), head.cpu(), generator.cpu(), style.cpu()])
        trainable = list(local.content.parameters()) + list(local.generator.parameters())
        aug_rng = derived_generator(rng)
        flat, train_metrics = local_sgd(local, self.model_factory, start, data, self.params, rng,
                                        self.local_steps(data.num_train), loss_fn=self.fedstyle_loss(aug_rng),
                                        trainable=trainable)
        metrics.update(train_metrics)
        nb, nh, ng = body.numel(), head.numel(), generator.numel()
        new_body = flat[:nb]
        state = {"head": flat[nb:nb + nh], "generator": flat[nb + nh:nb + nh + ng], "style": flat[nb + nh + ng:],
                 "local_body": new_body.clone()}
        return ClientResult(upload={"delta": new_body - body.cpu()}, state=state, num_samples=data.num_train,
                            metrics=metrics)

    # ------------------------------------------------------------------ representations
    def global_representation(self, state: ServerState) -> Callable[[torch.Tensor], torch.Tensor]:
        return self.encoder_from_weights(state.tensors["weights"])

    def _load_personal(self, payload: Tensors, client_state: Tensors) -> LocalModel:
        """The local workspace at the received f_c and the client's g_c, G and f_s (the
        start of a local task)."""
        return self._load(payload["body"], client_state)

    def _load(self, body: torch.Tensor, client_state: Tensors) -> LocalModel:
        local = self.local_model
        start = torch.cat([body.cpu(), client_state["head"].cpu(), client_state["generator"].cpu(),
                           client_state["style"].cpu()])
        ModelFactory.load_flat(local, start)
        return local

    def representation(self, payload: Tensors, client_state: Tensors | None
                       ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The client's personalization features with its own models: ``[f_c(x),
        G(f_c(x), f_s(x))]`` (``personal_features: both``) or ``f_c(x)`` (``content``), f_c
        being the client's local content encoder after its last task; the received f_c
        before its first task."""
        if client_state is None:
            return self._content_only(payload)
        local = self._load(client_state["local_body"], client_state)
        if self.params.personal_features == "content":
            return local.content.body

        def features(x: torch.Tensor) -> torch.Tensor:
            c = local.content.body(x)
            return torch.cat([c, local.generator(c, local.style(x))], dim=1)

        return features

    def _content_only(self, payload: Tensors) -> nn.Module:
        content = self.workspace
        ModelFactory.load_flat(content.body, payload["body"])
        return content.body

    probe_style_controls: ClassVar[tuple[str, ...]] = ("swapped", "zero", "content")
    """The controls :meth:`personal_probe` takes besides the client's own style (its ``style``)."""

    @property
    def probe_uses_donor(self) -> bool:
        """Whether :meth:`personal_probe` wants another client's state (``probe_style: swapped``)."""
        return self.params.probe_style == "swapped"

    def personal_probe(self, payload: Tensors, client_state: Tensors | None, donor: Tensors | None = None,
                       style: Literal["own", "swapped", "zero", "content"] | None = None
                       ) -> tuple[Callable[[torch.Tensor], torch.Tensor], nn.Module | None]:
        """Eq. (4) with the client's local models fixed: frozen ``[f_c,local(x), f_s(x)]`` and
        a :class:`StyleInfusion` copy of the client's G trained with the classifier; with
        ``personal_features: content`` the frozen f_c,local(x) alone and no adapter.

        Controls that tell whether the client's own style matters (``probe_style``; not in the
        paper): ``swapped`` uses the style encoder of ``donor``, another client's state (the
        linear evaluation passes the next client's, :mod:`fedclock.scenarios.linear_eval`);
        ``zero`` feeds zeros in place of ``f_s(x)``. Everything else, the client's G included,
        is the client's own. ``style`` (default: ``probe_style``) picks the style for this call,
        ``content`` being the ``personal_features: content`` ablation, so one run can probe all
        of them (``evaluation.linear.style_controls``)."""
        if client_state is None:
            return self._content_only(payload), None
        local = self._load(client_state["local_body"], client_state)
        if self.params.personal_features == "content" or style == "content":
            return local.content.body, None
        gen = self._new_generator().to(self._device())
        ModelFactory.load_flat(gen, client_state["generator"])
        which = self.params.probe_style if style is None else style
        style_of: Callable[[torch.Tensor], torch.Tensor] = local.style
        if which == "swapped":
            if donor is None:
                raise ValueError("fedstyle: probe_style swapped needs another client's state (donor)")
            style_of = self._new_style_encoder(donor["style"])
        elif which == "zero":
            dim = self.dim

            def no_style(x: torch.Tensor) -> torch.Tensor:
                return torch.zeros(x.shape[0], dim, device=x.device)

            style_of = no_style

        def frozen(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([local.content.body(x), style_of(x)], dim=1)

        return frozen, StyleInfusion(gen, self.dim)

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        return self.objective_evaluate(self.representation(payload, client_state), data, batch_size)
