"""Seeded ranks drawn in batches, in exactly the stream of one-at-a-time draws.

The asynchronous protocol picks every freed slot's client as a uniform rank below the number
of idle clients: ``int(rng.integers(idle))``, one numpy call (~2 µs) per task. In the steady
state that bound is the same for every pick (one client returns, one is dispatched), and for
a numpy ``Generator`` ``k`` scalar draws ``rng.integers(n)`` give the same values, and leave
the generator in the same state, as one draw ``rng.integers(n, size=k)``.

:class:`RankDraws` uses that: while the bound stays the same it hands out ranks from a batch
drawn ahead; before anything else uses the generator (a draw below another bound, or any
other draw through :meth:`RankDraws.generator`) it *rewinds*: it restores the generator's
state saved before the batch and draws again exactly the ranks handed out. So the ranks and
the generator's state, whenever someone else sees it, are those of scalar draws.

Batches grow while the bound stays the same (1, 2, 4, ... up to ``max_batch``), so a bound
that changes at every draw costs one scalar draw per rank, as before.
"""
from __future__ import annotations

import numpy as np


class RankDraws:
    """Uniform ranks ``0 <= r < bound`` from ``rng``, the same as ``int(rng.integers(bound))``
    one at a time, drawn ahead in batches while the bound does not change.

    Every other use of the generator must go through :meth:`generator`, which first puts
    it in the state the scalar draws would have left it in."""

    def __init__(self, rng: np.random.Generator, max_batch: int = 4096) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch: must be at least 1, got {max_batch}")
        self._rng = rng
        self._max_batch = max_batch
        self._bound = -1
        """The bound of the current run of draws."""
        self._run = 0
        """Ranks handed out below :attr:`_bound` in a row (sets the next batch's size)."""
        self._batch: list[int] = []
        self._next = 0
        """Position of the next rank to hand out in :attr:`_batch`."""
        self._saved: dict | None = None
        """The bit generator's state before :attr:`_batch` was drawn."""

    def below(self, bound: int) -> int:
        """A uniform rank in ``[0, bound)``: what ``int(rng.integers(bound))`` would give now."""
        i = self._next
        if bound == self._bound and i < len(self._batch):
            self._next = i + 1
            return self._batch[i]
        return self._draw(bound)

    def generator(self) -> np.random.Generator:
        """The generator, in the state the ranks handed out so far, drawn one at a time, would
        have left it in (ranks drawn ahead are given back). Use it for every other draw."""
        self._rewind()
        self._bound = -1
        self._run = 0
        return self._rng

    def _draw(self, bound: int) -> int:
        """The current batch is used up or was drawn below another bound: rewind, then draw
        the next batch (a single rank when the bound has just changed)."""
        if bound != self._bound:
            self._rewind()
            self._bound = bound
            self._run = 0
        size = min(self._max_batch, max(1, self._run))
        self._run += size
        if size == 1:  # nothing drawn ahead: nothing to save or rewind
            self._batch, self._next = [], 0
            return int(self._rng.integers(bound))
        self._saved = self._rng.bit_generator.state
        self._batch = self._rng.integers(bound, size=size).tolist()
        self._next = 1
        return self._batch[0]

    def _rewind(self) -> None:
        """Give back the ranks drawn ahead and not handed out (if any)."""
        used, batch = self._next, self._batch
        if used < len(batch):
            self._rng.bit_generator.state = self._saved  # type: ignore[assignment]
            if used:
                self._rng.integers(self._bound, size=used)
        self._batch, self._next, self._saved = [], 0, None
