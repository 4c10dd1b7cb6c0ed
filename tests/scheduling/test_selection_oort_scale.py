"""Oort's decision without passes over the population (issue 50): the explored candidates from
the history's record, the exploration and fill drawn by rank, the participation cap over the
explored clients, the preferred duration from the arrival record, each against numbers by
hand or the full-array definition; and a decision over 10^12 clients whose arrays are never
read whole."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedclock.scheduling.availability import Always
from fedclock.scheduling.candidate_set import Candidates
from fedclock.scheduling.candidates import idle_clients
from fedclock.scheduling.growing import Growing
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.selection import ClientHistory, SelectionView, checked_choice
from fedclock.scheduling.selection_oort import Oort, OortParams
from tests.scheduling.busy_churn import churn

EXPLORE_ALL = {"exploration_factor": 1.0, "exploration_decay": 1.0, "exploration_min": 1.0}


class FixedDraws:
    """A generator stand-in whose ``integers`` returns given values (and records the bounds asked)."""

    def __init__(self, *draws: list[int]) -> None:
        self.draws = list(draws)
        self.asked: list[list[int]] = []

    def integers(self, low: int, high: Any) -> np.ndarray:
        self.asked.append(np.asarray(high).tolist())
        return np.array(self.draws.pop(0), dtype=np.int64)


def _view(h: ClientHistory, r: int = 1) -> SelectionView:
    return SelectionView(h, float(r), r, r, None)


def test_explored_candidates_are_the_recorded_clients_the_candidates_hold() -> None:
    """Recorded (first applied result) in the order 7, 2, 5, 9; client 5's result gave no
    loss (unexplored). Candidates 0 2 3 5 6 8 9 hold 2, 5 and 9: explored 2 and 9. With a cap
    of 1 applied result client 2 (two) is capped: exploitable 9, left out of the exploration 2
    and 9."""
    h = ClientHistory(10)
    for c, loss in ((7, 1.0), (2, 2.0), (5, None), (9, 0.5), (2, 2.5)):
        h.arrived(c, 1.0, loss, 5)
    assert h.explored.view().tolist() == [7, 2, 5, 9]
    pool = Candidates.of_array(np.array([0, 2, 3, 5, 6, 8, 9]), 10)
    explored, closed = Oort(OortParams(), np.random.default_rng(0)).explored_candidates(_view(h), pool)
    assert explored.tolist() == [2, 9] and closed.tolist() == [2, 9]
    capped = Oort(OortParams(blacklist_rounds=1), np.random.default_rng(0))
    assert capped.capped_clients(_view(h)).tolist() == [2]
    explored, closed = capped.explored_candidates(_view(h), pool)
    assert explored.tolist() == [9] and closed.tolist() == [2, 9]


def test_exploration_draws_by_rank_around_the_explored_and_capped_candidates() -> None:
    """13 clients; candidates 0 1 3 4 6 7 8 9 11 12 (ranks 0..9). Clients 1 and 3 explored,
    client 4 capped (3 applied results, no loss): their ranks 1, 2, 3 are left out, 7 ranks
    open (0 4 5 6 7 8 9). Everything explored (factor 1): draws 6, 0, 3 below 7, 6, 5 give
    ranks 9, then 0 (of 0 4 5 6 7 8), then 7 (of 4 5 6 7 8): clients 12, 0, 9. The same from
    the array and from the candidates asked."""
    h = ClientHistory(13)
    h.arrived(1, 1.0, 0.5, 10)
    h.arrived(3, 1.0, 0.5, 10)
    for _ in range(3):
        h.arrived(4, 1.0, None, 10)
    ids = np.array([0, 1, 3, 4, 6, 7, 8, 9, 11, 12])
    busy = BusyClients()
    finder = idle_clients([Always()] * 13, busy, 0.0)
    for c in (2, 5, 10):
        busy[c] = object()
    for candidates in (ids, Candidates(finder, finder.count(0.0, 1), 13)):
        draws = FixedDraws([6, 0, 3])
        oort = Oort(OortParams(blacklist_rounds=2, **EXPLORE_ALL), draws)  # type: ignore[arg-type]
        assert oort.select(_view(h), candidates, 3).tolist() == [12, 0, 9]
        assert draws.asked == [[7, 6, 5]]


def test_the_fill_draws_by_rank_around_the_picked_candidates() -> None:
    """Candidates 0..4; 0, 1, 2 explored and capped (3 results each, cap 2): nothing to
    exploit, ranks 3 and 4 open. A cohort of 4: the exploration draws 1, 0 (below 2, 1):
    clients 4, 3; the fill draws 2, 0 (below 3, 2) among ranks 0 1 2: clients 2, 0."""
    h = ClientHistory(5)
    for c in range(3):
        for _ in range(3):
            h.arrived(c, 1.0, 0.5, 10)
    draws = FixedDraws([1, 0], [2, 0])
    oort = Oort(OortParams(blacklist_rounds=2, blacklist_max_len=1.0, **EXPLORE_ALL), draws)  # type: ignore[arg-type]
    assert oort.select(_view(h), np.arange(5), 4).tolist() == [4, 3, 2, 0]
    assert draws.asked == [[2, 1], [3, 2]]


def _old_capped(applied: np.ndarray, rounds: int, max_len: float) -> list[int]:
    """The cap as it was defined over every client (before the explored record)."""
    over = np.flatnonzero(applied > rounds)
    limit = int(max_len * applied.shape[0])
    if over.shape[0] > limit:
        over = over[np.lexsort((over, -applied[over]))[:limit]]
    return sorted(over.tolist())


def test_the_cap_over_explored_clients_is_the_cap_over_all() -> None:
    rng = np.random.default_rng(4)
    for trial in range(30):
        n = int(rng.integers(5, 80))
        h = ClientHistory(n)
        for c in rng.integers(0, n, int(rng.integers(0, 4 * n))).tolist():
            h.arrived(c, 1.0, None if rng.random() < 0.3 else 1.0, None if rng.random() < 0.2 else 10)
        for rounds in (0, 1, 3):
            for max_len in (0.05, 0.3, 1.0):
                oort = Oort(OortParams(blacklist_rounds=rounds, blacklist_max_len=max_len), rng)
                got = oort.capped_clients(_view(h)).tolist()
                assert got == _old_capped(h.applied, rounds, max_len), (trial, rounds, max_len)


def test_the_preferred_duration_from_the_record_is_the_full_arrays() -> None:
    """From a history written directly (recorded by ``relist``), then arrivals (rounded
    durations: ties), read after some rounds only (a percentile of 100 skips the reading):
    the kept preferred duration equals :meth:`Oort.preferred_duration` over all clients."""
    rng = np.random.default_rng(1)
    h = ClientHistory(200)
    h.last_duration[rng.choice(200, 50, replace=False)] = np.round(rng.lognormal(0, 1, 50), 1)
    h.relist()
    oort = Oort(OortParams(), rng)
    for step in range(60):
        for c in rng.choice(200, size=int(rng.integers(0, 30)), replace=False).tolist():
            h.arrived(c, float(np.round(rng.lognormal(0, 1), 1)), None, None)
        oort.threshold = float(rng.choice([5.0, 30.0, 95.0, 100.0]))
        want = Oort.preferred_duration(h.last_duration, oort.threshold)
        assert oort._preferred(_view(h, step)) == want
    fresh = ClientHistory(200)  # another (shorter) history: read from its start
    fresh.arrived(3, 7.0, None, None)
    oort.threshold = 30.0
    assert oort._preferred(_view(fresh)) == 7.0


# --------------------------------------------------------------------------- no pass over the population
N = 10**12
"""Clients of the history below: one pass over any of its arrays would allocate terabytes."""


class EvenIds:
    """Candidates: the even client ids of ``N``, answered arithmetically; counts what it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    def at_many(self, ranks: Any) -> list[int]:
        assert len(ranks) <= 10**6, "listing the candidates"
        ranks = list(ranks)
        self.asked += len(ranks)
        return [2 * int(r) for r in ranks]

    def holds(self, clients: np.ndarray) -> np.ndarray:
        self.asked += clients.shape[0]
        return np.asarray(clients % 2 == 0)

    def ranks(self, clients: np.ndarray) -> np.ndarray:
        self.asked += clients.shape[0]
        return np.asarray(clients // 2)


def _huge_history(explored: np.ndarray) -> ClientHistory:
    """A history of ``N`` clients whose arrays are constants broadcast over them (no memory):
    ``explored`` reported a loss of 1.5 from 10 samples after 2.0 s (the others too, as far as
    the arrays say, but only the record tells who is explored)."""
    h = object.__new__(ClientHistory)
    h.num_clients = N

    def const(value: float, dtype: Any = np.float64) -> np.ndarray:
        return np.broadcast_to(np.array(value, dtype=dtype), (N,))

    h.last_duration, h.duration_sum, h.arrivals = const(2.0), const(4.0), const(2, np.int64)
    h.last_picked_time, h.last_picked_round, h.times_picked = const(0.0), const(0, np.int64), const(1, np.int64)
    h.last_loss, h.last_samples, h.applied = const(1.5), const(10, np.int64), const(1, np.int64)
    h.lost = h.timed_out = h.cancelled = const(0, np.int64)
    h.explored, h.arrival_clients, h.arrival_previous = Growing(np.int64), Growing(np.int64), Growing(np.float64)
    h.explored.extend(explored)
    h.arrival_clients.extend(explored)
    h.arrival_previous.extend(np.full(explored.shape[0], np.nan))
    return h


def test_a_decision_over_a_huge_population_reads_the_explored_clients_and_the_cohort_only() -> None:
    explored = np.arange(0, 4000, 3, dtype=np.int64) * 1_000_003  # 1,334 clients, half of them candidates
    for params in ({}, {"blacklist_rounds": 0}):
        h = _huge_history(explored)
        oort = Oort(OortParams(**params), np.random.default_rng(0))
        for r in range(3):
            finder = EvenIds()
            pool = Candidates(finder, N // 2, N)
            chosen = checked_choice(oort.select(_view(h, r), pool, 100), pool, 100, "oort")
            assert chosen.shape[0] == 100 and (chosen % 2 == 0).all()
            assert finder.asked <= 3 * explored.shape[0] + 2 * 100, finder.asked
            explored_here = set(explored[explored % 2 == 0].tolist())
            n_explored = len(explored_here & set(chosen.tolist()))
            if params:  # every explored client is over a cap of 0: only unexplored ones
                assert n_explored == 0
            else:
                assert n_explored == 100 - math.floor(100 * oort.exploration)


def test_the_clocks_unlisted_candidates_and_their_array_give_the_same_choices() -> None:
    """Two Oort selectors with the same seed, one given the diurnal index's candidates
    unlisted and one their array, round after round (picks report back, some clients busy),
    with and without the cap and the disclosed data sizes: the same cohorts."""
    from fedclock.scheduling.availability import DiurnalClients

    n = 400
    rng = np.random.default_rng(7)
    sizes = rng.integers(0, 50, n)
    for params, disclose in (({}, False), ({"blacklist_rounds": 1}, False), ({}, True)):
        busy = BusyClients()
        finder = idle_clients(DiurnalClients(10.0, 0.6, rng.uniform(0, 10.0, n)), busy, 0.0)  # type: ignore[arg-type]
        h = ClientHistory(n)
        lazy, listed = (Oort(OortParams(**params), np.random.default_rng(3)) for _ in range(2))
        for r in range(12):
            churn(busy, rng, n, 10)
            count = finder.count(r * 0.9, r)
            view = SelectionView(h, r * 0.9, r, r, None, data_size=sizes if disclose else None)
            candidates = Candidates(finder, count, n)
            a = lazy.select(view, candidates, 20)
            b = listed.select(view, candidates.array(), 20)
            assert a.tolist() == b.tolist(), (params, disclose, r)
            for c in a.tolist():
                h.picked(c, r * 0.9, r)
                h.arrived(c, float(rng.lognormal()), float(rng.lognormal()), int(rng.integers(1, 50)))
