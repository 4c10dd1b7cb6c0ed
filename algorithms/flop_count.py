"""Counting what one client task of an algorithm costs, without running it for real.

The algorithm's own ``client_update`` runs on *meta* tensors (shapes and dtypes, no data,
no arithmetic) under PyTorch's :class:`torch.utils.flop_counter.FlopCounterMode`, so what
is counted is exactly the code path a real task takes: forward and backward passes, SAM's
second pass, the extra forward passes of anchors and personal models, Monte Carlo draws,
regularizers. A user's plugin algorithm is counted the same way, with nothing declared.

What is counted is what ``FlopCounterMode`` counts: matrix products and convolutions
(forward and backward, ``2 x`` multiply-adds), attention; element-wise work (activations,
norms, optimizer updates) is not counted, as in the FLOP figures of papers and of
``fvcore``/``ptflops``.

How a meta run gets through code written for real tensors (:class:`MetaRun`, a dispatch
mode under the counter): a read of a tensor's value (``float(loss)``, ``.item()``) gives
1.0 for floats, 0 for integers and False for booleans (so a loss average or a norm is a
harmless number; a branch on a tensor's value takes that value); a copy to another device
(``.cpu()``) stays on the meta device; tensors the code makes on the CPU (random
permutations drawn from the task's generator) meet meta tensors as meta tensors. Why not
``FakeTensorMode``: it refuses value reads and cannot move a module it built to the device
it is already on (``Module.to``), which algorithms that build helper modules lazily do.

What the count costs a process once: its first operator makes PyTorch import ``torch._dynamo``
(every ``TorchDispatchMode``'s ``__torch_dispatch__`` and the meta kernels' type promotion are
marked not to compile, and the mark imports the compiler on first use): 1.7-2.5 s on the 2-core
machine, the largest single item of a cold one-round run (``benchmarks/RESULTS.md``, "Issue 34
...: the FLOP count's import of TorchDynamo"); the grid's worker server imports it once for all
its workers (:mod:`fedclock.scenarios.grid_workers`).

Memory (:class:`MemoryTrace`) is traced in the same run: the bytes of the tensors autograd
saves for backward (the activations of the batch), followed through saved-tensor hooks and
released when autograd frees them, so the trace knows the peak of live activations; the
parameters of every module the algorithm holds, their gradients and momentum buffers are
added from the modules themselves (:mod:`fedclock.algorithms.task_cost`).
"""
from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from fedclock.algorithms.base import Algorithm, ClientData, ClientResult, Tensors
from fedclock.algorithms.targets import target_cross_entropy

META = torch.device("meta")


class MetaRun(TorchDispatchMode):
    """Keeps a run on the meta device: see the module's docstring for what it changes.
    ``boolean``: what a read of a boolean tensor gives (False on a client; a counted server
    step passes True, so its checks that every upload is finite pass)."""

    def __init__(self, boolean: bool = False) -> None:
        super().__init__()
        self.boolean = boolean

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            dtype = args[0].dtype
            return 1.0 if dtype.is_floating_point or dtype.is_complex else self.boolean if dtype == torch.bool else 0
        if kwargs.get("device") not in (None, META):
            kwargs = dict(kwargs, device=META)

        def to_meta(a: Any) -> Any:
            return a.to(META) if isinstance(a, torch.Tensor) and a.device != META else a

        return func(*tree_map(to_meta, args), **tree_map(to_meta, kwargs))


