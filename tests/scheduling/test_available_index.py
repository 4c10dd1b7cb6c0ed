"""The index of idle, available clients agrees with the naive scan of the population."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedclock.scheduling.population import PopulationConfig
from fedclock.scheduling.timeline_events import OfflineEvent, OnlineEvent
from fedclock.scheduling.availability import Always, Availability, Diurnal, Markov, Periodic, TraceReplay
from fedclock.scheduling.available_index import IdleAvailable, build_index
from fedclock.scheduling.fenwick import Fenwick, select_in_union
from fedclock.scheduling.candidates import ScannedIdleClients
from fedclock.scheduling.clock import Clock
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.timeline import Timeline
from tests.scheduling.availability_cases import CASES, case_id, make_clock, run_case


def test_fenwick_matches_a_list_on_random_flips() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 8, 9, 64, 100):
        marks = [int(x) for x in rng.integers(0, 2, n)]
        tree = Fenwick(marks)
        for _ in range(300):
            i = int(rng.integers(n))
            delta = -1 if marks[i] else 1
            marks[i] += delta
            tree.add(i, delta)
            ones = [p for p, m in enumerate(marks) if m]
            assert tree.total == len(ones)
            assert [tree.select(k) for k in range(len(ones))] == ones
            j = int(rng.integers(n + 1))
            assert tree.count_before(j) == sum(marks[:j])


def test_select_in_union_ranks_over_disjoint_trees() -> None:
    rng = np.random.default_rng(1)
    n = 50
    for _ in range(50):
        owner = rng.integers(0, 4, n)  # each position belongs to one of four trees
        on = rng.integers(0, 2, n)
        trees = [Fenwick([int(on[p] and owner[p] == g) for p in range(n)]) for g in range(4)]
        chosen = sorted({int(g) for g in rng.integers(0, 4, 3)})
        union = [p for p in range(n) if on[p] and owner[p] in chosen]
        assert [select_in_union([trees[g] for g in chosen], k) for k in range(len(union))] == union


def _population(n: int, rng: np.random.Generator) -> list[Availability]:
    out: list[Availability] = []
    for c in range(n):
        kind = int(rng.integers(5))
        if kind == 0:
            out.append(Always())
        elif kind == 1:
            out.append(Periodic(int(rng.integers(0, 4)), int(rng.integers(-3, 5))))
        elif kind == 2:
            out.append(Markov(3.0, 5.0, "stationary", numpy_rng(2, Stream.AVAILABILITY, c)))
        elif kind == 3:
            out.append(Diurnal(10.0, float(rng.choice([0.0, 0.3, 0.5, 1.0])), float(rng.integers(0, 10))))
        else:
            edges = np.cumsum(rng.integers(0, 4, 8)).astype(float)
            out.append(TraceReplay([(edges[i], edges[i + 1]) for i in range(0, 8, 2)]))
    return out


@pytest.mark.parametrize("gated", [False, True])
def test_index_matches_the_scan_on_random_operations(gated: bool) -> None:
    rng = np.random.default_rng(7 + gated)
    n = 40
    models = _population(n, rng)
    timeline = None
    if gated:
        events = [OfflineEvent(type="offline", at_s=4.0), OnlineEvent(type="online", at_s=9.0)]
        timeline = Timeline(events, PopulationConfig(num_clients=n), 0, Devices(*[np.ones(n)] * 4), models)
        models = timeline.availability
    index = build_index(models, 0.0)
    assert isinstance(index, IdleAvailable)
    busy = BusyClients(index)
    now = 0.0
    for step in range(1_500):
        op = int(rng.integers(6))
        c = int(rng.integers(n))
        if op == 0 and c not in busy:
            busy[c] = step
        elif op == 1:
            busy.pop(c, None)
        elif op == 2:
            now += float(rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 2)]))  # often exactly on a change
        elif op == 3 and timeline is not None:
            ids = np.unique(rng.integers(0, n, 5))
            timeline.offline[ids] = not timeline.offline[ids[0]]
            index.gates_changed(ids)
        elif op == 4 and rng.random() < 0.02:
            busy.clear()
        round_index = int(rng.integers(12))
        candidates = [x for x in range(n) if x not in busy and models[x].available(now, round_index)]
        assert index.count(now, round_index) == len(candidates)
        assert index.at_many(range(len(candidates))) == candidates
        everyone = min((m.next_change(now) for m in models), default=math.inf)
        idle = min((models[x].next_change(now) for x in range(n) if x not in busy), default=math.inf)
        assert index.next_change(now) == everyone
        assert index.next_idle_change(now) == idle


def test_timeline_events_switch_the_gated_clients_in_the_index() -> None:
    n = 6
    events = [OfflineEvent(type="offline", at_s=0.0, clients={"range": (0, 4)}),
              OnlineEvent(type="online", at_s=0.0, clients={"ids": [1]})]
    timeline = Timeline(events, PopulationConfig(num_clients=n), 0, Devices(*[np.ones(n)] * 4), [Always()] * n)
    index = build_index(timeline.availability, 0.0)
    assert index is not None and index.count(0.0, 0) == n

    class _Clock:  # what the timeline reads from the clock when it fires
        def __init__(self) -> None:
            import simpy
            self.env, self.version, self.round = simpy.Environment(), 0, 0

        def refill(self) -> None: ...

    timeline.start(_Clock())
    assert index.at_many(range(index.count(0.0, 0))) == [1, 4, 5]


class _Custom:
    def available(self, now: float, round_index: int) -> bool:
        return True

    def next_change(self, now: float) -> float:
        return math.inf


def test_unknown_models_are_scanned_and_known_ones_indexed() -> None:
    assert build_index([Always(), _Custom()], 0.0) is None
    assert build_index([Always(), Periodic(1)], 0.0) is not None
    for model, gate, mode in CASES:
        clock, _ = make_clock(model, gate, mode)
        assert isinstance(clock.cohorts.idle, IdleAvailable), case_id(model, gate, mode)


def test_diurnal_answer_is_constant_until_its_next_change() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        d = Diurnal(float(rng.uniform(0.1, 1e5)), float(rng.uniform(0.01, 0.99)), float(rng.uniform(0, 1e5)))
        t = float(rng.uniform(0, 1e7))
        nxt = d.next_change(t)
        assert nxt > t
        before = math.nextafter(nxt, -math.inf)
        assert d.available(t, 0) == d.available(before, 0)
        assert d.available(nxt, 0) != d.available(t, 0) or d.next_change(nxt) > nxt


class _ScanClock(Clock):
    """The clock without the index: every query scans the population."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cohorts.idle = ScannedIdleClients(self.cohorts.availability, self.busy)
        self.busy.watcher = None


@pytest.mark.parametrize("model,gate,mode", CASES[::5], ids=[case_id(*c) for c in CASES[::5]])
def test_indexed_clock_runs_as_the_scanning_clock(model: str, gate: bool, mode: str) -> None:
    assert run_case(model, gate, mode) == run_case(model, gate, mode, _ScanClock)


def test_state_is_available_and_next_change_together() -> None:
    rng = np.random.default_rng(9)
    models = [m for m in _population(60, rng) if hasattr(m, "state")]
    assert {type(m) for m in models} == {Markov, Diurnal, TraceReplay}
    for t in [0.0, 0.5, 1.0, 2.0, 3.0, 7.25, 10.0, 11.0, 30.0]:
        for m in models:
            on, nxt = m.state(t)  # type: ignore[attr-defined]
            assert (on, nxt) == (m.available(t, 0), m.next_change(t))
