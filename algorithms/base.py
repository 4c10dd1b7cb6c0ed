"""The pure algorithm interface.

An algorithm is plain PyTorch logic: it never imports Ray or SimPy, so it can be tested on
tiny tensors. The runtime calls its hooks in this order (each hook's docstring says what it
receives, what it returns and what it may draw from ``rng``):

* ``init_server(rng)`` once, on the server, giving the initial :class:`ServerState`;
* ``payload_for(state, client)`` on the server when a task is dispatched: what goes down;
* ``client_update(payload, client_state, data, rng)`` on a client executor: local work,
  returning what goes up, the client's persistent state and training metrics. The clock
  decides how many local steps the task runs (``data.steps``, fewer than the full count
  when the client completes only part of its work); every algorithm runs
  :meth:`Algorithm.task_steps` steps and reports the steps it ran in its result;
* ``server_receive(state, arrivals, rng)`` on the server: a synchronous algorithm gets the
  round's cohort, an asynchronous one gets one arrival at a time, each with its staleness;
  it returns the new state and whether the global model changed. The server owns the
  version: it moves ``state.version`` on by one when the hook says the model changed
  (:meth:`Algorithm.receive`), so hooks build their new state with :meth:`ServerState.evolve`
  and never set the version;
* ``server_task_failed(state, failure)`` (optional) on the server when it gives up on a task
  (the client's connection was lost, or the task timed out);
* ``evaluate_global`` / ``evaluate_client`` for global and personalized accuracy, and
  ``server_metrics(state)`` for numbers about the global state recorded with them.

Algorithms declare what they send, ``download_bytes``/``upload_bytes`` (the real sizes of
the tensors); what a task computes is not declared but counted from ``client_update`` itself
(FLOPs and peak memory, :mod:`fedclock.algorithms.task_cost`).

Writing one of your own: subclass :class:`Algorithm` (or a shipped algorithm), set ``name``,
``Params`` and ``modes``, implement ``client_update`` and ``server_receive``; a missing class
attribute fails when the class is defined. See the guide ``docs/own_algorithm.md``. A
subclass of a shipped algorithm inherits everything, its class flags included, except the
flags that speak of a hook it overrides (:data:`HOOK_FLAGS`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
import dataclasses
import inspect
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, Hashable, Protocol, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from fedclock.algorithms.fed_model import FedModel
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.targets import correct_targets, counted_targets, target_cross_entropy

Tensors = dict[str, torch.Tensor]
"""What travels on the wire: named tensors whose byte size is what the clock charges."""


def payload_nbytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Bytes of a message made of these tensors."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


MAX_PARAM_MAGNITUDE = 1e30
"""Largest magnitude of any float hyper-parameter: larger ones overflow float32 tensors."""
MAX_LOCAL_EPOCHS = 10_000.0
"""local_epochs (beyond it a task would never finish)."""
MAX_LOCAL_STEPS = 10_000_000
"""local_steps."""


class AlgorithmParams(BaseModel):
    """Hyper-parameters shared by every algorithm that trains locally with mini-batch SGD."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    lr: float = Field(default=0.05, gt=0, description="local learning rate eta_l")
    batch_size: int = Field(default=32, ge=1)
    local_epochs: float = Field(default=1.0, gt=0, le=MAX_LOCAL_EPOCHS,
                                description="local passes over the client's train split")
    local_steps: int | None = Field(default=None, ge=1, le=MAX_LOCAL_STEPS, description="if set, exactly this many "
                                    "local steps instead of local_epochs")
    momentum: float = Field(default=0.0, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float | None = Field(default=None, gt=0, description="clip local gradients to this norm")

    @field_validator("*")
    @classmethod
    def _fits_float32(cls, value: Any) -> Any:
        """Every float hyper-parameter (of every algorithm) stays within float32's range."""
        if isinstance(value, float) and abs(value) > MAX_PARAM_MAGNITUDE:
            raise ValueError(f"must be at most {MAX_PARAM_MAGNITUDE:g} in magnitude (got {value:g})")
        return value


P = TypeVar("P", bound=AlgorithmParams)


@dataclass
class ClientData:
    """One client's local data, already on the executor's device."""

    client: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    steps: int | None = None
    """Local steps this task runs, decided by the clock at dispatch (partial work); None
    means the algorithm's full count :meth:`Algorithm.local_steps`."""

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])


