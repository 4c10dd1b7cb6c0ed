"""Idle clients by rank, without scanning the population.

When every client is always available, the clock's candidates (idle, available clients in
client-id order) are all clients except the busy ones. :class:`BusyClients` is the clock's
``busy`` mapping (client -> running task) that also keeps its keys sorted, so the k-th idle
client is found by a binary search over the busy clients: O(log m) per lookup and O(m)
memmove per change for m busy clients, independent of the population size. The seeded draws
are unchanged: the clock draws ranks from ``len(candidates)`` exactly as it drew positions in
the scanned candidate list.

With other availability models the clock's index of idle, available clients
(:mod:`fedclock.scheduling.available_index`) watches the mapping: every client that becomes
busy or idle is reported to the :class:`BusyWatcher`.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Any, Iterable, Protocol

from fedclock.scheduling.rank_sample import open_rank


_MISSING = object()


class BusyWatcher(Protocol):
    """Told about every client that becomes busy or idle."""

    def became_busy(self, client: int) -> None: ...

    def became_idle(self, client: int) -> None: ...


class BusyClients(dict):
    """``dict`` of busy client -> task that also keeps the busy client ids sorted (and tells
    its :attr:`watcher`, if any, about every client that becomes busy or idle)."""

    def __init__(self, watcher: BusyWatcher | None = None) -> None:
        super().__init__()
        self._sorted: list[int] = []
        self.watcher = watcher

    def __setitem__(self, client: int, task: Any) -> None:
        if client not in self:
            insort(self._sorted, client)
            if self.watcher is not None:
                self.watcher.became_busy(client)
        dict.__setitem__(self, client, task)

    def __delitem__(self, client: int) -> None:
        dict.__delitem__(self, client)
        self._forget(client)

    def pop(self, client: int, default: Any = _MISSING) -> Any:
        task = dict.pop(self, client, _MISSING)
        if task is not _MISSING:  # _forget(client), inline (once per task)
            sorted_ids = self._sorted
            del sorted_ids[bisect_left(sorted_ids, client)]
            if self.watcher is not None:
                self.watcher.became_idle(client)
            return task
        if default is _MISSING:
            raise KeyError(client)
        return default

    def _forget(self, client: int) -> None:
        """``client`` (just removed from the mapping) is idle again."""
        sorted_ids = self._sorted
        del sorted_ids[bisect_left(sorted_ids, client)]
        if self.watcher is not None:
            self.watcher.became_idle(client)

    def clear(self) -> None:
        idle, self._sorted = self._sorted, []
        super().clear()
        if self.watcher is not None:
            for client in idle:
                self.watcher.became_idle(client)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``dict.update`` through ``__setitem__``, so the sorted keys stay in step."""
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def popitem(self) -> tuple[int, Any]:
        client, task = super().popitem()
        self._forget(client)
        return client, task

    def setdefault(self, client: int, default: Any = None) -> Any:
        if client not in self:
            self[client] = default
        return self[client]

    def busy_ids(self) -> list[int]:
        """The busy client ids, sorted (the mapping's own list: do not change it)."""
        return self._sorted

    def idle_count(self, num_clients: int) -> int:
        """How many of clients 0..num_clients-1 are idle."""
        return num_clients - len(self._sorted)

    def idle_at(self, rank: int) -> int:
        """The idle client of the given rank (0-based) in client-id order: the smallest c with
        ``c - #(busy <= c) == rank`` and c not busy.

        It is ``rank + k`` for the least ``k`` with ``k == #(busy <= rank + k)`` (the count
        never decreases as k grows, and a busy client there would have rank + 1 idle clients
        below it). Climbing ``k <- #(busy <= rank + k)`` from ``k = 0`` reaches it, one
        C-level bisection per step; with few busy clients among many it arrives in two or
        three steps. Clusters of busy clients can make the climb long, so after a few steps a
        binary search finishes: with busy ids b_0 < b_1 < ..., b_j - j idle clients precede
        b_j, so k = the number of j with b_j - j <= rank (and at least the k reached)."""
        b = self._sorted
        k = bisect_right(b, rank)
        for _ in range(6):
            after = bisect_right(b, rank + k, k)
            if after == k:
                return rank + k
            k = after
        return open_rank(b, rank, k)

    def idle_at_many(self, ranks: Iterable[int]) -> list[int]:
        """:meth:`idle_at` for each rank."""
        return [self.idle_at(int(r)) for r in ranks]
