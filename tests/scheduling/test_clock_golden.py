"""The clock's exact event sequence on small mixed scenarios, pinned against a golden file.

``data/clock_golden.json`` was recorded from the clock *before* its hot path was rewritten
(a clock-owned heap of settlements merged with SimPy's queue instead of a timer and an event
per task, see :mod:`fedclock.scheduling.clock`); this test proves the rewrite gives the same
events and the same numbers: every dispatch (time, client, task index, version, round),
every server update (which tasks, in which order, with which staleness), every task's end
(status, time, version applied), releases, evaluations and timeline firings.

The scenarios mix exact ties (integer durations: arrivals, deadlines, time budgets and task
timeouts falling on the same instant) with seeded log-normal devices, sync rounds (deadline,
late results dropped or included, no deadline with busy clients to wait for), async slots,
windowed aggregation, partial work, lost connections, task timeouts (draining clients),
Markov and periodic availability, scripted connection losses, refills and concurrency
changes, and timeline events.

Regenerate only for an intended change of the clock's behaviour:
``python -m tests.scheduling.test_clock_golden`` (with the worktree on ``PYTHONPATH``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pytest
import simpy
from pydantic import TypeAdapter

from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode
from fedclock.scheduling.population import PopulationConfig
from fedclock.scheduling.timeline_events import TimelineEvent
from fedclock.scheduling.availability import Always, Availability, Markov, Periodic
from fedclock.scheduling.clock import Clock, Task, TaskCosts
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.heterogeneity import WorkAndLinks
from fedclock.scheduling.rng import numpy_rng
from fedclock.scheduling.timeline import Timeline

GOLDEN = Path(__file__).parent / "data" / "clock_golden.json"


class Log:
    """Backend and recorder in one: every call the clock makes, in order."""

    def __init__(self, clock_of: Callable[[], Clock], bump_every: int = 1) -> None:
        self.rows: list[list[Any]] = []
        self.clock_of = clock_of
        self.version = 0
        self.applies = 0
        self.bump_every = bump_every

    def now(self) -> float:
        return self.clock_of().env.now

    # Backend
    def start(self, task: Task) -> None:
        self.rows.append(["start", self.now(), task.index, task.client, task.client_task, task.version, task.round,
                          task.dispatched_at, task.timing.download_s, task.timing.compute_s, task.timing.upload_s,
                          task.steps, task.steps_full, task.lost, task.gives_up_at])

    def apply(self, tasks: Sequence[Task]) -> int:
        self.applies += 1
        if self.applies % self.bump_every == 0:
            self.version += 1
        self.rows.append(["apply", self.now(), [[t.index, t.client, t.staleness, t.late] for t in tasks],
                          self.version])
        return self.version

    def release(self, task: Task, keep_state: bool) -> None:
        self.rows.append(["release", self.now(), task.index, keep_state])

    def failed(self, task: Task) -> None:
        pass

    def evaluate(self) -> dict[str, float]:
        return {"global_accuracy": self.version / 40.0}

    # Recorder
    def task_ended(self, task: Task) -> None:
        self.rows.append(["ended", self.now(), task.index, task.client, task.status, task.ended_at, task.version,
                          task.version_applied, task.staleness, task.late, task.round, task.lost])

    def evaluated(self, now: float, version: int, round_index: int, metrics: dict[str, float]) -> None:
        self.rows.append(["evaluated", now, version, round_index, metrics])

    def progress(self, now: float, version: int, in_flight: int) -> None:
        self.rows.append(["progress", now, version, in_flight])


def tie_devices(n: int) -> Devices:
    """Integer durations: client c computes at 10 * (1 + c % 3) samples/s, free links."""
    compute = np.array([10.0 * (1 + c % 3) for c in range(n)])
    return Devices(compute, np.full(n, 1e9), np.full(n, 1e9), np.zeros(n))


def lognormal_devices(n: int, seed: int) -> Devices:
    rng = np.random.default_rng(seed)
    return Devices(rng.lognormal(np.log(50.0), 0.6, n), rng.lognormal(np.log(5.0), 0.5, n),
                   rng.lognormal(np.log(2.0), 0.5, n), rng.uniform(0.01, 0.2, n))


def population(n: int, **extra: Any) -> PopulationConfig:
    return PopulationConfig.model_validate({"num_clients": n, **extra})


def build(devices: Devices, mode: SyncMode | AsyncMode, stop: StopConfig, *, sizes: np.ndarray,
          costs: TaskCosts, availability: Sequence[Availability] | None = None, eval_every: int = 3,
          work_and_links: WorkAndLinks | None = None, script: Any = None, bump_every: int = 1,
          seed: int = 5) -> tuple[Clock, Log]:
    holder: list[Clock] = []
    log = Log(lambda: holder[0], bump_every)
    clock = Clock(devices=devices, availability=list(availability or [Always()] * len(devices)),
                  client_sizes=sizes, costs=costs, mode=mode, stop=stop, eval_every=eval_every, backend=log,
                  recorder=log, seed=seed, work_and_links=work_and_links, script=script)
    holder.append(clock)
    return clock, log


def steps_costs(per_step: float = 10.0) -> TaskCosts:
    return TaskCosts(20_000, 10_000, lambda n: per_step * (n // 10), local_steps=lambda n: n // 10,
                     work_for_steps=lambda n, k: per_step * k)


def scenarios() -> dict[str, Callable[[], tuple[Clock, Log]]]:
    n = 12
    tie_sizes = np.full(n, 20)
    tie_costs = TaskCosts(0, 0, lambda k: float(k))
    ln_sizes = np.random.default_rng(1).integers(20, 200, size=30)

    def sync_ties_include() -> tuple[Clock, Log]:
        return build(tie_devices(n), SyncMode(cohort_size=5, deadline_s=1.0, late_results="include"),
                     StopConfig(rounds=9), sizes=tie_sizes, costs=tie_costs)

    def sync_ties_drop() -> tuple[Clock, Log]:
        return build(tie_devices(n), SyncMode(cohort_fraction=0.5, deadline_s=1.5),
                     StopConfig(rounds=7), sizes=tie_sizes, costs=tie_costs)

    def sync_lognormal_links() -> tuple[Clock, Log]:
        pop = population(30, completeness={"type": "random", "distribution": {"dist": "uniform", "low": 0.2,
                                                                              "high": 1.0}},
                         connectivity={"type": "per_task", "probability": 0.2})
        mode = SyncMode(cohort_size=8, deadline_s=6.0, late_results="include", task_timeout_s=9.0)
        return build(lognormal_devices(30, 3), mode, StopConfig(rounds=10), sizes=ln_sizes, costs=steps_costs(),
                     work_and_links=WorkAndLinks(pop, mode, 5))

    def sync_wait_for_draining() -> tuple[Clock, Log]:
        # no deadline, slow clients time out and keep their clients busy; periodic availability
        mode = SyncMode(task_timeout_s=1.5)
        availability = [Always(), Always(), Periodic(2, 0), Periodic(1, 0), Periodic(1, 0)]
        devices = Devices(np.array([10.0, 10.0, 10.0, 30.0, 20.0]), np.full(5, 1e9), np.full(5, 1e9), np.zeros(5))
        return build(devices, mode, StopConfig(rounds=14), sizes=np.full(5, 20), costs=tie_costs,
                     availability=availability, work_and_links=WorkAndLinks(population(5), mode, 5))

    def sync_markov_waits() -> tuple[Clock, Log]:
        availability = [Markov(1.0, 4.0, "up" if c % 3 else "down", numpy_rng(9, 98, c)) for c in range(8)]
        return build(lognormal_devices(8, 8), SyncMode(cohort_size=3), StopConfig(rounds=10), sizes=ln_sizes[:8],
                     costs=steps_costs(), availability=availability)

    def async_ties_budget() -> tuple[Clock, Log]:
        return build(tie_devices(n), AsyncMode(type="async", concurrency=4, task_timeout_s=1.5),
                     StopConfig(virtual_time_s=12.0), sizes=tie_sizes, costs=tie_costs, eval_every=4)

    def async_lognormal_links() -> tuple[Clock, Log]:
        pop = population(30, completeness={"type": "time_budget", "budget_s": 4.0},
                         connectivity={"type": "per_second", "rate": 0.05})
        mode = AsyncMode(type="async", concurrency=6, task_timeout_s=5.0)
        return build(lognormal_devices(30, 4), mode, StopConfig(versions=60), sizes=ln_sizes,
                     costs=steps_costs(), work_and_links=WorkAndLinks(pop, mode, 5), bump_every=2)

    def async_markov_target() -> tuple[Clock, Log]:
        availability = [Markov(1.0, 6.0, "up" if c % 2 else "down", numpy_rng(9, 99, c)) for c in range(10)]
        return build(lognormal_devices(10, 6), AsyncMode(type="async", concurrency=3),
                     StopConfig(target_accuracy=0.5, virtual_time_s=400.0), sizes=ln_sizes[:10],
                     costs=steps_costs(), availability=availability, eval_every=2)

    def async_scripted() -> tuple[Clock, Log]:
        mode = AsyncMode(type="async", concurrency=3, task_timeout_s=4.0)
        clock, log = build(tie_devices(8), mode, StopConfig(virtual_time_s=20.0), sizes=np.full(8, 20),
                           costs=tie_costs)

        def script(env: simpy.Environment) -> Any:
            yield env.timeout(1.0)
            for client in sorted(clock.busy):
                log.rows.append(["lose", env.now, client, clock.lose_connection(client)])
            yield env.timeout(2.0)  # at 3.0: an instant where tasks also arrive
            clock.set_mode_limits(concurrency=5)
            clock.refill()
            yield env.timeout(4.5)
            clock.set_mode_limits(concurrency=2)
            log.rows.append(["lose", env.now, 7, clock.lose_connection(7)])

        clock.env.process(script(clock.env))
        return clock, log

    def windows_links() -> tuple[Clock, Log]:
        pop = population(30, connectivity={"type": "per_task", "probability": 0.15})
        mode = AsyncMode(type="async", concurrency=10, task_timeout_s=7.0, aggregation={"window_s": 2.0})
        return build(lognormal_devices(30, 7), mode, StopConfig(versions=12), sizes=ln_sizes, costs=steps_costs(),
                     work_and_links=WorkAndLinks(pop, mode, 5))

    def windows_ties() -> tuple[Clock, Log]:
        return build(tie_devices(n), AsyncMode(type="async", concurrency=5, aggregation={"window_s": 1.0}),
                     StopConfig(virtual_time_s=9.0), sizes=tie_sizes, costs=tie_costs)

    def timeline_async() -> tuple[Clock, Log]:
        events = TypeAdapter(list[TimelineEvent]).validate_python([
            {"type": "scale", "at_s": 2.0, "clients": {"range": [0, 6]}, "compute": 0.5},
            {"type": "offline", "at_s": 3.0, "clients": {"ids": [1, 2, 3]}},
            {"type": "online", "at_s": 6.0, "clients": {"ids": [1, 2]}},
            {"type": "server_uplink", "every_s": 2.5, "until_s": 5.0, "mbps": 4.0},
            {"type": "concurrency", "at_version": 5, "value": 6},
            {"type": "join", "at_s": 4.0, "clients": {"ids": [10, 11]}},
        ])
        pop = population(n)
        holder: list[Log] = []
        devices = Devices(np.array([10.0 * (1 + c % 3) for c in range(n)]), np.full(n, 8.0), np.full(n, 8.0),
                          np.zeros(n))
        timeline = Timeline(events, pop, 5, devices, [Always()] * n,
                            record=lambda r: holder[0].rows.append(["timeline", r.time, r.version, r.round,
                                                                    r.event, r.type, list(r.clients), r.detail]))
        clock, log = build(timeline.devices, AsyncMode(type="async", concurrency=3), StopConfig(virtual_time_s=14.0),
                           sizes=tie_sizes, costs=TaskCosts(1_000_000, 0, lambda k: float(k)),
                           availability=timeline.availability, script=timeline)
        holder.append(log)
        return clock, log

    def timeline_sync() -> tuple[Clock, Log]:
        events = TypeAdapter(list[TimelineEvent]).validate_python([
            {"type": "cohort", "at_s": 3.0, "size": 2},
            {"type": "set", "at_version": 2, "clients": {"fraction": 0.5}, "compute": 20.0},
            {"type": "offline", "every_s": 4.0, "clients": {"ids": [0, 1]}},
            {"type": "online", "every_s": 4.0, "start_s": 6.0, "clients": {"ids": [0, 1]}},
        ])
        pop = population(n)
        holder: list[Log] = []
        timeline = Timeline(events, pop, 5, tie_devices(n), [Always()] * n,
                            record=lambda r: holder[0].rows.append(["timeline", r.time, r.version, r.round,
                                                                    r.event, r.type, list(r.clients), r.detail]))
        clock, log = build(timeline.devices, SyncMode(cohort_size=4, deadline_s=2.0), StopConfig(rounds=8),
                           sizes=tie_sizes, costs=tie_costs, availability=timeline.availability, script=timeline)
        holder.append(log)
        return clock, log

    return {f.__name__: f for f in (sync_ties_include, sync_ties_drop, sync_lognormal_links, sync_wait_for_draining,
                                    sync_markov_waits, async_ties_budget, async_lognormal_links, async_markov_target,
                                    async_scripted, windows_links, windows_ties, timeline_async, timeline_sync)}


def record(make: Callable[[], tuple[Clock, Log]]) -> dict[str, Any]:
    clock, log = make()
    reason = clock.run()
    rows = json.loads(json.dumps(log.rows))  # the same float repr round trip as the golden file
    return {"reason": reason, "now": clock.env.now, "version": clock.version, "round": clock.round,
            "tasks": clock.task_count, "rows": rows}


def test_every_scenario_gives_the_pinned_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # the pinned sequence starts every task; not starting tasks known to be discarded
    # (Clock._discarded) leaves the results unchanged: tests/actors/test_skip_discarded.py
    monkeypatch.setattr(Clock, "_discarded", lambda self, task: False)
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == sorted(scenarios())
    for name, make in scenarios().items():
        got = record(make)
        want = golden[name]
        assert len(want["rows"]) > 20, name
        for i, (g, w) in enumerate(zip(got["rows"], want["rows"])):
            assert g == w, f"{name}: row {i} differs: {g} != {w}"
        assert got == want, name


def dump(recorded: dict[str, dict[str, Any]]) -> str:
    """The golden file's text: one line per row."""
    parts = []
    for name, run in recorded.items():
        head = json.dumps({k: v for k, v in run.items() if k != "rows"})[:-1]
        rows = ",\n".join(json.dumps(row) for row in run["rows"])
        parts.append(f"{json.dumps(name)}: {head}, \"rows\": [\n{rows}]}}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    GOLDEN.write_text(dump({name: record(make) for name, make in scenarios().items()}))
