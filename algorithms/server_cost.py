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

**Counted once per number of arrivals**, from the initial server state with arrivals of
staleness 0: a step whose work depends on the state is charged as that first step (FedBuff's
arrival that only fills its buffer, never the K-th that also applies it; a staleness
function's extra multiply is not seen). Averaging, server optimizers and QP solves do not
depend on the state, so for them the count is exact.

**Work outside PyTorch** cannot run on meta tensors and is charged by a formula the
algorithm states: :meth:`~fedclock.algorithms.base.Algorithm.server_formula_flops` (FedPAC's
simplex QP solves in NumPy, :func:`fedclock.algorithms.simplex_qp.qp_flops`); the solve
itself answers a meta matrix with uniform weights so the torch code around it is counted.
"""
from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.fx.experimental import _config as fx_config
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode

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


def upload_template(algorithm: Algorithm, input_dtype: torch.dtype = torch.float32) -> Tensors:
    """The tensors one client task uploads (on the meta device), from a counted-style run of
    the algorithm's ``client_update`` on one batch of meta data."""
    work = copy.deepcopy(algorithm)
    work._workspace = None
    rng = torch.Generator().manual_seed(0)
    payload = _to_meta(work.payload_for(work.init_server(rng), 0))
    work.to(META)
    data = meta_data(max(2, algorithm.params.batch_size), tuple(algorithm.model_factory.input_shape),
                     input_dtype, None, algorithm.model_factory.target_shape)
    with MetaRun():
        result = work.client_update(payload, None, data, torch.Generator().manual_seed(1))
    out: Tensors = result.upload
    return out


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
    work = copy.deepcopy(algorithm)
    work._workspace = None
    state = work.init_server(torch.Generator().manual_seed(0))
    state = ServerState(tensors=_to_meta(state.tensors), version=state.version, extra=_to_meta(state.extra))
    work.to(META)
    n = max(2, algorithm.params.batch_size) if num_samples is None else num_samples
    steps = algorithm.local_steps(n) if algorithm.partial_work else None
    batch = [Arrival(client=c, upload=dict(template), num_samples=n, version_dispatched=0, staleness=0, steps=steps)
             for c in range(arrivals)]
    counter = FlopCounterMode(display=False, custom_mapping=ELEMENTWISE)
    with _masks_all_true(), counter, MetaRun(boolean=True):
        work.receive(state, batch, torch.Generator().manual_seed(0))
    return int(counter.get_total_flops()) + int(algorithm.server_formula_flops(arrivals))


@dataclass
class ServerCost:
    """The counted FLOPs of an algorithm's server step, by number of arrivals (cached: a run
    sees few distinct cohort sizes)."""

    algorithm: Algorithm
    input_dtype: torch.dtype = torch.float32
    _upload: Tensors | None = None
    _by_count: dict[int, int] = field(default_factory=dict)

    def flops(self, arrivals: int) -> int:
        """FLOPs of one server step folding ``arrivals`` uploads."""
        if arrivals not in self._by_count:
            if self._upload is None and arrivals > 0:
                self._upload = upload_template(self.algorithm, self.input_dtype)
            self._by_count[arrivals] = count_server_step(self.algorithm, arrivals, self._upload)
        return self._by_count[arrivals]
