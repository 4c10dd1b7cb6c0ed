"""Clock throughput: the scheduler alone, with a zero-cost backend, for many clients.

The :class:`~fedclock.scheduling.clock.Clock` runs its protocol over ``--clients`` clients
with heterogeneous (seeded, log-normal) device speeds, while the backend does no work: it
counts the tasks it is handed and bumps the server version. Two protocols:

* sync: barrier rounds over a sampled cohort (``--fraction`` of the clients);
* async: ``--concurrency`` slots, each arrival refilled with a random idle client.

A task event is a dispatch or an arrival (two per task). The script prints, per mode, the
task events per second of wall time (target: >= 200,000/s for 100,000 clients).

    python benchmarks/clock.py [--clients 100000] [--tasks 200000] [--profile]
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


def bench(name: str, clients: int, mode: SyncMode | AsyncMode, stop: StopConfig, profile: bool) -> float:
    clock, backend, recorder = make_clock(clients, mode, stop)
    prof = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if prof is not None:
        prof.enable()
    reason = clock.run()
    if prof is not None:
        prof.disable()
    wall = time.perf_counter() - start
    events = backend.started + recorder.ended
    rate = events / wall
    print(f"{name}: {clients} clients, {backend.started} tasks, {events} task events in {wall:.2f} s "
          f"-> {rate:,.0f} events/s (stopped: {reason}, virtual time {clock.env.now:.0f} s)")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=200_000, help="tasks per mode (about)")
    parser.add_argument("--fraction", type=float, default=0.01, help="sync cohort fraction")
    parser.add_argument("--concurrency", type=int, default=1_000, help="async slots")
    parser.add_argument("--profile", action="store_true", help="print a cProfile table per mode")
    args = parser.parse_args()
    cohort = max(1, int(args.fraction * args.clients))
    rounds = max(1, args.tasks // cohort)
    sync = bench("sync", args.clients, SyncMode(cohort_fraction=args.fraction), StopConfig(rounds=rounds),
                 args.profile)
    asyn = bench("async", args.clients, AsyncMode(type="async", concurrency=args.concurrency),
                 StopConfig(versions=args.tasks), args.profile)
    print(f"events_per_s sync = {sync:,.0f}  async = {asyn:,.0f}  (target >= 200,000)")


if __name__ == "__main__":
    main()
