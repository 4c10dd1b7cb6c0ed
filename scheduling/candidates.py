"""The candidates: idle clients that are available now, in client-id order.

The protocols sample cohorts and pick clients among the candidates; they draw a rank in that
list and map it to a client. :func:`idle_clients` gives the clock one object that answers
every such question, found in one of three ways:

* every client is always available: the candidates are the clients that are not busy, and
  :class:`~fedclock.scheduling.idle.BusyClients` finds them by rank (:class:`EveryIdleClient`);
* availability models the index knows: :class:`~fedclock.scheduling.available_index.IdleAvailable`;
* a :class:`~fedclock.scheduling.availability.DiurnalClients` population (phases as one array):
  :class:`~fedclock.scheduling.diurnal_index.DiurnalIndex`, flat arrays and no object per client;
* any other model: a scan of the population (:class:`ScannedIdleClients`).

The three give the same candidates, so the seeded draws do not depend on the way. Each also
says whether given clients are candidates and their ranks (:meth:`IdleClients.holds`,
:meth:`IdleClients.ranks`) without a pass over the population, for a selector that takes its
candidates unlisted (:class:`~fedclock.scheduling.candidate_set.Candidates`).
"""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Iterable, Protocol, Sequence

import numpy as np

from fedclock.scheduling.availability import Always, Availability, DiurnalClients
from fedclock.scheduling.available_index import build_index
from fedclock.scheduling.diurnal_index import DiurnalIndex
from fedclock.scheduling.idle import BusyClients


class IdleClients(Protocol):
    """Idle, available clients by rank; :meth:`at` and :meth:`at_many` answer about the
    candidates of the last :meth:`count`."""

    def count(self, now: float, round_index: int) -> int:
        """How many clients are idle and available at ``now`` in round ``round_index``."""

    def at(self, rank: int) -> int:
        """The candidate of this rank (0-based, in client-id order)."""

    def at_many(self, ranks: Iterable[int]) -> list[int]:
        """:meth:`at` for each rank."""

    def holds(self, clients: np.ndarray) -> np.ndarray:
        """Per client id (each in ``[0, num_clients)``): whether it is a candidate."""

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        """The rank of each of these candidates."""

    def next_change(self, now: float) -> float:
        """The earliest time after ``now`` when some client's availability may change (inf: never)."""

    def next_idle_change(self, now: float) -> float:
        """The same, over the idle clients only."""


class EveryIdleClient:
    """Every client is always available: the candidates are the clients not busy."""

    def __init__(self, busy: BusyClients, num_clients: int) -> None:
        self.busy = busy
        self.num_clients = num_clients
        self.at = busy.idle_at  # the busy mapping's own lookups, called directly (once per dispatch)
        self.at_many = busy.idle_at_many

    def count(self, now: float, round_index: int) -> int:
        return self.num_clients - len(self.busy)

    def _busy_ids(self) -> np.ndarray:
        return np.asarray(self.busy.busy_ids(), dtype=np.int64)

    def holds(self, clients: np.ndarray) -> np.ndarray:
        """Per client id: not busy (a binary search among the busy clients)."""
        busy = self._busy_ids()
        if not busy.shape[0]:
            return np.ones(clients.shape[0], dtype=bool)
        at = np.minimum(np.searchsorted(busy, clients), busy.shape[0] - 1)
        return busy.take(at) != clients

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        """The rank of each idle client: its id less the busy clients below it."""
        return clients - np.searchsorted(self._busy_ids(), clients)

    def candidates_array(self) -> np.ndarray:
        """Every idle client, in id order (a pass over the population)."""
        mask = np.ones(self.num_clients, dtype=bool)
        if self.busy:
            mask[self._busy_ids()] = False
        return np.flatnonzero(mask)

    def next_change(self, now: float) -> float:
        return math.inf

    def next_idle_change(self, now: float) -> float:
        return math.inf


class ScannedIdleClients:
    """Asks every client's availability model (for models the index does not know)."""

    def __init__(self, availability: Sequence[Availability], busy: BusyClients) -> None:
        self.availability = availability
        self.busy = busy
        self._candidates: list[int] = []

    def count(self, now: float, round_index: int) -> int:
        busy = self.busy
        self._candidates = [c for c, model in enumerate(self.availability)
                            if c not in busy and model.available(now, round_index)]
        return len(self._candidates)

    def at(self, rank: int) -> int:
        return self._candidates[rank]

    def at_many(self, ranks: Iterable[int]) -> list[int]:
        return [self._candidates[int(r)] for r in ranks]

    def holds(self, clients: np.ndarray) -> np.ndarray:
        found = self._candidates
        return np.fromiter(((i := bisect_left(found, c)) < len(found) and found[i] == c for c in clients.tolist()),
                           dtype=bool, count=clients.shape[0])

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        found = self._candidates
        return np.fromiter((bisect_left(found, c) for c in clients.tolist()), dtype=np.int64,
                           count=clients.shape[0])

    def next_change(self, now: float) -> float:
        return min((model.next_change(now) for model in self.availability), default=math.inf)

    def next_idle_change(self, now: float) -> float:
        return min((model.next_change(now) for c, model in enumerate(self.availability) if c not in self.busy),
                   default=math.inf)


def idle_clients(availability: Sequence[Availability], busy: BusyClients, now: float) -> IdleClients:
    """The finder for these availability models; the index, when it is used, watches ``busy``."""
    if isinstance(availability, DiurnalClients):
        diurnal = DiurnalIndex(availability, now)
        busy.watcher = diurnal
        return diurnal
    if all(type(model) is Always for model in availability):
        return EveryIdleClient(busy, len(availability))
    index = build_index(availability, now)
    if index is None:
        return ScannedIdleClients(availability, busy)
    busy.watcher = index
    return index
