"""Idle, available clients of a :class:`~fedclock.scheduling.availability.DiurnalClients`
population, kept in flat arrays: no Python object and no heap entry per client.

The same answers as :class:`~fedclock.scheduling.available_index.IdleAvailable` over the same
clients' :class:`~fedclock.scheduling.availability.Diurnal` models (candidates in client-id
order, counted and ranked by a Fenwick tree), found differently:

* every client changes state at two points of the shared cycle, its phase (on) and its phase
  plus the on-time (off), both modulo the period. The on points are sorted once
  (:attr:`DiurnalIndex._order`); the off points are the same order rotated (adding the on-time
  and wrapping keeps their cyclic order), so one sorted array serves both;
* bringing the index from ``t0`` to ``t1`` asks the clients whose on or off point lies in
  ``(t0, t1]`` (two binary searches, widened by a small margin against rounding, a slice or
  two of the sorted order) for their state at ``t1``, vectorized by
  :meth:`~fedclock.scheduling.availability.DiurnalClients.state` (the per-client model's
  floating-point operations): O(changes), never a pass over the population, except when more
  than a whole period passed (then every client is asked);
* the next change of all clients (or of the idle ones) is the exact next change of the first
  few clients in sorted order from the current point of the cycle (skipping busy ones).
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from fedclock.scheduling.availability import DiurnalClients
from fedclock.scheduling.fenwick import Fenwick

WINDOW = 64
"""Clients read past the current point of the cycle to find the next change (at least the
busy ones plus this many), enough for every client whose point lies within the rounding
margin of another's."""


class DiurnalIndex:
    """The clock's candidates for a :class:`DiurnalClients` population (module docstring).
    Answers :class:`~fedclock.scheduling.candidates.IdleClients` and watches the busy clients
    (:class:`~fedclock.scheduling.idle.BusyWatcher`)."""

    def __init__(self, clients: DiurnalClients, now: float) -> None:
        self.clients = clients
        n = self.n = len(clients)
        self.period = clients.period_s
        on, _ = clients.state(np.arange(n), now)
        self._on = on.view(np.uint8).copy()
        """Each client's model says yes at the index's time."""
        self._busy = np.full(n, 0, dtype=np.uint8)  # written now (not mapped on first use)
        self.busy_count = 0
        self._mark = self._on.copy()
        """Each client is a candidate: idle and available."""
        self._tree = Fenwick.from_array(self._mark)
        self._time = now
        cycle = clients.phases
        ids = np.arange(n) if clients.never is None else np.flatnonzero(~clients.never)
        self._order = ids[np.argsort(cycle[ids], kind="stable")]
        """Client ids by on point (phase) in the cycle (clients never available left out)."""
        self._m = m = len(self._order)
        self._on_points = cycle[self._order]
        off = self._on_points + clients.on_s
        wrap = int(np.searchsorted(off, self.period, side="left"))
        self._shift = wrap
        """The off points in sorted order are the on order rotated by this many places."""
        self._off_points = np.concatenate([off[wrap:] - self.period, off[:wrap]]) if m else off
        self._constant = m == 0 or clients.on_s >= clients.period_s
        """The models never change (always on, or nobody)."""

    # ------------------------------------------------------------------ busy clients
    def became_busy(self, c: int) -> None:
        """``c`` took a task."""
        self._busy[c] = 1
        self.busy_count += 1
        if self._mark[c]:
            self._mark[c] = 0
            self._tree.add(c, -1)

    def became_idle(self, c: int) -> None:
        """``c`` can take a task again."""
        self._busy[c] = 0
        self.busy_count -= 1
        if self._on[c] and not self._mark[c]:
            self._mark[c] = 1
            self._tree.add(c, 1)

    # ------------------------------------------------------------------ time
    def _margin(self, t: float) -> float:
        return 1e-9 * (abs(t) + self.period) + 1e-9

    def _between(self, points: np.ndarray, start: float, end: float) -> np.ndarray:
        """Positions of the sorted cycle ``points`` in (start, end] modulo the period, widened
        by the rounding margin (end - start < period)."""
        margin = self._margin(end)
        a = (start - margin) % self.period
        b = (end + margin) % self.period
        lo = int(np.searchsorted(points, a, side="left"))
        hi = int(np.searchsorted(points, b, side="right"))
        if a <= b:
            return np.arange(lo, hi)
        return np.concatenate([np.arange(lo, len(points)), np.arange(0, hi)])

    def advance(self, now: float) -> None:
        """Ask every client whose state may have changed since the index's time at ``now``."""
        if now <= self._time or self._constant:
            self._time = max(self._time, now)
            return
        if now - self._time >= self.period - 2 * self._margin(now):
            changed = self._order
        else:
            on_pos = self._between(self._on_points, self._time, now)
            off_pos = (self._between(self._off_points, self._time, now) + self._shift) % self._m
            changed = self._order[np.concatenate([on_pos, off_pos])]
        self._time = now
        if not len(changed):
            return
        on = self.clients.state(changed, now)[0].view(np.uint8)
        differs = on != self._on[changed]
        flipped, first = np.unique(changed[differs], return_index=True)
        if not len(flipped):
            return
        values = on[differs][first]
        self._on[flipped] = values
        idle = self._busy[flipped] == 0
        mark, add = self._mark, self._tree.add
        for c, value in zip(flipped[idle].tolist(), values[idle].tolist()):
            if mark[c] != value:
                mark[c] = value
                add(c, 1 if value else -1)

    # ------------------------------------------------------------------ queries
    def count(self, now: float, round_index: int) -> int:
        """How many clients are idle and available at ``now``."""
        self.advance(now)
        return self._tree.total

    def at(self, rank: int) -> int:
        """The candidate of the given rank (0-based) in client-id order."""
        return self._tree.select(rank)

    def at_many(self, ranks: Iterable[int]) -> list[int]:
        """:meth:`at` for each rank."""
        select = self._tree.select
        return [select(int(r)) for r in ranks]

    def holds(self, clients: np.ndarray) -> np.ndarray:
        """Per client id: whether it is a candidate (its mark)."""
        return self._mark.view(bool).take(clients)

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        """The rank of each of these candidates (the marks before it, vectorized)."""
        return self._tree.count_before_many(clients)

    def candidates_array(self) -> np.ndarray:
        """Every candidate of the last count, in client-id order (one C pass over a byte a client)."""
        return np.flatnonzero(self._mark.view(bool))  # a bool view: 5x faster than over uint8

    def _next(self, now: float, idle_only: bool) -> float:
        if self._constant:
            return math.inf
        self.advance(now)
        x = (now - self._margin(now)) % self.period
        width = min(self._m, WINDOW + (self.busy_count if idle_only else 0))
        best = math.inf
        for points, shift in ((self._on_points, 0), (self._off_points, self._shift)):
            start = int(np.searchsorted(points, x, side="left"))
            who = self._order[(np.arange(start, start + width) + shift) % self._m]
            if idle_only:
                who = who[self._busy[who] == 0]
            if len(who):
                _, nxt = self.clients.state(who, now)
                best = min(best, float(nxt.min()))
        return best

    def next_change(self, now: float) -> float:
        """The earliest time after ``now`` when some client's availability changes."""
        return self._next(now, idle_only=False)

    def next_idle_change(self, now: float) -> float:
        """The same over the idle clients (a busy one's change is read when it is idle again)."""
        return self._next(now, idle_only=True)
