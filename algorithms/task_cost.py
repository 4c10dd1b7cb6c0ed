"""What a task of an algorithm costs on a client of a given size: FLOPs and peak memory,
counted from the algorithm's real local work (:mod:`fedclock.algorithms.flop_count`), once
per (model, algorithm and its parameters, batch size) and cached.

**Partial work** (``Algorithm.partial_work``: the task is ``s`` equal local steps). Every
counted operation (matrix product, convolution) costs FLOPs linear in the number of
samples it processes, so a task of ``s`` steps on ``n`` samples costs

    flops(n, s) = a + b * n + s * step(n)

(``a``: fixed work; ``b * n``: passes over the whole train split, such as FedCR's feature
statistics; ``step(n)``: one local step, which depends on ``n`` only while the client has
fewer samples than a step uses). Three counted probes at a large size ``L = 8 B`` fix ``a``,
``b`` and the step of a large client: ``(n, s) = (L, 1), (L, 2), (2L, 1)``; a client with
at least ``L`` samples is priced from them exactly. A step of a smaller client touches
``min(k B, n)`` samples for some ``k`` (one batch for SGD, three for Per-FedAvg's
Hessian-free step, which is why ``L`` is several batches), so its cost is
``min(step(L), c + d * n)``, and two more probes of sizes ``B/2`` and ``B`` fix ``c`` and
``d``. (With a batch under 12 samples, every small size is probed on its own instead: a
probe of under 6 samples may split into fewer parts than a step draws; a client that small
is priced on the same line, which code that treats tiny batches apart may not follow:
Per-FedAvg's Hessian-free step splits a batch into three parts of unequal cost, so a small
client whose size is not a multiple of three is priced within a part's share.)
Every probe counts a client's first task: partial-work algorithms compute the same thing
whatever client state they start from. Numbers are exact fractions,
so FedAvg's task is exactly ``s * B`` plain samples
(``tests/algorithms/test_task_cost.py`` checks the prices against direct counts).

**Phased work** (``partial_work`` False: FedRep's head then body epochs, Ditto's global then
personal steps, FedReCo, FedPAC, FedStyle): the phases' step counts depend on the client's
size through each phase's own epochs, which no four probes describe, so the full task is
counted on each client size (cached per size).

Memory: the peak bytes a task needs on its device are the parameters of every module the
algorithm holds, a gradient for each trainable one, a momentum buffer per trainable one
when ``momentum > 0``, the tensors that came in and go out (payload, client state, upload)
and the peak of live saved activations of the largest probe; a model of the same kind as
the FLOPs (counted, not declared).

**Counts kept on disk** (:class:`CountCache`). A count costs a process its first operator's
import of PyTorch's compiler (``torch._dynamo``, 1.7-2.5 s on the 2-core machine:
:mod:`fedclock.algorithms.flop_count`), whatever the model. Every count is a pure function of
what its key holds, so it is kept in ``$FEDCLOCK_CACHE_DIR/counts`` (default
``~/.cache/fedclock/counts``), one JSON file per count, and a later process reads it without
counting. The key: the hash of every source file of ``fedclock.algorithms`` (any change to an
algorithm, a model, the training loop or the counter makes new keys), PyTorch's version, the
algorithm's class and parameters, population size, codecs, privacy layer and server optimizer,
the model factory (name, input shape, classes, hidden widths, target shape), the input dtype,
the probe (samples, steps, steady) and the kind of count. Nothing is cached for an algorithm
class defined outside ``fedclock.algorithms`` or a user's model builder (their code is not in
the hash): they are counted in every process. ``FEDCLOCK_CACHE_DIR=off`` turns the cache off.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import torch

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.flop_count import TaskCount, count_sample, count_task


LARGE_BATCHES = 8
"""A client with at least this many batches of samples is a large one (module docstring)."""
SMALL_BATCH = 12
"""Below this batch size every small client size is probed on its own."""


CACHE_ENV = "FEDCLOCK_CACHE_DIR"
"""Environment variable naming the cache folder (``off``: no cache)."""
_PACKAGE = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def _source_hash() -> str:
    """SHA-256 of every ``.py`` file of ``fedclock.algorithms`` (names and contents), once a process."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_folder() -> Path | None:
    """The folder counts are kept in, or None when ``$FEDCLOCK_CACHE_DIR`` is ``off``."""
    value = os.environ.get(CACHE_ENV)
    if value == "off":
        return None
    return (Path(value).expanduser() if value else Path.home() / ".cache" / "fedclock") / "counts"


def count_key(algorithm: Algorithm, input_dtype: torch.dtype, probe: tuple[object, ...]) -> str | None:
    """The cache key of one count of ``algorithm`` (see the module's docstring), or None when
    the algorithm's class or the model is a user's (never cached)."""
    factory = algorithm.model_factory
    if factory.builder is not None or not type(algorithm).__module__.startswith("fedclock.algorithms."):
        return None
    parts = (_source_hash(), torch.__version__, type(algorithm).__module__, type(algorithm).__qualname__,
             algorithm.params.model_dump_json(), algorithm.num_clients,
             repr(getattr(algorithm, "upload_codec", None)), repr(getattr(algorithm, "download_codec", None)),
             repr(getattr(algorithm, "privacy", None)), repr(algorithm.server_optimizer), factory.name,
             tuple(factory.input_shape), factory.num_classes, tuple(factory.hidden), tuple(factory.target_shape),
             str(input_dtype), probe)
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _read(key: str | None) -> dict[str, int] | None:
    folder = cache_folder()
    if key is None or folder is None:
        return None
    try:
        value = json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None  # absent or unreadable: counted again
    return value if isinstance(value, dict) else None