class _Saved:
    """A tensor autograd saved for backward, as the trace holds it (released with it)."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


@dataclass
class MemoryTrace:
    """Live bytes of saved activations during a run, and their peak."""

    live: int = 0
    peak: int = 0
    leaves: set[int] = field(default_factory=set)
    """ids of parameters (their saved views are parameters, not activations)."""

    def pack(self, tensor: torch.Tensor) -> Any:
        base = tensor._base if tensor._base is not None else tensor
        if id(base) in self.leaves or (base.requires_grad and base.grad_fn is None):
            return tensor  # a parameter (or a view of one): counted with the parameters
        nbytes = tensor.numel() * tensor.element_size()
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        saved = _Saved(tensor)
        weakref.finalize(saved, self._release, nbytes)
        return saved

    @staticmethod
    def unpack(saved: Any) -> torch.Tensor:
        return saved.tensor if isinstance(saved, _Saved) else saved

    def _release(self, nbytes: int) -> None:
        self.live -= nbytes


@dataclass(frozen=True)
class TaskCount:
    """What one counted task did: its FLOPs, the peak bytes of saved activations, and the
    bytes of the parameters (of every module the algorithm held), of their gradients and of
    the tensors that came in and went out (payload, client state, upload)."""

    flops: int
    activation_bytes: int
    parameter_bytes: int
    trainable_bytes: int
    message_bytes: int


def _nbytes(tensors: Tensors | None) -> int:
    return 0 if tensors is None else sum(t.numel() * t.element_size() for t in tensors.values())


def _modules(algorithm: Algorithm) -> list[torch.nn.Module]:
    """Every module the algorithm holds in an attribute (its workspace and helper models)."""
    return [v for v in vars(algorithm).values() if isinstance(v, torch.nn.Module)]


def meta_data(num_samples: int, input_shape: tuple[int, ...], input_dtype: torch.dtype,
              steps: int | None, target_shape: tuple[int, ...] = ()) -> ClientData:
    """A client's data as meta tensors of ``num_samples`` training samples (labels int64 of
    ``target_shape`` each, no test split)."""
    x = torch.empty((num_samples, *input_shape), dtype=input_dtype, device=META)
    y = torch.zeros((num_samples, *target_shape), dtype=torch.long, device=META)
    return ClientData(client=0, x_train=x, y_train=y, x_test=x[:0], y_test=y[:0], steps=steps)


def count_task(algorithm: Algorithm, num_samples: int, steps: int | None = None,
               input_dtype: torch.dtype = torch.float32, steady: bool = True) -> TaskCount:
    """Count one task of ``algorithm`` on a client with ``num_samples`` training samples
    (``steps``: the clock's step count for partial work, None for the full task).

    With ``steady``, the task counted is a client's *second* one when its first leaves a
    client state (a personal model, FedStyle's extracted styles): what is charged is then
    the steady task every later one repeats, not a first task that differs from it. The
    algorithm itself is not touched (a copy runs on the meta device)."""
    work = copy.deepcopy(algorithm)
    work._workspace = None
    rng = torch.Generator().manual_seed(0)
    payload = {k: v.to(META) for k, v in work.payload_for(work.init_server(rng), 0).items()}
    work.to(META)
    data = meta_data(num_samples, tuple(algorithm.model_factory.input_shape), input_dtype, steps,
                     algorithm.model_factory.target_shape)
    leaves = {id(p) for m in _modules(work) for p in m.parameters()}
    result, trace, flops = _counted(work, payload, None, data, leaves)
    state_in = None
    if steady and result.state is not None:
        state_in = result.state
        result, trace, flops = _counted(work, payload, state_in, data, leaves)
    params = {id(p): p for m in _modules(work) for p in m.parameters()}
    parameter_bytes = sum(p.numel() * p.element_size() for p in params.values())
    trainable_bytes = sum(p.numel() * p.element_size() for p in params.values() if p.requires_grad)
    return TaskCount(flops=flops, activation_bytes=trace.peak,
                     parameter_bytes=parameter_bytes, trainable_bytes=trainable_bytes,
                     message_bytes=_nbytes(payload) + _nbytes(state_in) + _nbytes(result.state)
                     + _nbytes(result.upload))


def _flop_counter() -> Any:
    """A fresh ``FlopCounterMode``, its module imported on the first count: importing
    ``torch.utils.flop_counter`` imports Triton (0.3-0.4 s of a cold process on the shared
    2-core machine, ``benchmarks/RESULTS.md``, "Start-up floors"), which a run whose counts
    are all cached on disk (:mod:`fedclock.algorithms.task_cost`) never needs."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False)


def _counted(work: Algorithm, payload: Tensors, state: Tensors | None, data: ClientData,
             leaves: set[int]) -> tuple[ClientResult, MemoryTrace, int]:
    """One counted ``client_update`` (its result, memory trace and FLOPs)."""
    trace = MemoryTrace(leaves=leaves)
    counter = _flop_counter()
    with counter, MetaRun(), torch.autograd.graph.saved_tensors_hooks(trace.pack, trace.unpack):
        result = work.client_update(payload, state, data, torch.Generator().manual_seed(1))
    return result, trace, int(counter.get_total_flops())


def count_sample(algorithm: Algorithm, input_dtype: torch.dtype = torch.float32) -> int:
    """FLOPs of one plain training sample of the algorithm's model: forward, cross-entropy
    and backward, per sample (the unit of ``population.compute_unit: samples_per_s``).

    Counted on a batch of two and halved: a training-mode BatchNorm refuses a batch of one,
    and every counted operation (matmul, convolution) is linear in the batch size, so the
    half is exact."""
    model = algorithm.model_factory.build().to(META)
    factory = algorithm.model_factory
    data = meta_data(2, tuple(factory.input_shape), input_dtype, None, factory.target_shape)
    counter = _flop_counter()
    with counter, MetaRun():
        target_cross_entropy(model(data.x_train), data.y_train).backward()
    return int(counter.get_total_flops()) // 2
