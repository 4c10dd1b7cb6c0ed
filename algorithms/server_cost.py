"""Counting what the server's step costs: the FLOPs of folding ``k`` arrivals into the global
state (weighted averaging of the updates, server optimizer steps, decoding compressed
uploads, QP solves), without running it for real.

The algorithm's own :meth:`~fedclock.algorithms.base.Algorithm.receive` (its
``server_receive`` and, with one, the server optimizer's step) runs on *meta* tensors under
PyTorch's :class:`torch.utils.flop_counter.FlopCounterMode`, through the same
:class:`~fedclock.algorithms.flop_count.MetaRun` as a client's task, with ``k`` arrivals
shaped like a real upload (a client task's upload, itself made on meta tensors). So what is
counted is the code path a real server step takes, for every algorithm, a user's plugin
included.

**Element-wise work is counted here**, unlike on the client: a server step is almost only
element-wise arithmetic over model-sized vectors (``w + sum_j (n_j / n) delta_j``), which
the counter's own table (matrix products and convolutions only) would count as nothing. The
counter is given a formula for each arithmetic operation (:data:`ELEMENTWISE`): one FLOP per
output element for a unary or binary operation (``add``, ``mul``, ``sqrt``, ``sign``, ...),
two for a fused multiply-add (``add``/``sub`` with ``alpha``, ``addcmul``, ``addcdiv``,
``lerp``), one per input element for a reduction (``sum``, ``mean``, a norm). Copies,
conversions and fills cost nothing. Matrix products keep the counter's own formula.
A boolean value read (``bool(torch.isfinite(d).all())``) gives True, so the checks that
every upload is finite pass. A boolean mask (``x[mask]``, ``nonzero``) has no values on meta tensors: it is taken as all
true (PyTorch's ``meta_nonzero_assume_all_nonzero``, set for the counted step only), so a
masked update is charged as if every element were selected (an upper bound).

**Counted per step, from the state the step starts from.** A run follows its server on
meta tensors (:class:`ServerSteps`, one per run): each step's arrivals (client, samples,
version, staleness, steps as the clock knows them; uploads shaped like a real one) are folded
into a *shadow* of the server state, so a step is charged what it does from where the server
actually is: FedBuff's arrival that only fills its buffer costs the append, the ``K``-th the
append and the flush (and the server optimizer's step, which runs only when the model
changes). The shadow is stepped on meta tensors (shapes only: no memory, microseconds per
operation); a value read on it gives 1.0 (and a boolean True, above), so a step whose path
depends on the *values* of the weights is followed as if they were those. The shadow sees the
arrivals the server applies, not the tasks it gives up on: an algorithm's failure hook
(:meth:`~fedclock.algorithms.base.Algorithm.server_task_failed`; no shipped algorithm has
one) is not followed. **Each arrival's upload is shaped like what that task uploads**: when
the clock dispatches a task it asks the shadow what the task will upload
(:meth:`ServerSteps.upload_kind`: the signature, keys, shapes and dtypes, of the payload the
algorithm's ``payload_for`` makes for that client from the followed state the server is in
then), and the task carries that signature to its step; one upload per signature is made on
meta tensors by the algorithm's ``client_update`` on such a payload and no client state
(cached, shared by the runs of a session; an upload whose make-up depends on the client's
state or on the payload's values is not followed: no shipped algorithm's does). With a
payload every client shares, the signature is made once per step. SPFL needs this
(:mod:`fedclock.algorithms.spfl`): the tasks of a similarity refresh are sent
``refresh_from`` and upload ``refresh``, the others ``update`` (SPFL-w: ``weights``), and
the refresh moves no server version, so only the followed state tells them apart: refresh
steps and model updates are each charged their own work. An arrival given no signature (a
direct call) is shaped like the first task's upload, from the initial state's payload. A
resumed run replays its clock from the start, so its shadow is the same as the uninterrupted
run's.

**Step kinds, cached.** An algorithm may name the kind of work a step does, from the state
before it and the arrivals (:meth:`~fedclock.algorithms.base.Algorithm.server_step_kind`,
pure): two steps of one kind with as many arrivals, uploading alike, cost the same, so each
(kind, number of arrivals, their uploads) is counted once (:class:`ServerCost`, shared by
the runs of a session) and the shadow is only stepped after. The kinds the shipped
algorithms name:

* ``"aggregate"``: FedAvg (the weighted average of the deltas, then ``w + lr * step``) and
  every subclass that keeps its server step;
* ``"append"`` / ``"flush"`` (``"flush xN"`` when one call fills the buffer ``N`` times):
  FedBuff (:mod:`fedclock.algorithms.fedbuff`);
* ``"mix"``: FedAsync's sequential mixing, every arrival mixed into the model; with
  ``window: stale_mix_mean`` ``"mix N stale"``, the ``N`` stale arrivals mixed with the
  model before the mean (:mod:`fedclock.algorithms.fedasync`).

An algorithm that names none (None, the default) has every step counted on the shadow: exact
whatever its state (LGA's and PLGA's leap, only for stale arrivals; FedCR's steps;
FedPAC's QPs, which run in every sync round). A kind is only trusted from the class that
defines the server step: a subclass that overrides ``server_receive`` without naming kinds
again is counted step by step (:func:`declares_kinds`).

**Work outside PyTorch** cannot run on meta tensors and is charged by a formula the
algorithm states: :meth:`~fedclock.algorithms.base.Algorithm.server_formula_flops` (FedPAC's
simplex QP solves in NumPy, :func:`fedclock.algorithms.simplex_qp.qp_flops`); the solve
itself answers a meta matrix with uniform weights so the torch code around it is counted.
"""
from __future__ import annotations