def _write(key: str | None, value: dict[str, int]) -> None:
    folder = cache_folder()
    if key is None or folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f"{key}.{os.getpid()}.part"
        part.write_text(json.dumps(value))
        os.replace(part, folder / f"{key}.json")  # whole or absent, whatever runs beside it
    except OSError:
        pass  # a read-only home: counted again next time


def cached_task_count(algorithm: Algorithm, num_samples: int, steps: int | None, input_dtype: torch.dtype,
                      steady: bool) -> TaskCount:
    """:func:`~fedclock.algorithms.flop_count.count_task`, read from the cache when it holds it."""
    key = count_key(algorithm, input_dtype, ("task", num_samples, steps, steady))
    hit = _read(key)
    if hit is not None:
        try:
            return TaskCount(**hit)
        except TypeError:
            pass
    count = count_task(algorithm, num_samples, steps, input_dtype, steady=steady)
    _write(key, dataclasses.asdict(count))
    return count


def cached_sample_count(algorithm: Algorithm, input_dtype: torch.dtype) -> int:
    """:func:`~fedclock.algorithms.flop_count.count_sample`, read from the cache when it holds it."""
    key = count_key(algorithm, input_dtype, ("sample",))
    hit = _read(key)
    if hit is not None and isinstance(hit.get("flops"), int):
        return int(hit["flops"])
    flops = count_sample(algorithm, input_dtype)
    _write(key, {"flops": flops})
    return flops


@dataclass
class TaskCost:
    """Counted FLOPs and peak memory of an algorithm's tasks (see the module's docstring)."""

    algorithm: Algorithm
    input_dtype: torch.dtype = torch.float32
    _by_size: dict[tuple[int, int | None], TaskCount] = field(default_factory=dict)
    _affine: tuple[Fraction, Fraction, Fraction] | None = None
    _memory: int | None = None
    _sample: int | None = None

    # ------------------------------------------------------------------ FLOPs
    def flops(self, num_samples: int, steps: int | None = None) -> Fraction:
        """FLOPs of one task on a client of ``num_samples`` training samples running
        ``steps`` local steps (None: the full task)."""
        alg = self.algorithm
        if not alg.partial_work:
            if steps is not None and steps != alg.local_steps(num_samples):
                raise ValueError(f"{alg.name}: phased local work cannot run {steps} steps")
            return Fraction(self._count(num_samples).flops)
        a, b, large = self._coefficients()
        s = alg.local_steps(num_samples) if steps is None else steps
        batch = alg.params.batch_size
        if num_samples >= LARGE_BATCHES * batch:
            step = large
        elif batch < SMALL_BATCH:
            step = Fraction(self._count(num_samples, 1).flops) - a - b * num_samples
        else:
            small, wider = batch // 2, batch
            at_small = Fraction(self._count(small, 1).flops) - a - b * small
            d = (Fraction(self._count(wider, 1).flops) - a - b * wider - at_small) / (wider - small)
            step = min(large, at_small + d * (num_samples - small))
        return a + b * num_samples + s * step

    def sample_flops(self) -> int:
        """FLOPs of one plain training sample of the model (forward + backward)."""
        if self._sample is None:
            self._sample = cached_sample_count(self.algorithm, self.input_dtype)
        return self._sample

    def _count(self, num_samples: int, steps: int | None = None) -> TaskCount:
        key = (num_samples, steps)
        if key not in self._by_size:
            self._by_size[key] = cached_task_count(self.algorithm, num_samples, steps, self.input_dtype,
                                                   not self.algorithm.partial_work)
        return self._by_size[key]

    def _coefficients(self) -> tuple[Fraction, Fraction, Fraction]:
        """``(a, b, step of a large client)`` from the three probes at ``L``."""
        if self._affine is None:
            large = LARGE_BATCHES * self.algorithm.params.batch_size
            one = Fraction(self._count(large, 1).flops)
            two = Fraction(self._count(large, 2).flops)
            wide = Fraction(self._count(2 * large, 1).flops)
            step = two - one
            b = (wide - one) / large
            self._affine = (one - b * large - step, b, step)
        return self._affine

    # ------------------------------------------------------------------ memory
    def memory_bytes(self, num_samples: int) -> int:
        """Peak training memory of one task (bytes): parameters, gradients, momentum
        buffers, messages and the peak of live saved activations. The activations of a
        step depend on the client's size only while it is small: partial-work algorithms are
        traced on the one-step probe of a large client (an upper bound for small ones),
        phased ones on the client's own size."""
        alg = self.algorithm
        if alg.partial_work:
            count = self._count(LARGE_BATCHES * alg.params.batch_size, 1)
        else:
            count = self._count(num_samples)
        momentum = count.trainable_bytes if getattr(alg.params, "momentum", 0.0) > 0 else 0
        return (count.parameter_bytes + count.trainable_bytes + momentum + count.message_bytes
                + count.activation_bytes)
