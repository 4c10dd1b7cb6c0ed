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

``--availability`` gives every client an availability model instead of ``always``:
``markov`` (on/off, mean up 30 min, mean down 10 min, stationary start) or ``diurnal``
(a 24 h cycle, online half of it, each client's phase drawn from its seed). The clock then
finds idle, available clients through its index
(:mod:`fedclock.scheduling.available_index`); ``--scan`` makes it scan every client instead
(the clock before that index), for comparison on a smaller ``--tasks``.

    python benchmarks/clock.py [--clients 100000] [--tasks 200000] [--repeat 1]
                               [--availability markov] [--scan] [--modes sync async] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any, Sequence

import numpy as np

from fedclock.scheduling.availability import Always, Availability, Diurnal, Markov
from fedclock.scheduling.candidates import ScannedIdleClients
from fedclock.scheduling.clock import Clock, Task, TaskCosts
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode
from fedclock.scheduling.rng import Stream, numpy_rng

AVAILABILITY = ("always", "markov", "diurnal")


def availability_models(kind: str, clients: int) -> list[Availability]:
    """Every client's availability model of the given kind (seeded per client)."""
    if kind == "always":
        return [Always()] * clients
    if kind == "markov":
        return [Markov(1_800.0, 600.0, "stationary", numpy_rng(0, Stream.AVAILABILITY, c)) for c in range(clients)]
    if kind == "diurnal":
        return [Diurnal(86_400.0, 0.5, float(numpy_rng(0, Stream.AVAILABILITY, c).uniform(0.0, 86_400.0)))
                for c in range(clients)]
    raise ValueError(f"--availability: unknown model {kind!r} (allowed: {', '.join(AVAILABILITY)})")


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

    def failed(self, task: Task) -> None:
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


def make_clock(clients: int, mode: SyncMode | AsyncMode, stop: StopConfig, availability: str = "always",
               scan: bool = False) -> tuple[Clock, ZeroCostBackend, CountingRecorder]:
    rng = np.random.default_rng(0)
    compute = rng.lognormal(mean=np.log(100.0), sigma=0.5, size=clients)
    devices = Devices(compute, np.full(clients, 10.0), np.full(clients, 5.0), np.full(clients, 0.05))
    backend, recorder = ZeroCostBackend(), CountingRecorder()
    clock = Clock(devices=devices, availability=availability_models(availability, clients),
                  client_sizes=rng.integers(50, 500, size=clients), costs=TaskCosts(40_000, 40_000, lambda n: 5.0 * n),
                  mode=mode, stop=stop, eval_every=10**9, backend=backend, recorder=recorder, seed=0)
    if scan:  # the clock without its index of idle, available clients
        clock.cohorts.idle = ScannedIdleClients(clock.cohorts.availability, clock.busy)
        clock.busy.watcher = None
    return clock, backend, recorder


def bench(name: str, clients: int, mode: SyncMode | AsyncMode, stop: StopConfig, profile: bool,
          availability: str = "always", scan: bool = False) -> tuple[float, float]:
    """Run one clock; return (events per wall second, events per CPU second)."""
    clock, backend, recorder = make_clock(clients, mode, stop, availability, scan)
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
    print(f"{name} ({availability}{', scan' if scan else ''}): {clients} clients, {backend.started} tasks, "
          f"{events} task events in {wall:.2f} s (CPU {cpu:.2f} s) -> {rate:,.0f} events/s "
          f"(per CPU second {cpu_rate:,.0f}; stopped: {reason}, virtual time {clock.env.now:.0f} s)")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return rate, cpu_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=200_000, help="tasks per mode (about)")
    parser.add_argument("--fraction", type=float, default=0.01, help="sync cohort fraction")
    parser.add_argument("--concurrency", type=int, default=1_000, help="async slots")
    parser.add_argument("--availability", choices=AVAILABILITY, default="always",
                        help="every client's availability model")
    parser.add_argument("--scan", action="store_true", help="scan every client instead of the clock's index")
    parser.add_argument("--modes", nargs="+", choices=("sync", "async"), default=["sync", "async"])
    parser.add_argument("--profile", action="store_true", help="print a cProfile table per mode")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (the best is reported)")
    args = parser.parse_args()
    cohort = max(1, int(args.fraction * args.clients))
    rounds = max(1, args.tasks // cohort)
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        if "sync" in args.modes:
            runs.setdefault("sync", []).append(
                bench("sync", args.clients, SyncMode(cohort_fraction=args.fraction), StopConfig(rounds=rounds),
                      args.profile, args.availability, args.scan))
        if "async" in args.modes:
            runs.setdefault("async", []).append(
                bench("async", args.clients, AsyncMode(type="async", concurrency=args.concurrency),
                      StopConfig(versions=args.tasks), args.profile, args.availability, args.scan))
    best = "best of %d, " % args.repeat if args.repeat > 1 else ""
    print("events_per_s " + "  ".join(f"{m} = {max(r[0] for r in rs):,.0f}" for m, rs in runs.items())
          + f"  ({best}wall time; target >= 200,000)")
    print("events_per_cpu_s " + "  ".join(f"{m} = {max(r[1] for r in rs):,.0f}" for m, rs in runs.items()))


if __name__ == "__main__":
    main()
