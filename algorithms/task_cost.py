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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import torch

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.flop_count import TaskCount, count_sample, count_task


LARGE_BATCHES = 8
"""A client with at least this many batches of samples is a large one (module docstring)."""
SMALL_BATCH = 12
"""Below this batch size every small client size is probed on its own."""


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
            self._sample = count_sample(self.algorithm, self.input_dtype)
        return self._sample

    def _count(self, num_samples: int, steps: int | None = None) -> TaskCount:
        key = (num_samples, steps)
        if key not in self._by_size:
            self._by_size[key] = count_task(self.algorithm, num_samples, steps, self.input_dtype,
                                            steady=not self.algorithm.partial_work)
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
