"""Idle, available clients by rank, without scanning the population.

The clock samples cohorts and picks clients among the *candidates*: idle clients whose
availability model says yes now, in client-id order; it draws a rank in that list and maps
it to a client. :class:`IdleAvailable` keeps the candidates in Fenwick (binary indexed)
trees over client ids, so counting them and finding the one of a given rank cost
O(log n), and the seeded draws are the ones the scan made.

What keeps the trees current:

* time-driven models (:class:`~fedclock.scheduling.availability.Markov`,
  :class:`~fedclock.scheduling.availability.Diurnal`,
  :class:`~fedclock.scheduling.availability.TraceReplay`) are constant on
  ``[t, next_change(t))``; a heap holds every client's next change time and is processed
  lazily when a query comes at a later time (pop every client whose change is due, ask its
  model again at the query time, push its next change): O(log n) per availability change;
* round-driven models (:class:`~fedclock.scheduling.availability.Periodic`): the clients of
  one (period, offset) class are all available or all missing in a round, so each class has
  its own tree and a query sums the trees of the classes the round index selects
  (O(log n) per selected class); :class:`~fedclock.scheduling.availability.Always` clients
  share the tree of the time-driven ones;
* timeline gates (:class:`~fedclock.scheduling.timeline.ScriptedAvailability`): the timeline
  reports the clients an offline/online/join event switched (:meth:`Timeline.watch_gates`);
* busy clients: the clock's :class:`~fedclock.scheduling.idle.BusyClients` reports each
  client that becomes busy or idle.

The earliest availability change of all clients (the heap's top) and of the idle ones (a
best-first walk from the top that skips busy clients) answers the clock's waits. Populations with a
model of another type are not indexed (:func:`build_index` returns None) and the clock scans them as before.
"""
from __future__ import annotations

import heapq
import math
from typing import Any, Iterable, Sequence

import numpy as np

from fedclock.scheduling.availability import Always, Availability, Diurnal, Markov, Periodic, TraceReplay
from fedclock.scheduling.fenwick import Fenwick, select_in_union
from fedclock.scheduling.timeline import ScriptedAvailability, Timeline

TIME_DRIVEN = (Markov, Diurnal, TraceReplay)
"""Models whose answer depends on the time only (never on the round index)."""