@dataclass
class ClientResult:
    """What a client task returns: the upload (sent to the server), the client's state to
    keep until its next task (held by the runtime, never by the actor), and metrics."""

    upload: Tensors
    state: Tensors | None
    num_samples: int
    metrics: dict[str, float] = field(default_factory=dict)
    steps: int | None = None
    """Local steps the client ran (None: taken from ``metrics["steps"]``, which
    :func:`~fedclock.algorithms.training.local_sgd` counts)."""


@dataclass
class Arrival:
    """An upload as the server sees it. ``steps`` is the number of local steps the client
    reported (None when unknown, e.g. in hand-built tests)."""

    client: int
    upload: Tensors
    num_samples: int
    version_dispatched: int
    staleness: int
    steps: int | None = None


@dataclass
class ServerState:
    """Global state. ``tensors`` holds the model (flat, under ``"weights"``) and any other
    global tensors; ``version`` counts changes of the global model; ``extra`` holds small
    algorithm bookkeeping (plain Python numbers only)."""

    tensors: Tensors
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def evolve(self, tensors: Tensors | None = None, extra: dict[str, Any] | None = None) -> "ServerState":
        """A new state with these tensors and bookkeeping (unchanged when not given: the same
        tensors, a copy of ``extra``) and the same version: the server, not the algorithm,
        moves the version on (:meth:`Algorithm.receive`)."""
        return ServerState(tensors=self.tensors if tensors is None else tensors, version=self.version,
                           extra=dict(self.extra) if extra is None else extra)


@dataclass(frozen=True)
class Failure:
    """A task the server gave up on (:meth:`Algorithm.server_task_failed`)."""

    client: int
    version_dispatched: int
    """The server version the client started from."""
    reason: str
    """``"lost"``: the connection was lost (no result will come); ``"timed_out"``: the task
    ran past ``mode.task_timeout_s`` (its late result is discarded)."""


@dataclass(frozen=True)
class EvalResult:
    """Sums over a test set, so results from several batches or clients add up."""

    correct: float
    count: int
    loss_sum: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.count if self.count else float("nan")

    @property
    def loss(self) -> float:
        return self.loss_sum / self.count if self.count else float("nan")


class ServerStep(Protocol):
    """What :meth:`Algorithm.receive` asks of a server optimizer
    (:mod:`~fedclock.algorithms.server_optimizers`)."""

    def apply(self, before: ServerState, after: ServerState) -> ServerState:
        """``after`` with the step from ``before``'s weights replaced by the optimizer's."""


MODES = frozenset({"sync", "async"})
"""The protocol modes an algorithm may declare in ``modes``."""


def _docstring_lines(cls: type) -> list[str]:
    """The class's own docstring, dedented, as lines (empty when it has none)."""
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc).splitlines() if isinstance(doc, str) and doc.strip() else []


CLIENT_STEP = frozenset({"client_update", "local_train", "sgd_task", "sgd_result"})
"""The hooks that make a client's step (the plain and the vectorized one)."""

HOOK_FLAGS: dict[str, tuple[Any, frozenset[str]]] = {
    "vectorizable": (False, CLIENT_STEP),
    "objectives": (frozenset({"supervised"}), CLIENT_STEP),
    "stateless_clients": (False, CLIENT_STEP),
    "upload_is_delta": (False, CLIENT_STEP),
    "upload_is_model": (False, CLIENT_STEP),
    "per_token_targets": (False, CLIENT_STEP | {"evaluate_global", "evaluate_client"}),
    "aggregates_deltas": (False, CLIENT_STEP | {"server_receive"}),
}
"""The class flags that describe hooks: flag -> (its safe value, the hooks it speaks about).
A subclass inherits such a flag, unless a class placed before the one that declared it (in
the method resolution order: the subclass itself, or a layer in front of it) defines one of
its hooks; then it is the safe value, until a class declares the flag again
(:meth:`Algorithm.__init_subclass__`)."""


