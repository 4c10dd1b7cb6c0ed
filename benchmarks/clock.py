"""Clock throughput: the scheduler alone, with a zero-cost backend, for many clients.

The :class:`~fedclock.scheduling.clock.Clock` runs its protocol over ``--clients`` clients
with heterogeneous (seeded, log-normal) device speeds, while the backend does no work: it
counts the tasks it is handed and bumps the server version. Two protocols:

* sync: barrier rounds over a sampled cohort (``--fraction`` of the clients);
* async: ``--concurrency`` slots, each arrival refilled with a random idle client.

A task event is a dispatch or an arrival (two per task). The script prints, per mode, the
task events per second of wall time (target: >= 200,000/s for 100,000 clients), and per
second of the process's CPU time (the same on a quiet machine; on a shared, loaded one the
CPU figure shows what the clock costs, the wall figure what it got). ``--repeat N`` runs each
mode N times (a fresh clock each time) and prints every run and the best.

    python benchmarks/clock.py [--clients 100000] [--tasks 200000] [--repeat 1] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any, Sequence

import numpy as np

from fedclock.scenarios.schema import AsyncMode, StopConfig, SyncMode
from fedclock.scheduling.availability import Always
from fedclock.scheduling.clock import Clock, Task, TaskCosts
from fedclock.scheduling.devices import Devices


class ZeroCostBackend:
    """No training: every task is free; each aggregation bumps the version."""

    def __init__(self) -> None:
        self.version = 0
        self.started = 0

    def start(self, task: Task) -> None:
        self.started += 1

    def apply(self, tasks: Sequence[Task]) -> int:
        self.version += 1
        return self.version

    def release(self, task: Task, keep_state: bool) -> None:
        pass

    def evaluate(self) -> dict[str, float]:
        return {}


class CountingRecorder:
    """Counts ended tasks (a results writer would append a row here)."""

    def __init__(self) -> None:
        self.ended = 0

    def task_ended(self, task: Task) -> None:
        self.ended += 1

    def evaluated(self, *args: Any) -> None:
        pass

    def progress(self, *args: Any) -> None:
        pass


def make_clock(clients: int, mode: SyncMode | AsyncMode, stop: StopConfig) -> tuple[Clock, ZeroCostBackend,
                                                                                     CountingRecorder]:
    rng = np.random.default_rng(0)
    compute = rng.lognormal(mean=np.log(100.0), sigma=0.5, size=clients)
    devices = Devices(compute, np.full(clients, 10.0), np.full(clients, 5.0), np.full(clients, 0.05))
    backend, recorder = ZeroCostBackend(), CountingRecorder()
    clock = Clock(devices=devices, availability=[Always()] * clients,
                  client_sizes=rng.integers(50, 500, size=clients), costs=TaskCosts(40_000, 40_000, lambda n: 5.0 * n),
                  mode=mode, stop=stop, eval_every=10**9, backend=backend, recorder=recorder, seed=0)
    return clock, backend, recorder


def bench(name: str, clients: int, mode: SyncMode | AsyncMode, stop: StopConfig, profile: bool) -> tuple[float, float]:
    """Run one clock; return (events per wall second, events per CPU second)."""
    clock, backend, recorder = make_clock(clients, mode, stop)
    prof = cProfile.Profile() if profile else None
    start, cpu_start = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    reason = clock.run()
    if prof is not None:
        prof.disable()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    events = backend.started + recorder.ended
    rate, cpu_rate = events / wall, events / cpu
    print(f"{name}: {clients} clients, {backend.started} tasks, {events} task events in {wall:.2f} s "
          f"(CPU {cpu:.2f} s) -> {rate:,.0f} events/s (per CPU second {cpu_rate:,.0f}; stopped: {reason}, "
          f"virtual time {clock.env.now:.0f} s)")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return rate, cpu_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=200_000, help="tasks per mode (about)")
    parser.add_argument("--fraction", type=float, default=0.01, help="sync cohort fraction")
    parser.add_argument("--concurrency", type=int, default=1_000, help="async slots")
    parser.add_argument("--profile", action="store_true", help="print a cProfile table per mode")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (the best is reported)")
    args = parser.parse_args()
    cohort = max(1, int(args.fraction * args.clients))
    rounds = max(1, args.tasks // cohort)
    sync_runs = [bench("sync", args.clients, SyncMode(cohort_fraction=args.fraction), StopConfig(rounds=rounds),
                       args.profile) for _ in range(args.repeat)]
    async_runs = [bench("async", args.clients, AsyncMode(type="async", concurrency=args.concurrency),
                        StopConfig(versions=args.tasks), args.profile) for _ in range(args.repeat)]
    sync = (max(r[0] for r in sync_runs), max(r[1] for r in sync_runs))
    asyn = (max(r[0] for r in async_runs), max(r[1] for r in async_runs))
    best = "best of %d, " % args.repeat if args.repeat > 1 else ""
    print(f"events_per_s sync = {sync[0]:,.0f}  async = {asyn[0]:,.0f}  ({best}wall time; target >= 200,000)")
    print(f"events_per_cpu_s sync = {sync[1]:,.0f}  async = {asyn[1]:,.0f}")


if __name__ == "__main__":
    main()