import contextlib
import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

import torch
from torch.fx.experimental import _config as fx_config
from torch.utils._pytree import tree_map

from fedclock.algorithms.base import Algorithm, Arrival, ServerState, Tensors
from fedclock.algorithms.flop_count import META, MetaRun, meta_data

aten = torch.ops.aten


def _numel(shape: Any) -> int:
    return math.prod(shape) if isinstance(shape, (tuple, list, torch.Size)) and all(
        isinstance(s, int) for s in shape) else 0


def _out_numel(out_shape: Any) -> int:
    """Elements of an output shape (a list of shapes for ``_foreach`` operations)."""
    if isinstance(out_shape, (tuple, list)) and out_shape and not all(isinstance(s, int) for s in out_shape):
        return sum(_out_numel(s) for s in out_shape)
    return _numel(out_shape) if out_shape is not None else 0


def _per_output(weight: int) -> Callable[..., int]:
    def formula(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return weight * _out_numel(out_shape)
    return formula


def _add_like(*args: Any, out_shape: Any = None, alpha: Any = 1, **kwargs: Any) -> int:
    """``a + alpha * b``: one FLOP per element, two with an ``alpha`` other than 1."""
    return (1 if alpha == 1 else 2) * _out_numel(out_shape)


def _reduction(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """A reduction reads every input element once."""
    return _out_numel(args[0]) if args else 0


ELEMENTWISE: dict[Any, Callable[..., int]] = {
    **{op: _add_like for op in (aten.add, aten.add_, aten.sub, aten.sub_, aten.rsub, aten._foreach_add,
                                aten._foreach_add_, aten._foreach_sub, aten._foreach_sub_)},
    **{op: _per_output(1) for op in (aten.mul, aten.mul_, aten.div, aten.div_, aten.neg, aten.sqrt, aten.rsqrt,
                                     aten.pow, aten.abs, aten.sign, aten.exp, aten.log, aten.maximum,
                                     aten.minimum, aten.clamp, aten.clamp_, aten.clamp_min, aten.where,
                                     aten.reciprocal, aten._foreach_mul, aten._foreach_mul_, aten._foreach_div,
                                     aten._foreach_div_, aten._foreach_sqrt)},
    **{op: _per_output(2) for op in (aten.addcmul, aten.addcmul_, aten.addcdiv, aten.addcdiv_, aten.lerp,
                                     aten.lerp_, aten._foreach_addcmul_, aten._foreach_addcdiv_,
                                     aten._foreach_lerp_)},
    **{op: _reduction for op in (aten.sum, aten.mean, aten.linalg_vector_norm, aten.norm, aten.amax,
                                 aten.max, aten.min, aten.prod)},
}
"""Formulas for element-wise operations given to the counter (see the module's docstring)."""


def _to_meta(value: Any) -> Any:
    return tree_map(lambda v: v.to(META) if isinstance(v, torch.Tensor) else v, value)


@contextlib.contextmanager
def _masks_all_true() -> Iterator[None]:
    """PyTorch's ``meta_nonzero_assume_all_nonzero`` for the duration of a counted step
    (restored after, as ``torch``'s own config patching does)."""
    before = fx_config.meta_nonzero_assume_all_nonzero
    fx_config.meta_nonzero_assume_all_nonzero = True
    try:
        yield
    finally:
        fx_config.meta_nonzero_assume_all_nonzero = before


def upload_template(algorithm: Algorithm, input_dtype: torch.dtype = torch.float32,
                    payload: Tensors | None = None) -> Tensors:
    """The tensors one client task uploads (on the meta device), from a counted-style run of
    the algorithm's ``client_update`` on one batch of meta data, sent ``payload`` (default:
    client 0's payload from the initial server state)."""
    work = copy.deepcopy(algorithm)
    work._workspace = None
    if payload is None:
        payload = work.payload_for(work.init_server(torch.Generator().manual_seed(0)), 0)
    payload = _to_meta(payload)
    work.to(META)
    data = meta_data(max(2, algorithm.params.batch_size), tuple(algorithm.model_factory.input_shape),
                     input_dtype, None, algorithm.model_factory.target_shape)
    with MetaRun():
        result = work.client_update(payload, None, data, torch.Generator().manual_seed(1))
    out: Tensors = result.upload
    return out


def meta_state(algorithm: Algorithm) -> tuple[Algorithm, ServerState]:
    """A copy of the algorithm on the meta device and its initial server state there (what a
    counted or followed step runs on; the algorithm itself is not touched)."""
    work = copy.deepcopy(algorithm)
    work._workspace = None
    state = work.init_server(torch.Generator().manual_seed(0))
    state = ServerState(tensors=_to_meta(state.tensors), version=state.version, extra=_to_meta(state.extra))
    work.to(META)
    return work, state


def run_step(work: Algorithm, state: ServerState, batch: list[Arrival], count: bool) -> tuple[ServerState, int]:
    """One server step of ``work`` (on the meta device) on ``batch`` from ``state``: the new
    state and, with ``count``, the FLOPs of its torch code plus the algorithm's formula for
    work outside PyTorch (module docstring); without, 0."""
    counter: Any = contextlib.nullcontext()
    if count:  # imported here: PyTorch's counter imports Triton (flop_count._flop_counter)
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False, custom_mapping=ELEMENTWISE)
    with _masks_all_true(), counter, MetaRun(boolean=True):
        new, _ = work.receive(state, batch, torch.Generator().manual_seed(0))
    if not count:
        return new, 0
    return new, int(counter.get_total_flops()) + int(work.server_formula_flops(len(batch)))


def count_server_step(algorithm: Algorithm, arrivals: int, upload: Tensors | None = None,
                      num_samples: int | None = None) -> int:
    """FLOPs of one server step folding ``arrivals`` uploads (from distinct clients, each of
    ``num_samples`` samples, default one batch, staleness 0) into the initial server state:
    the torch code counted on meta tensors plus the algorithm's stated formula for work
    outside PyTorch (module docstring). The algorithm itself is not touched."""
    if arrivals < 0:
        raise ValueError(f"arrivals: {arrivals} (allowed: 0 or more)")
    if arrivals == 0:
        return 0
    template = upload_template(algorithm) if upload is None else upload
    work, state = meta_state(algorithm)
    n = max(2, algorithm.params.batch_size) if num_samples is None else num_samples
    steps = algorithm.local_steps(n) if algorithm.partial_work else None
    batch = [Arrival(client=c, upload=dict(template), num_samples=n, version_dispatched=0, staleness=0, steps=steps)
             for c in range(arrivals)]
    return run_step(work, state, batch, count=True)[1]


UploadKind = tuple[tuple[str, tuple[int, ...], str], ...]
"""What a task uploads, told by its payload's signature: (key, shape, dtype) of each tensor."""


def payload_signature(payload: Tensors) -> UploadKind:
    """The signature of a payload (its keys, shapes and dtypes, not its values), which tells
    what the task sent it uploads (module docstring)."""
    return tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(payload.items()))