def _overrides_after_declaring(cls: type, flag: str, hooks: frozenset[str]) -> bool:
    """Whether a class before ``flag``'s declaring class in ``cls``'s MRO defines one of ``hooks``."""
    for klass in cls.__mro__:
        if flag in klass.__dict__:
            return False
        if not hooks.isdisjoint(klass.__dict__):
            return True
    return False


class Algorithm(ABC, Generic[P]):
    """Base class of every algorithm.

    A subclass sets ``name``, ``Params`` and ``modes`` and implements ``client_update`` and
    ``server_receive``; everything else has a default. Checked when the class is defined
    (:meth:`__init_subclass__`): a concrete class without ``name``, ``Params`` or ``modes``,
    or with a bad one, is a ``TypeError`` naming the attribute.

    Where the hooks run: ``init_server``, ``payload_for``, ``server_receive``,
    ``server_task_failed`` on the server actor; ``client_update`` and ``evaluate_client`` on
    client executors (any of them: a client's state travels with its task, never stays on an
    executor); ``evaluate_global`` on executors too. The object is pickled to every actor, so
    keep per-run data in the state the hooks return, not in attributes set by hooks."""

    name: ClassVar[str]
    """The name scenarios use (``algorithm: {name: ...}``); a user's own class is named by its
    ``module:Class`` reference instead, and this is what results and tables show."""
    summary: ClassVar[str]
    """One line for ``fedclock list algorithms``; default: the first line of the docstring."""
    paper: ClassVar[str]
    """The paper it implements; default: the docstring line that starts with ``Paper:``
    (else empty)."""
    Params: ClassVar[type[AlgorithmParams]]
    """Its hyper-parameters: a subclass of :class:`AlgorithmParams` (pydantic), validated from
    the ``algorithm:`` section of a scenario, and reported field by field on a mistake."""
    modes: ClassVar[frozenset[str]]
    """Protocol modes it runs in, a subset of ``{"sync", "async"}``: in ``sync`` mode
    ``server_receive`` gets a round's cohort, in ``async`` mode single arrivals (or the
    arrivals of one aggregation window)."""
    partial_work: ClassVar[bool] = True
    """True when ``client_update`` runs exactly :meth:`task_steps` local steps, so the clock
    may cut a task short (``population.completeness``). Algorithms whose local work has
    several phases that a step count does not describe set it to False; the loader then
    rejects any completeness other than ``full`` for them."""
    payload_is_shared: ClassVar[bool] = True
    """True when ``payload_for`` sends every client the same tensors at a given version
    (the runtime then builds the payload once per version)."""
    stateless_clients: bool = False
    """True when ``client_update`` never returns a client state (``state`` is always None
    for a client that had none), so a task whose upload the server will discard changes
    nothing and the clock need not run it. Inherited unless the subclass changes the client
    step (:data:`HOOK_FLAGS`: then False until it declares it again); an instance may
    turn it off for its settings (a self-supervised FedAvg keeps its local encoder: see
    :meth:`~fedclock.algorithms.ssl.ObjectiveMixin.keep_local_body`), and the runtime reads
    the instance's value; the runtime stops a run whose declared-stateless algorithm returns
    a state."""

    vectorizable: ClassVar[bool] = False
    """True when K clients can train at once as one batched network
    (:mod:`fedclock.algorithms.vectorized`: the class implements ``sgd_task`` and
    ``sgd_result``). Inherited unless a subclass changes the client step (``client_update``,
    ``local_train``, ``sgd_task``, ``sgd_result``): then False until it declares it again
    (:data:`HOOK_FLAGS`, applied by :meth:`__init_subclass__`)."""
    upload_is_delta: ClassVar[bool] = False
    """True when every upload is ``{"delta": w_local - w_received}``, the change of the whole
    flat model over the task, so ``upload.compression`` may encode it
    (:mod:`fedclock.algorithms.compressed`). Inherited like ``vectorizable``: a subclass that
    changes the client step claims it only by declaring it again."""
    upload_is_model: ClassVar[bool] = False
    """True when every upload is ``{"weights": w_local}``, the whole flat model trained from
    the received ``payload["weights"]``, so ``upload.compression`` may encode its difference
    from the received model (:mod:`fedclock.algorithms.compressed`). Inherited like
    ``upload_is_delta``."""
    aggregates_deltas: ClassVar[bool] = False
    """True when ``upload_is_delta`` and the server's step moves the model by a weighted mean
    of the arrivals' ``"delta"`` uploads whose weights are all equal once every arrival reports
    the same ``num_samples`` and ``steps`` (FedAvg's cohort mean, FedBuff's buffer mean), so
    central differential privacy (:mod:`fedclock.algorithms.privacy`) may noise the sum of
    one step's clipped deltas; see also :meth:`aggregation_problem` and
    :meth:`deltas_per_step`. Inherited unless a subclass changes the client step or
    ``server_receive`` (then False until declared again)."""
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised"})
    """Local objectives it trains with (``supervised``; ``simclr``/``simsiam`` through
    :class:`~fedclock.algorithms.ssl.ObjectiveMixin`). Inherited like ``vectorizable``: a
    subclass that changes the client step trains supervised only unless it declares it."""
    per_token_targets: ClassVar[bool] = False
    """True when every step of the class trains and evaluates through the shared loss and
    accuracy (:func:`~fedclock.algorithms.training.cross_entropy_loss`,
    :func:`evaluate_module`), which also take one target per token (a next-word task,
    :mod:`fedclock.algorithms.targets`); the experiment builder refuses per-token data for
    the others (per-class statistics, body/head objectives on sample features). Inherited
    unless a subclass changes the client step or an evaluation hook (then False until
    declared again)."""
    per_token_refusal: ClassVar[str] = ""
    """Why the class cannot take per-token targets, said in the builder's refusal (empty:
    not said); set by the classes that need one label per sample by their method."""
    moves_global_model: ClassVar[bool] = True
    """True when ``server_receive`` moves a global model (``state.tensors["weights"]``) by
    aggregating the clients' work, so a server optimizer
    (:mod:`~fedclock.algorithms.server_optimizers`) can replace that step; the loader refuses
    ``algorithm.server_optimizer`` for classes that set it False (independent training)."""
    server_optimizer: "ServerStep | None" = None
    """``algorithm.server_optimizer``, set by the experiment builder after construction (None:
    the algorithm's own server step, unchanged); :meth:`receive` applies it."""
    num_clients: int | None
    """Population size N, set by the experiment builder after construction (SCAFFOLD's
    server control update needs it); None when the algorithm is used on its own."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Fill the defaults that come from the class itself and check the required class
        attributes of every concrete subclass (a mistake fails at import, naming it)."""
        super().__init_subclass__(**kwargs)
        for attribute, (default, hooks) in HOOK_FLAGS.items():
            if attribute not in cls.__dict__ and _overrides_after_declaring(cls, attribute, hooks):
                setattr(cls, attribute, default)
        lines = _docstring_lines(cls)
        if "summary" not in cls.__dict__ and lines:
            cls.summary = lines[0]
        if "paper" not in cls.__dict__:
            cited = [line.partition(":")[2].strip() for line in lines if line.startswith("Paper:")]
            if cited or not hasattr(cls, "paper"):
                cls.paper = cited[0] if cited else ""
        if inspect.isabstract(cls):
            return
        where = f"{cls.__module__}.{cls.__qualname__}"
        for attribute, example in (("name", 'name = "server_momentum"'),
                                   ("Params", "class Params(AlgorithmParams): ..."),
                                   ("modes", 'modes = frozenset({"sync"})')):
            if not hasattr(cls, attribute):
                raise TypeError(f"{where}: set the class attribute {attribute!r} (e.g. {example})")
        if not isinstance(cls.name, str) or not cls.name:
            raise TypeError(f"{where}: name must be a non-empty string (got {cls.name!r})")
        if not (isinstance(cls.Params, type) and issubclass(cls.Params, AlgorithmParams)):
            raise TypeError(f"{where}: Params must be a subclass of fedclock.algorithms.base.AlgorithmParams "
                            f"(got {cls.Params!r})")
        if not isinstance(cls.modes, (set, frozenset)) or not cls.modes or not set(cls.modes) <= MODES:
            raise TypeError(f"{where}: modes must be a non-empty frozenset of {sorted(MODES)} (got {cls.modes!r})")
        if not hasattr(cls, "summary"):
            cls.summary = cls.name

    def __init__(self, params: P, model_factory: ModelFactory) -> None:
        self.params: P = params
        self.model_factory = model_factory
        self._workspace: FedModel | None = None
        self.num_clients = None

    @classmethod
    def mode_problem(cls, mode: object) -> str | None:
        """A one-line error (starting with the field path) when this algorithm cannot run in
        the scenario's mode settings, beyond the mode type itself; None when it can."""
        return None

    @classmethod
    def aggregation_problem(cls, params: AlgorithmParams) -> str | None:
        """Why these hyper-parameters make the server step something other than the
        equal-weight mean that ``aggregates_deltas`` declares (a few words, said in the
        loader's refusal of central privacy); None when they do not."""
        return None

    def deltas_per_step(self, arrivals: list[Arrival]) -> int:
        """How many deltas one global step sums when ``arrivals`` are folded in (only asked of
        classes with ``aggregates_deltas``; default: the arrivals of the call, a sync cohort)."""
        return max(1, len(arrivals))

    @classmethod
    def vectorize_params_problem(cls, params: AlgorithmParams) -> str | None:
        """A one-line error when these hyper-parameters cannot run vectorized (only asked of
        classes with ``vectorizable``); None when they can."""
        return None

    # ------------------------------------------------------------------ model helpers
    @property
    def workspace(self) -> FedModel:
        """A model instance reused for local work (its weights are overwritten per task)."""
        if self._workspace is None:
            self._workspace = self.model_factory.build()
        return self._workspace

    def to(self, device: torch.device | str) -> "Algorithm[P]":
        """Move the workspace model to a device (executors call this once)."""
        self._workspace = self.workspace.to(device)
        return self

    # ------------------------------------------------------------------ hooks
    def init_server(self, rng: torch.Generator) -> ServerState:
        """Initial global state, once per run on the server.

        ``rng`` is the run's initialization stream (seeded by the scenario seed): draw the
        initial weights from it. Returns version 0; ``tensors["weights"]`` must hold the
        flat model (default: the model's initial flat weights)."""
        return ServerState(tensors={"weights": self.model_factory.initial_weights(rng)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        """What the server sends to ``client`` for a task starting now (default: the global
        ``"weights"``). With ``payload_is_shared`` it is built once per version and sent to
        every client. Must not change ``state``."""
        return {"weights": state.tensors["weights"]}

    @abstractmethod
    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        """Local work of one task, on a client executor.

        ``payload``: what :meth:`payload_for` sent. ``client_state``: what this client's
        previous task returned as its state (None on its first task); the runtime keeps it
        between tasks. ``data``: the client's train/test tensors on the executor's device;
        run exactly :meth:`task_steps` ``(data)`` local steps (the clock may ask for fewer
        than the full count, ``data.steps``). ``rng``: seeded by (scenario seed, client,
        task index); draw every random choice (batches, augmentations, noise) from it, never
        from the global RNG, so runs are reproducible whatever actor runs the task.

        Returns a :class:`ClientResult`: ``upload`` (tensors sent to the server; their size
        should match :meth:`upload_bytes`), ``state`` (kept for the client's next task, or
        None), ``num_samples`` and ``metrics`` including ``"steps"`` (or ``steps``)."""

    @abstractmethod
    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        """Fold arrivals into the global state, on the server.

        ``arrivals``: the round's cohort (sync) or one arrival / one window's arrivals
        (async), each with ``staleness`` = versions since its client's payload and
        ``num_samples``. ``rng``: the server's stream, seeded by (seed, receive count).

        Returns ``(new_state, changed)``. Build ``new_state`` with
        :meth:`ServerState.evolve` (it keeps ``state.version``): the server owns the version
        and moves it on by one exactly when ``changed`` is True (:meth:`receive`). ``changed``
        says the global model (what :meth:`payload_for` sends) changed — a new server
        version, which the clock counts for ``stop.versions``, evaluations and staleness;
        False when the arrivals were only buffered or ignored."""

    def receive(self, state: ServerState, arrivals: list[Arrival],
                rng: torch.Generator) -> tuple[ServerState, bool]:
        """What the server runs for arrivals: :meth:`server_receive`, then the version, owned
        here: ``state.version + 1`` when the model changed, else ``state.version``. Tests of
        an update rule call this to step a state as the server would. With a
        ``server_optimizer``, the step the hook made to ``"weights"`` is replaced by the
        optimizer's (:mod:`~fedclock.algorithms.server_optimizers`) whenever the model changed."""
        new, changed = self.server_receive(state, arrivals, rng)
        if changed and self.server_optimizer is not None:
            new = self.server_optimizer.apply(state, new)
        version = state.version + int(bool(changed))
        return (new if new.version == version else dataclasses.replace(new, version=version)), bool(changed)

    def server_task_failed(self, state: ServerState, failure: Failure) -> ServerState:
        """The server gave up on a task (optional hook; default: nothing changes).

        Called on the server when a client's connection is lost or its task runs past
        ``mode.task_timeout_s`` (``failure.reason``), in virtual-time order with the arrivals.
        Returns the new state, built with :meth:`ServerState.evolve`: it may update
        bookkeeping that later :meth:`server_receive` calls read (a memory of each client's
        last update as in MIFA, a buffer's expected count as in FedBuff variants), but not
        the global model: the version does not move and what :meth:`payload_for` sends at
        this version must stay the same. Draws nothing at random."""
        return state

    def server_formula_flops(self, arrivals: int) -> int:
        """FLOPs of the server step's work that runs outside PyTorch (NumPy, SciPy) for
        ``arrivals`` arrivals, stated by a formula (optional hook; default 0). The torch part
        of the step is counted on its own (:mod:`fedclock.algorithms.server_cost`)."""
        return 0

    def server_step_kind(self, state: ServerState, arrivals: list[Arrival]) -> Hashable | None:
        """The kind of work the server step on ``arrivals`` does from ``state`` (optional hook,
        pure: reads, never changes): steps of one kind with as many arrivals cost the same
        FLOPs, so the cost model counts each (kind, number of arrivals) once
        (:mod:`fedclock.algorithms.server_cost`, which lists the shipped kinds). Default None:
        no kind named, every step is counted on its own (exact, slower). Trusted only from
        the class that defines :meth:`server_receive` or a subclass of it."""
        return None

    @property
    def hears_failures(self) -> bool:
        """True when the class overrides :meth:`server_task_failed` (the runtime then
        reports every task the server gives up on)."""
        return type(self).server_task_failed is not Algorithm.server_task_failed

    def global_weights(self, state: ServerState) -> torch.Tensor:
        """The global model as a flat vector of :attr:`model_factory`'s layout: what
        :meth:`evaluate_global` tests and what ``evaluation.adapted`` adapts on every client
        (:mod:`fedclock.algorithms.adapted`). Default: ``state.tensors["weights"]``; an
        algorithm whose global model is another tensor (SPFL's mean of the personalized
        models) overrides this, not :meth:`evaluate_global`."""
        return state.tensors["weights"]

    @classmethod
    def adapted_problem(cls, params: AlgorithmParams) -> str | None:
        """A one-line error when ``evaluation.adapted`` cannot score this algorithm with these
        hyper-parameters (its global model is no classifier to adapt by supervised
        cross-entropy); None when it can."""
        return None

    def evaluate_global(self, state: ServerState, x: torch.Tensor, y: torch.Tensor,
                        batch_size: int) -> EvalResult:
        """The server model (:meth:`global_weights`) on a test set (on an executor; summed,
        see :class:`EvalResult`)."""
        return evaluate_flat(self.workspace, self.model_factory, self.global_weights(state), x, y, batch_size)

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        """The model this client would use, on its own test split (default: the payload's
        global model, as in FedAvg; a personalized algorithm combines it with
        ``client_state``). Must not change ``client_state`` and draws nothing at random."""
        return evaluate_flat(self.workspace, self.model_factory, payload["weights"], data.x_test, data.y_test,
                             batch_size)

    def server_metrics(self, state: ServerState) -> dict[str, float]:
        """Numbers about the global state recorded with every evaluation (a row of
        ``metrics.parquet``), e.g. the privacy spent so far by the DP algorithms
        (:func:`fedclock.algorithms.dp.privacy_report`). Default: none."""
        return {}

    def diagnostics(self, state: ServerState) -> list[dict[str, Any]]:
        """Rows of the run's ``diagnostics.parquet``, read from the final server state after
        the run (default: none, and no file). An algorithm that logs quantities of its own
        (SPFL's gradient similarities) keeps them in its state and returns them here as flat
        dicts of numbers and strings, one ``"table"`` column naming each row's kind."""
        return []

    # ------------------------------------------------------------------ costs
    def download_bytes(self) -> int:
        """Bytes sent to a client per task (default: the flat model)."""
        return self.model_factory.num_params * 4

    def upload_bytes(self) -> int:
        """Bytes a client sends back per task (default: the flat model or its delta)."""
        return self.model_factory.num_params * 4

    def local_steps(self, num_samples: int) -> int:
        """Mini-batch steps one task runs on a client with ``num_samples`` training samples."""
        p = self.params
        if p.local_steps is not None:
            return p.local_steps
        return epoch_steps(num_samples, p.batch_size, p.local_epochs)

    def task_steps(self, data: ClientData) -> int:
        """Steps this task runs: the clock's ``data.steps`` if set, else the full count."""
        return data.steps if data.steps is not None else self.local_steps(data.num_train)


def epoch_steps(num_samples: int, batch_size: int, epochs: float) -> int:
    """Mini-batch steps of ``epochs`` passes over ``num_samples`` samples in batches of
    ``batch_size``: ``round(epochs * ceil(n / B))``, at least one step (the rounding every
    phase of local work uses, :meth:`Algorithm.local_steps` included)."""
    per_epoch = max(1, -(-num_samples // batch_size))
    return max(1, round(epochs * per_epoch))


def evaluate_flat(model: nn.Module, factory: ModelFactory, weights: torch.Tensor, x: torch.Tensor,
                  y: torch.Tensor, batch_size: int) -> EvalResult:
    """Load flat weights into ``model`` and compute accuracy and summed cross-entropy."""
    factory.load_flat(model, weights)
    return evaluate_module(model, x, y, batch_size)


@torch.no_grad()
def evaluate_module(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> EvalResult:
    """Accuracy and summed cross-entropy of ``model`` on (x, y); with per-token targets both
    are over the tokens that are not padding, and ``count`` is those tokens
    (:mod:`fedclock.algorithms.targets`)."""
    if y.numel() == 0:
        return EvalResult(0.0, 0, 0.0)
    was_training = model.training
    model.eval()
    correct = 0.0
    loss_sum = 0.0
    for start in range(0, y.shape[0], batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        logits = model(xb)
        loss_sum += float(target_cross_entropy(logits, yb, reduction="sum"))
        correct += float(correct_targets(logits, yb))
    model.train(was_training)
    return EvalResult(correct, counted_targets(y), loss_sum)
