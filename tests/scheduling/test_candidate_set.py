"""The candidates asked rather than listed (:mod:`fedclock.scheduling.candidate_set`): every idle
finder's count, ranks, membership and listing agree with the listed candidates; the rank
draw (:mod:`fedclock.scheduling.rank_sample`) by hand; the history's records; the growing array."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedclock.scheduling.availability import Always, Diurnal, DiurnalClients, Markov, Periodic
from fedclock.scheduling.candidate_set import Candidates
from fedclock.scheduling.candidates import idle_clients
from fedclock.scheduling.growing import Growing
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.rank_sample import distinct_ranks, open_rank
from fedclock.scheduling.selection import ClientHistory, SelectorError, checked_choice
from tests.scheduling.busy_churn import churn


class FixedDraws:
    """A generator stand-in whose ``integers`` returns given values (and records the bounds asked)."""

    def __init__(self, *draws: list[int]) -> None:
        self.draws = list(draws)
        self.asked: list[list[int]] = []

    def integers(self, low: int, high: Any) -> np.ndarray:
        assert low == 0
        self.asked.append(np.asarray(high).tolist())
        return np.array(self.draws.pop(0), dtype=np.int64)


# --------------------------------------------------------------------------- the rank draw
def test_open_rank_by_hand() -> None:
    assert open_rank([], 4) == 4
    assert open_rank([1, 2], 0) == 0  # open: 0, 3, 4, ...
    assert open_rank([1, 2], 1) == 3
    assert open_rank([0, 1, 2], 0) == 3
    assert open_rank([1, 3, 4], 2) == 5  # open: 0, 2, 5, 6, ...


def test_distinct_ranks_by_hand() -> None:
    """Ten ranks, 1, 3 and 4 left out: 7 open, 0 2 5 6 7 8 9. Draws 6, 0, 3 (below 7, 6, 5):
    the 6th open is 9; then of 0 2 5 6 7 8 the 0th is 0; then of 2 5 6 7 8 the 3rd is 7."""
    draws = FixedDraws([6, 0, 3])
    assert distinct_ranks(draws, 10, np.array([4, 1, 3]), 3).tolist() == [9, 0, 7]  # type: ignore[arg-type]
    assert draws.asked == [[7, 6, 5]]
    assert distinct_ranks(FixedDraws(), 10, np.array([1]), 0).tolist() == []  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        distinct_ranks(np.random.default_rng(0), 4, np.array([0, 1]), 3)


def test_distinct_ranks_with_a_generator_is_its_definition() -> None:
    """With a seeded generator: the draws are ``rng.integers(0, A - arange(n))`` (one call) and
    each maps to the open rank of that index among those not drawn before (listed here)."""
    for seed in range(50):
        g = np.random.default_rng(seed)
        count = int(g.integers(1, 40))
        excluded = g.choice(count, size=int(g.integers(0, count)), replace=False)
        n = int(g.integers(0, count - excluded.shape[0] + 1))
        got = distinct_ranks(np.random.default_rng(100 + seed), count, excluded, n).tolist()
        draws = np.random.default_rng(100 + seed).integers(0, count - excluded.shape[0] - np.arange(n)).tolist()
        open_ = [r for r in range(count) if r not in set(excluded.tolist())]
        want = [open_.pop(j) for j in draws]
        assert got == want


# --------------------------------------------------------------------------- every finder
def _finders(n: int, seed: int) -> list[tuple[str, Any, BusyClients]]:
    rng = np.random.default_rng(seed)
    out = []
    for name in ("always", "index", "periodic", "diurnal_arrays", "scanned"):
        busy = BusyClients()
        if name == "always":
            models: Any = [Always()] * n
        elif name == "index":
            models = [Markov(5.0, 5.0, "up", np.random.default_rng(seed + c)) if c % 2 else
                      Diurnal(10.0, 0.5, float(c)) for c in range(n)]
        elif name == "periodic":
            models = [Periodic(2, c % 3) if c % 4 else Always() for c in range(n)]
        elif name == "diurnal_arrays":
            models = DiurnalClients(10.0, 0.4, rng.uniform(0, 10.0, n))
        else:
            models = [_Odd(Always()) for _ in range(n)]  # a model the index does not know: scanned
        out.append((name, idle_clients(models, busy, 0.0), busy))
    return out


class _Odd:
    def __init__(self, inner: Always) -> None:
        self.inner = inner

    def available(self, now: float, round_index: int) -> bool:
        return True

    def next_change(self, now: float) -> float:
        return float("inf")


@pytest.mark.parametrize("seed", [0, 1])
def test_every_finder_answers_as_its_listed_candidates(seed: int) -> None:
    n = 60
    rng = np.random.default_rng(seed)
    kinds = {name: type(finder).__name__ for name, finder, _ in _finders(n, seed)}
    assert kinds == {"always": "EveryIdleClient", "index": "IdleAvailable", "periodic": "IdleAvailable",
                     "diurnal_arrays": "DiurnalIndex", "scanned": "ScannedIdleClients"}
    for name, finder, busy in _finders(n, seed):
        for step in range(6):
            churn(busy, rng, n, 5)
            count = finder.count(step * 1.7, step)
            listed = np.asarray(finder.at_many(range(count)), dtype=np.int64)
            lazy = Candidates(finder, count, n)
            assert lazy.array().tolist() == listed.tolist(), name
            everyone = np.arange(-2, n + 2)
            assert lazy.holds(everyone).tolist() == np.isin(everyone, listed).tolist(), name
            assert lazy.ranks(listed).tolist() == list(range(count)), name
            ranks = rng.integers(0, count, 5) if count else np.zeros(0, dtype=np.int64)
            assert lazy.at_many(ranks.tolist()).tolist() == listed[ranks].tolist(), name
            wrapped = Candidates.of_array(listed, n)
            assert wrapped.holds(everyone).tolist() == lazy.holds(everyone).tolist()
            assert wrapped.ranks(listed).tolist() == list(range(count))


def test_checked_choice_asks_the_candidates() -> None:
    busy = BusyClients()
    finder = idle_clients([Always()] * 10, busy, 0.0)
    busy[3] = busy[7] = object()
    lazy = Candidates(finder, finder.count(0.0, 0), 10)
    assert checked_choice([8, 2], lazy, 3, "mine").tolist() == [2, 8]
    for bad in ([3], [2, 12], [-1]):  # busy, no client, no client
        with pytest.raises(SelectorError, match="not candidates"):
            checked_choice(bad, lazy, 3, "mine")


# --------------------------------------------------------------------------- the history's records
def test_history_records_explored_clients_once_and_every_arrival_with_the_previous_duration() -> None:
    h = ClientHistory(5)
    h.arrived(3, 2.0, None, None)  # dropped: not explored
    h.arrived(1, 4.0, 0.5, 10)
    h.arrived(3, 1.0, 0.7, 10)
    h.arrived(1, 5.0, 0.2, 10)  # explored already: not listed again
    assert h.explored.view().tolist() == [1, 3]
    assert h.arrival_clients.view().tolist() == [3, 1, 3, 1]
    assert np.array_equal(h.arrival_previous.view(), [np.nan, np.nan, 2.0, 4.0], equal_nan=True)
    g = ClientHistory(4)
    g.applied[:] = [0, 2, 0, 1]
    g.last_duration[:] = [np.nan, 3.0, 1.0, np.nan]
    g.relist()
    assert g.explored.view().tolist() == [1, 3]
    assert g.arrival_clients.view().tolist() == [1, 2]
    assert np.isnan(g.arrival_previous.view()).all()


def test_growing_appends_past_its_capacity_and_shows_a_read_only_view() -> None:
    g = Growing(np.int64, capacity=2)
    for v in range(5):
        g.append(v)
    g.extend(np.array([7, 8, 9]))
    assert len(g) == 8 and g.view().tolist() == [0, 1, 2, 3, 4, 7, 8, 9]
    with pytest.raises(ValueError):
        g.view()[0] = 1
