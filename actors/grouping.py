"""Grouping of client tasks started at one virtual instant into executor calls.

The runtime session defers the real calls of the tasks the clock starts at one virtual
instant (a sync round's cohort, async slots refilled together) and sends them to the
executors in groups: with ``runtime.vectorize`` K, groups of at most K tasks, each trained
at once by :func:`~fedclock.algorithms.vectorized.client_updates`; otherwise groups spread
over the executors (``runtime.tasks_per_call``), each task of a group run on its own, one
after the other, so that a round costs one call per executor instead of one per task. A
group is never made of tasks started at different instants, and the groups of an instant
are cut when the clock next needs something from the backend (a result, a release, an
evaluation) or starts a task at a later instant. Vectorized groups are therefore a function
of the clock's calls only — not of wall time, Ray, or the number of executors — so a run
gives the same numbers every time; one-by-one groups also follow the number of executors,
which changes no number, as each of their tasks runs on its own.
"""
from __future__ import annotations

import math
from typing import Generic, TypeVar

T = TypeVar("T")


def split_balanced(items: list[T], size: int) -> list[list[T]]:
    """``items`` in order, cut into ``ceil(n / size)`` consecutive groups whose sizes differ
    by at most one (the first groups take the extra items): 10 items with ``size`` 8 give
    groups of 5 and 5, not 8 and 2."""
    if size < 1:
        raise ValueError(f"group size must be >= 1, got {size}")
    if not items:
        return []
    count = math.ceil(len(items) / size)
    base, extra = divmod(len(items), count)
    groups, start = [], 0
    for g in range(count):
        stop = start + base + (1 if g < extra else 0)
        groups.append(items[start:stop])
        start = stop
    return groups


class InstantGroups(Generic[T]):
    """Collects the tasks started at one virtual instant; hands them out in balanced groups
    of at most ``size`` (:func:`split_balanced`), and in at least ``spread`` groups when
    there are that many tasks (one per executor: for groups whose tasks run one by one, where
    the grouping cannot change a number; vectorized groups keep ``spread`` 1 so that they
    do not depend on the number of executors)."""

    def __init__(self, size: int, spread: int = 1) -> None:
        if size < 1 or spread < 1:
            raise ValueError(f"group size and spread must be >= 1, got {size} and {spread}")
        self.size = size
        self.spread = spread
        self._pending: list[T] = []
        self._at: float | None = None

    def add(self, at: float, item: T) -> list[list[T]]:
        """Queue ``item``, started at virtual time ``at``; returns the groups of the earlier
        instant when ``at`` is a later one (to dispatch now), else nothing."""
        ready = self.flush() if self._pending and at != self._at else []
        self._at = at
        self._pending.append(item)
        return ready

    def flush(self) -> list[list[T]]:
        """Every queued item, in groups; the queue is empty afterwards."""
        groups = split_balanced(self._pending, min(self.size, math.ceil(len(self._pending) / self.spread) or 1))
        self._pending = []
        return groups

    def __len__(self) -> int:
        return len(self._pending)