def declares_kinds(algorithm: Algorithm) -> bool:
    """Whether the algorithm's step kinds can be trusted: the class that names them
    (:meth:`~fedclock.algorithms.base.Algorithm.server_step_kind`) is the one that defines its
    server step, or a subclass of it (a subclass with a server step of its own, naming no kinds
    again, is counted step by step)."""
    mro = type(algorithm).__mro__
    namer = next(c for c in mro if "server_step_kind" in c.__dict__)
    stepper = next(c for c in mro if "server_receive" in c.__dict__)
    return namer is not Algorithm and issubclass(namer, stepper)


@dataclass(frozen=True)
class ArrivalInfo:
    """What the clock knows of an arrival before the server step: enough to follow it
    (``steps``: the local steps the clock assigned, None for the algorithm's full count)."""

    client: int
    num_samples: int
    version_dispatched: int
    staleness: int
    steps: int | None = None
    upload: Hashable | None = None
    """What the task uploads (:meth:`ServerSteps.upload_kind` at its dispatch); None: the
    first task's upload."""


@dataclass
class ServerCost:
    """The counted FLOPs of an algorithm's server steps, by (step kind, number of arrivals),
    shared by the runs of a session (module docstring); :meth:`follow` starts one run's
    shadow."""

    algorithm: Algorithm
    input_dtype: torch.dtype = torch.float32
    _upload: Tensors | None = None
    _by_count: dict[int, int] = field(default_factory=dict)
    _uploads: dict[Hashable, Tensors] = field(default_factory=dict)
    by_kind: dict[tuple[Any, ...], int] = field(default_factory=dict)
    """FLOPs of each (kind, number of arrivals, their upload kinds) counted so far."""

    def upload(self) -> Tensors:
        """The tensors one client task uploads, on the meta device (made once)."""
        if self._upload is None:
            self._upload = upload_template(self.algorithm, self.input_dtype)
        return self._upload

    def upload_of(self, kind: Hashable | None, payload: Tensors | None = None) -> Tensors:
        """The tensors a task of this upload kind uploads, on the meta device (made once per
        kind, from ``payload``, a payload of that signature; None: the first task's)."""
        if kind is None:
            return self.upload()
        if kind not in self._uploads:
            if payload is None:
                raise KeyError(f"upload kind {kind} was never told at a dispatch")
            self._uploads[kind] = upload_template(self.algorithm, self.input_dtype, payload)
        return self._uploads[kind]

    def flops(self, arrivals: int) -> int:
        """FLOPs of one server step folding ``arrivals`` uploads into the *initial* state."""
        if arrivals not in self._by_count:
            self._by_count[arrivals] = count_server_step(self.algorithm, arrivals,
                                                         self.upload() if arrivals > 0 else None)
        return self._by_count[arrivals]

    def follow(self) -> "ServerSteps":
        """A new run's shadow of the server, at its initial state."""
        return ServerSteps(self)


