"""Small clock runs under every availability model, for the availability-index tests.

Each case builds a :class:`~fedclock.scheduling.clock.Clock` over a few dozen clients whose
task durations and availability change times are whole seconds, so availability changes
fall exactly on arrivals, round closes and timeline events. :func:`run_case` returns every
task the run ended as ``[index, client, round, version, dispatched_at, ended_at, status]``:
the cohorts, picks and events of the run.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode, WindowAggregation
from fedclock.scheduling.population import PopulationConfig
from fedclock.scheduling.timeline_events import ClientGroup, JoinEvent, OfflineEvent, OnlineEvent
from fedclock.scheduling.availability import Always, Availability, Diurnal, Markov, Periodic, TraceReplay
from fedclock.scheduling.clock import Clock, TaskCosts
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.timeline import Timeline
from tests.scheduling.test_heterogeneity import FakeBackend, FakeRecorder

N = 24
SPEEDS = (1.0, 2.0, 4.0, 5.0, 10.0)
"""Samples/s; with 20 samples of work a task takes 20, 10, 5, 4 or 2 s."""


def _periodic(n: int) -> list[Availability]:
    return [Always() if c < 3 else Periodic(1 + c % 3, c % 4) for c in range(n)]


def _markov(n: int) -> list[Availability]:
    return [Markov(30.0, 60.0, "stationary", numpy_rng(7, Stream.AVAILABILITY, c)) for c in range(n)]


def _diurnal(n: int) -> list[Availability]:
    return [Diurnal(100.0, 0.3, float(10 * c % 100)) for c in range(n)]


def _trace(n: int) -> list[Availability]:
    out: list[Availability] = []
    for c in range(n):
        if c % 7 == 6:
            out.append(TraceReplay([]))
        else:
            start = 5 * (c % 5)
            out.append(TraceReplay([(float(start), float(start + 20)), (float(start + 20), float(start + 30)),
                                    (float(60 + start), float(90 + 2 * c)), (200.0, 260.0)]))
    return out


def _mixed(n: int) -> list[Availability]:
    makers: list[Callable[[int], Availability]] = [
        lambda c: Always(), lambda c: Periodic(2, c), _markov_one, lambda c: Diurnal(60.0, 0.5, float(c)),
        lambda c: TraceReplay([(float(c), float(c + 40)), (100.0, 180.0)])]
    return [makers[c % len(makers)](c) for c in range(n)]


def _markov_one(c: int) -> Availability:
    return Markov(20.0, 20.0, "up" if c % 2 else "down", numpy_rng(3, Stream.AVAILABILITY, c))


MODELS: dict[str, Callable[[int], list[Availability]]] = {
    "periodic": _periodic, "markov": _markov, "diurnal": _diurnal, "trace": _trace, "mixed": _mixed}

GATE_EVENTS = [
    JoinEvent(type="join", at_s=50.0, clients=ClientGroup(range=(16, 24))),
    OfflineEvent(type="offline", at_s=30.0, clients=ClientGroup(range=(0, 8))),
    OnlineEvent(type="online", at_s=90.0, clients=ClientGroup(range=(0, 4))),
    OfflineEvent(type="offline", at_version=12, clients=ClientGroup(ids=[9, 10, 11, 12])),
    OfflineEvent(type="offline", every_s=40.0, clients=ClientGroup(fraction=0.3)),
    OnlineEvent(type="online", every_s=40.0, start_s=60.0, clients=ClientGroup()),
]

MODES: dict[str, tuple[Any, StopConfig]] = {
    "sync": (SyncMode(cohort_size=5), StopConfig(rounds=14, virtual_time_s=2_000.0)),
    "sync_deadline": (SyncMode(cohort_fraction=0.25, deadline_s=9.0, late_results="include"),
                      StopConfig(rounds=14, virtual_time_s=2_000.0)),
    "sync_timeout": (SyncMode(cohort_size=6, task_timeout_s=7.0), StopConfig(rounds=12, virtual_time_s=2_000.0)),
    "async": (AsyncMode(type="async", concurrency=5), StopConfig(versions=70, virtual_time_s=2_000.0)),
    "async_timeout": (AsyncMode(type="async", concurrency=4, task_timeout_s=8.0),
                      StopConfig(versions=50, virtual_time_s=2_000.0)),
    "windowed": (AsyncMode(type="async", concurrency=6, aggregation=WindowAggregation(window_s=7.0)),
                 StopConfig(versions=20, virtual_time_s=2_000.0)),
}

CASES = [(model, gate, mode) for model in MODELS for gate in (False, True) for mode in MODES]


def case_id(model: str, gate: bool, mode: str) -> str:
    return f"{model}{'+gate' if gate else ''}/{mode}"


def make_clock(model: str, gate: bool, mode: str, clock_type: type[Clock] = Clock) -> tuple[Clock, FakeRecorder]:
    """The clock of one case (not yet run) and the recorder of its ended tasks."""
    sched, stop = MODES[mode]
    devices = Devices(np.array([SPEEDS[(3 * c) % len(SPEEDS)] for c in range(N)]), np.full(N, 1e6), np.full(N, 1e6),
                      np.zeros(N))
    availability = MODELS[model](N)
    script = None
    if gate:
        timeline = Timeline(GATE_EVENTS, PopulationConfig(num_clients=N), 5, devices, availability)
        devices, availability, script = timeline.devices, timeline.availability, timeline
    recorder = FakeRecorder()
    clock = clock_type(devices=devices, availability=availability, client_sizes=np.full(N, 20),
                       costs=TaskCosts(0, 0, lambda k: float(k)), mode=sched, stop=stop, eval_every=1000,
                       backend=FakeBackend(), recorder=recorder, seed=11, script=script)
    return clock, recorder


def run_case(model: str, gate: bool, mode: str, clock_type: type[Clock] = Clock) -> list[list[Any]]:
    """Every ended task of the case, in the order the run ended them, plus the stop reason
    and final time as the last row."""
    clock, recorder = make_clock(model, gate, mode, clock_type)
    reason = clock.run()
    rows: list[list[Any]] = [[t.index, t.client, t.round, t.version, t.dispatched_at, t.ended_at, t.status]
                             for t in recorder.ended]
    rows.append([reason, clock.env.now, clock.round, clock.version])
    return rows