class IdleAvailable:
    """The clock's candidates (idle and available clients) as marks in Fenwick trees, one
    tree for clients whose availability ignores the round index and one per Periodic
    (period, offset) class. Build with :func:`build_index`.

    Queries run at the clock's current time, which never goes back: :meth:`count` brings
    the index to ``now`` and chooses the trees of ``round_index``; :meth:`at` and
    :meth:`at_many` then map ranks to clients among those candidates."""

    def __init__(self, models: list[Any | None], classes: list[int], periods: list[tuple[int, int]],
                 timeline: Timeline | None, now: float) -> None:
        n = len(models)
        self.n = n
        self._models = models
        """Each client's time-driven model (with ``state(now) -> (available, next change)``),
        or None (always available as far as time goes)."""
        self._class = classes
        """Each client's tree: 0, or 1 + its Periodic class."""
        self._periods = periods
        """(period + 1, offset mod (period + 1)) of each Periodic class: in the class's tree
        the clients are available in rounds r with (r + offset) % (period + 1) == 0."""
        self._timeline = timeline
        self._offline = timeline.offline if timeline is not None else None
        self._timed_on = bytearray(n)
        """Each client's model says yes (the round index and timeline gates aside)."""
        self._busy = bytearray(n)
        self.busy_count = 0
        self._changes: list[tuple[float, int]] = []
        """Heap of (next change, client), one entry per client whose model changes by itself."""
        for c, model in enumerate(models):
            if model is None:
                self._timed_on[c] = 1
                continue
            on, nxt = model.state(now)
            self._timed_on[c] = 1 if on else 0
            if nxt != math.inf:
                self._changes.append((nxt, c))
        heapq.heapify(self._changes)
        self._mark = bytearray(self._timed_on)
        """Each client is a candidate: idle, its model says yes and no timeline gate holds it."""
        if self._offline is not None:
            for c in range(n):
                if self._offline[c]:
                    self._mark[c] = 0
        self._trees = [Fenwick([m if self._class[c] == g else 0 for c, m in enumerate(self._mark)])
                       for g in range(1 + len(periods))]
        self._active: list[Fenwick] = [self._trees[0]]
        self._active_groups: set[int] = {0}
        """The trees of the last count's round (their indices in :attr:`_trees`)."""
        if timeline is not None:
            timeline.watch_gates(self.gates_changed)

    # ------------------------------------------------------------------ updates
    def _refresh(self, c: int) -> None:
        on = 1 if self._timed_on[c] and not self._busy[c] and not (self._offline is not None and self._offline[c]) \
            else 0
        if on != self._mark[c]:
            self._mark[c] = on
            self._trees[self._class[c]].add(c, 1 if on else -1)

    def became_busy(self, c: int) -> None:
        """``c`` took a task."""
        self._busy[c] = 1
        self.busy_count += 1
        if self._mark[c]:
            self._mark[c] = 0
            self._trees[self._class[c]].add(c, -1)

    def became_idle(self, c: int) -> None:
        """``c`` can take a task again."""
        self._busy[c] = 0
        self.busy_count -= 1
        self._refresh(c)

    def gates_changed(self, clients: Iterable[int]) -> None:
        """The timeline switched these clients offline or online."""
        for c in clients:
            self._refresh(int(c))

    def advance(self, now: float) -> None:
        """Apply every availability change due at or before ``now``: each due client's model
        is asked at ``now`` (the order among them does not matter) and its next change pushed."""
        changes = self._changes
        if not changes or changes[0][0] > now:
            return
        models, timed_on, busy, mark, offline = self._models, self._timed_on, self._busy, self._mark, self._offline
        replace, pop, inf = heapq.heapreplace, heapq.heappop, math.inf
        while changes and changes[0][0] <= now:
            c = changes[0][1]
            on, nxt = models[c].state(now)  # type: ignore[union-attr]
            if nxt != inf:
                replace(changes, (nxt, c))
            else:
                pop(changes)
            on = 1 if on else 0
            if timed_on[c] != on:
                timed_on[c] = on
                if not busy[c] and not (offline is not None and offline[c]):
                    mark[c] = on
                    self._trees[self._class[c]].add(c, 1 if on else -1)

    # ------------------------------------------------------------------ queries
    def count(self, now: float, round_index: int) -> int:
        """How many clients are idle and available at ``now`` in round ``round_index``;
        :meth:`at` and :meth:`at_many` then rank among them."""
        self.advance(now)
        if not self._periods:
            return self._trees[0].total
        active, groups = [self._trees[0]], {0}
        for g, (modulus, residue) in enumerate(self._periods, start=1):
            if (round_index + residue) % modulus == 0:
                active.append(self._trees[g])
                groups.add(g)
        self._active, self._active_groups = active, groups
        return sum(t.total for t in active)

    def at(self, rank: int) -> int:
        """The candidate of the given rank (0-based) in client-id order."""
        return select_in_union(self._active, rank) if self._periods else self._trees[0].select(rank)

    def at_many(self, ranks: Iterable[int]) -> list[int]:
        """:meth:`at` for each rank."""
        return [self.at(int(r)) for r in ranks]

    def holds(self, clients: np.ndarray) -> np.ndarray:
        """Per client id: whether it is a candidate of the last count (its mark, and with
        Periodic classes its tree among those of the round)."""
        marked = np.frombuffer(self._mark, dtype=np.bool_).take(clients)
        if not self._periods:
            return marked
        groups, classes = self._active_groups, self._class
        return marked & np.fromiter((classes[c] in groups for c in clients.tolist()), dtype=bool,
                                    count=clients.shape[0])

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        """The rank of each of these candidates among those of the last count (the marks
        before it in the round's trees)."""
        out = np.zeros(len(clients), dtype=np.int64)
        for tree in (self._active if self._periods else self._trees[:1]):
            out += tree.count_before_many(clients)
        return out

    def candidates_array(self) -> np.ndarray | None:
        """Every candidate of the last count in client-id order, from the marks in one C pass
        (None with Periodic classes, whose candidates depend on the round)."""
        return None if self._periods else np.flatnonzero(np.frombuffer(self._mark, dtype=np.bool_))

    def next_change(self, now: float) -> float:
        """The earliest ``next_change(now)`` of all clients' models (timeline gates included)."""
        self.advance(now)
        wake = self._changes[0][0] if self._changes else math.inf
        if self._timeline is not None and self.n:
            wake = min(wake, self._timeline.next_availability_change(now))
        return wake

    def next_idle_change(self, now: float) -> float:
        """The earliest ``next_change(now)`` of the idle clients' models (timeline gates
        included): a best-first walk down the change heap that skips busy clients, so it
        costs O((b + 1) log(b + 1)) for the b busy clients whose change comes first (at most
        the number of busy clients)."""
        self.advance(now)
        heap, busy = self._changes, self._busy
        wake = math.inf
        if heap:
            frontier = [(heap[0], 0)]
            while frontier:
                (t, c), i = heapq.heappop(frontier)
                if not busy[c]:
                    wake = t
                    break
                for child in (2 * i + 1, 2 * i + 2):
                    if child < len(heap):
                        heapq.heappush(frontier, (heap[child], child))
        if self._timeline is not None and self.busy_count < self.n:
            wake = min(wake, self._timeline.next_availability_change(now))
        return wake


def build_index(availability: Sequence[Availability], now: float) -> IdleAvailable | None:
    """The index of these clients' availability at ``now``, or None when a client's model is
    not one the index knows (the clock then scans)."""
    models: list[Availability | None] = []
    classes: list[int] = []
    period_class: dict[tuple[int, int], int] = {}
    timeline: Timeline | None = None
    gated = 0
    for a in availability:
        if type(a) is ScriptedAvailability:
            if timeline is not None and a.timeline is not timeline:
                return None
            timeline = a.timeline
            gated += 1
            a = a.inner
        kind = type(a)
        if kind is Always:
            models.append(None)
            classes.append(0)
        elif type(a) is Periodic:
            modulus = a.period + 1
            key = (modulus, a.offset % modulus)
            models.append(None)
            classes.append(1 + period_class.setdefault(key, len(period_class)))
        elif kind in TIME_DRIVEN:
            models.append(a)
            classes.append(0)
        else:
            return None
    if timeline is not None and (gated != len(availability) or len(availability) != len(timeline.offline)):
        return None  # the timeline gates every client or none
    return IdleAvailable(models, classes, list(period_class), timeline, now)

