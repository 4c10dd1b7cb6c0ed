"""BusyClients: idle clients by rank agree with the naive scan of the population."""
from __future__ import annotations

import numpy as np
import pytest

from fedclock.scheduling.idle import BusyClients


def test_idle_by_rank_matches_the_naive_scan_on_random_operations() -> None:
    rng = np.random.default_rng(3)
    n = 60
    busy = BusyClients()
    naive: dict[int, int] = {}
    for step in range(2_000):
        c = int(rng.integers(n))
        op = rng.integers(4)
        if op == 0:
            busy[c] = naive[c] = step
        elif op == 1:
            assert busy.pop(c, None) == naive.pop(c, None)
        elif op == 2 and c in naive:
            del busy[c], naive[c]
        elif op == 3 and rng.random() < 0.01:
            busy.clear(), naive.clear()
        idle = [x for x in range(n) if x not in naive]
        assert dict(busy) == naive
        assert busy.idle_count(n) == len(idle)
        assert busy.idle_at_many(range(len(idle))) == idle
    with pytest.raises(KeyError):
        BusyClients().pop(5)


def test_idle_by_rank_with_clusters_of_busy_clients() -> None:
    """Long runs of busy ids (where the climb of idle_at falls back to its binary search)."""
    n = 400
    busy = BusyClients()
    for start, length in ((0, 50), (60, 3), (100, 120), (250, 1), (252, 1), (300, 99)):
        for c in range(start, start + length):
            busy[c] = c
    idle = [c for c in range(n) if c not in busy]
    assert busy.idle_at_many(range(len(idle))) == idle


class _AlsoAlways:
    """Always available, but not the ``Always`` class: the clock scans the population."""

    def available(self, now: float, round_index: int) -> bool:
        return True

    def next_change(self, now: float) -> float:
        return float("inf")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_rank_lookup_draws_the_same_clients_as_the_scan(mode: str) -> None:
    from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode
    from fedclock.scheduling.availability import Always
    from fedclock.scheduling.clock import Clock, TaskCosts
    from fedclock.scheduling.devices import Devices
    from tests.scheduling.test_heterogeneity import FakeBackend, FakeRecorder

    n = 40
    rng = np.random.default_rng(1)
    devices = Devices(rng.uniform(1.0, 10.0, n), np.full(n, 1e6), np.full(n, 1e6), np.zeros(n))
    sched = SyncMode(cohort_size=7) if mode == "sync" else AsyncMode(type="async", concurrency=5)
    stop = StopConfig(rounds=6) if mode == "sync" else StopConfig(versions=40)

    def dispatched(availability: list) -> list[tuple[int, float]]:  # type: ignore[type-arg]
        recorder = FakeRecorder()
        clock = Clock(devices=devices, availability=availability, client_sizes=np.full(n, 10),
                      costs=TaskCosts(0, 0, lambda k: 20.0), mode=sched, stop=stop, eval_every=1000,
                      backend=FakeBackend(), recorder=recorder, seed=4)
        clock.run()
        return sorted((t.index, t.client, t.dispatched_at) for t in recorder.ended)

    fast = dispatched([Always()] * n)
    assert fast == dispatched([_AlsoAlways() for _ in range(n)])
    assert len({c for _, c, _ in fast}) > 7