class ServerSteps:
    """One run's server followed on meta tensors, step by step (module docstring): each
    :meth:`step` is charged what it does from the state the server is in."""

    def __init__(self, cost: ServerCost) -> None:
        self.cost = cost
        self.work, self.state = meta_state(cost.algorithm)
        self.kinds = declares_kinds(cost.algorithm)
        self.counted_steps = 0
        """Steps counted under the FLOP counter (the others came from the cache)."""
        self.steps_done = 0
        """Server steps followed so far."""
        self.before: ServerState = self.state
        """The followed state before the last step (the server's own until it publishes the
        step's result, after the step's time)."""
        self._shared: dict[int, UploadKind] = {}
        """With a payload shared by every client: the upload kind after so many steps."""

    def upload_kind(self, client: int, server_steps: int) -> UploadKind:
        """What a task dispatched now to ``client`` uploads, from the state the server is in
        after ``server_steps`` steps (the followed one, or the one before it while the last
        step still takes its time): the signature of its payload (module docstring)."""
        shared = self.work.payload_is_shared
        if shared and server_steps in self._shared:
            return self._shared[server_steps]
        if server_steps == self.steps_done:
            state = self.state
        elif server_steps == self.steps_done - 1:
            state = self.before
        else:
            raise ValueError(f"server_steps: {server_steps} (followed: {self.steps_done - 1} or {self.steps_done})")
        with MetaRun(boolean=True):
            payload = self.work.payload_for(state, client)
        kind = payload_signature(payload)
        self.cost.upload_of(kind, payload)
        if shared:
            self._shared = {k: v for k, v in self._shared.items() if k >= server_steps - 1}
            self._shared[server_steps] = kind
        return kind

    def step(self, arrivals: list[ArrivalInfo]) -> int:
        """FLOPs of the server step folding these arrivals (in the order the server gets them)
        into the followed state, which then moves on as the server's does."""
        if not arrivals:
            return 0
        upload_of = self.cost.upload_of
        local_steps = self.work.local_steps
        batch = [Arrival(client=a.client, upload=dict(upload_of(a.upload)), num_samples=a.num_samples,
                         version_dispatched=a.version_dispatched, staleness=a.staleness,
                         steps=local_steps(a.num_samples) if a.steps is None else a.steps)
                 for a in arrivals]
        kind = self.work.server_step_kind(self.state, batch) if self.kinds else None
        key = None if kind is None else (kind, len(batch), tuple(sorted(Counter(a.upload for a in arrivals).items(),
                                                                        key=repr)))
        self.before = self.state
        self.steps_done += 1
        if key is not None and key in self.cost.by_kind:
            self.state, _ = run_step(self.work, self.state, batch, count=False)
            return self.cost.by_kind[key]
        self.state, flops = run_step(self.work, self.state, batch, count=True)
        self.counted_steps += 1
        if key is not None:
            self.cost.by_kind[key] = flops
        return flops
