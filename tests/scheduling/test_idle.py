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
