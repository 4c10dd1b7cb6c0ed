"""The candidates handed to a selector without listing them: :class:`Candidates`.

A selector picks among the candidates (idle, available clients in client-id order). Listing
them is a pass over the population (~150 ms at 10^7 clients, ``benchmarks/RESULTS.md``, "Ten
million clients"); a selector that needs only a few of them asks this object instead
(:attr:`~fedclock.scheduling.selection.Selector.lazy_candidates`), which answers from the
clock's idle finder (:mod:`fedclock.scheduling.candidates`):

* how many there are (``len``);
* the candidate of a rank, or of many ranks (0-based, client-id order);
* whether given client ids are candidates, and the rank of given candidates;
* :meth:`Candidates.array`: all of them as a sorted array, when a selector needs that.

The answers hold for the decision being made (the finder's last count); a selector must
not keep the object for a later call. :meth:`Candidates.of_array` gives the same answers
over a sorted id array (selectors called directly, tests), so a selector's choice does not
depend on which of the two it got.
"""
from __future__ import annotations

from typing import Iterable, Protocol

import numpy as np


class Finder(Protocol):
    """What :class:`Candidates` asks of an idle finder (about the candidates of its last count)."""

    def at_many(self, ranks: Iterable[int]) -> list[int]:
        """The candidates of these ranks."""

    def holds(self, clients: np.ndarray) -> np.ndarray:
        """Per client id (each in ``[0, num_clients)``): whether it is a candidate."""

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        """The rank of each of these candidates."""


class SortedIds:
    """A :class:`Finder` over a sorted array of distinct client ids."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)

    def at_many(self, ranks: Iterable[int]) -> list[int]:
        return self.ids.take(np.fromiter(ranks, dtype=np.int64)).tolist()

    def holds(self, clients: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.ids, clients)
        return self.ids.take(np.minimum(at, self.ids.shape[0] - 1)) == clients if self.ids.shape[0] else \
            np.zeros(clients.shape[0], dtype=bool)

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ids, clients).astype(np.int64)

    def candidates_array(self) -> np.ndarray:
        return self.ids


class Candidates:
    """The candidates of one decision, asked rather than listed (module docstring)."""

    def __init__(self, finder: Finder, count: int, num_clients: int) -> None:
        self.finder = finder
        self.count = count
        """How many candidates there are."""
        self.num_clients = num_clients

    @classmethod
    def of_array(cls, ids: np.ndarray, num_clients: int | None = None) -> "Candidates":
        """The candidates ``ids`` (sorted, distinct), e.g. what a selector was called with."""
        ids = np.asarray(ids, dtype=np.int64)
        n = num_clients if num_clients is not None else (int(ids[-1]) + 1 if ids.shape[0] else 0)
        return cls(SortedIds(ids), ids.shape[0], n)

    def __len__(self) -> int:
        return self.count

    def at_many(self, ranks: Iterable[int]) -> np.ndarray:
        """The candidates of these ranks (each in ``[0, count)``), as an id array."""
        return np.asarray(self.finder.at_many(ranks), dtype=np.int64)

    def holds(self, clients: np.ndarray) -> np.ndarray:
        """Per id in ``clients``: whether it is a candidate (any integer: ids outside the
        population are not)."""
        clients = np.asarray(clients, dtype=np.int64)
        if not clients.shape[0]:
            return np.zeros(0, dtype=bool)
        if clients.min() >= 0 and clients.max() < self.num_clients:  # (two reductions, no copies)
            return np.asarray(self.finder.holds(clients), dtype=bool)
        out = np.zeros(clients.shape[0], dtype=bool)
        inside = np.flatnonzero((clients >= 0) & (clients < self.num_clients))
        if inside.shape[0]:
            out[inside] = self.finder.holds(clients.take(inside))
        return out

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        """The rank of each of these candidates (they must be candidates)."""
        clients = np.asarray(clients, dtype=np.int64)
        if not clients.shape[0]:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.finder.ranks(clients), dtype=np.int64)

    def array(self) -> np.ndarray:
        """Every candidate, in increasing id order (a pass over the population)."""
        whole = getattr(self.finder, "candidates_array", None)
        if whole is not None:
            found = whole()
            if found is not None:
                return np.asarray(found, dtype=np.int64)
        return self.at_many(range(self.count))
