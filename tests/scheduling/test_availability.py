"""Availability models: round-driven periodic schedule and the lazily drawn Markov on/off process."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedclock.scheduling.availability import Always, Markov, Periodic
from fedclock.scheduling.availability_config import (AvailabilityModel, TraceFiles, AlwaysAvailable, MarkovOnOff,
                                                     PeriodicMissing)
from fedclock.scheduling.population import population_availability, PopulationConfig
from fedclock.scheduling.rng import Stream, numpy_rng


def _markov(seed: int = 0, up: float = 3.0, down: float = 1.0, start: str = "stationary", key: int = 0) -> Markov:
    return Markov(up, down, start, numpy_rng(seed, Stream.AVAILABILITY, key))


# --------------------------------------------------------------------------- always / periodic
def test_always() -> None:
    a = Always()
    assert all(a.available(t, r) for t, r in ((0.0, 0), (1e9, 10**6), (3.5, 7)))
    assert a.next_change(0.0) == math.inf


@pytest.mark.parametrize("period", [1, 2, 3, 7])
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_periodic_once_in_every_period_plus_one_rounds(period: int, offset: int) -> None:
    p = Periodic(period, offset)
    avail = [p.available(0.0, r) for r in range(60)]
    for start in range(60 - period):
        assert sum(avail[start:start + period + 1]) == 1
    on = [r for r, a in enumerate(avail) if a]
    assert all(b - a == period + 1 for a, b in zip(on, on[1:]))
    assert p.next_change(12.0) == math.inf


def test_periodic_offset_shifts_schedule() -> None:
    assert [r for r in range(12) if Periodic(3, 0).available(0.0, r)] == [0, 4, 8]
    assert [r for r in range(12) if Periodic(3, 1).available(0.0, r)] == [3, 7, 11]
    assert [r for r in range(12) if Periodic(3, 2).available(0.0, r)] == [2, 6, 10]
    for offset in range(6):
        base, shifted = Periodic(2, 0), Periodic(2, offset)
        for r in range(20):
            assert shifted.available(0.0, r) == base.available(0.0, r + offset)


def test_periodic_ignores_time() -> None:
    p = Periodic(2)
    assert all(p.available(t, 3) for t in (0.0, 1.0, 1e6))
    assert not any(p.available(t, 4) for t in (0.0, 1.0, 1e6))


# --------------------------------------------------------------------------- markov
GRID = np.arange(0.0, 200.0, 0.05)


def _trace(m: Markov, times: np.ndarray) -> list[bool]:
    return [m.available(float(t), 0) for t in times]


def test_markov_deterministic_for_a_seed() -> None:
    assert _trace(_markov(4), GRID) == _trace(_markov(4), GRID)
    assert _trace(_markov(4), GRID) != _trace(_markov(5), GRID)
    assert _trace(_markov(4, key=1), GRID) != _trace(_markov(4, key=2), GRID)


def test_markov_ignores_round_index() -> None:
    m = _markov(1)
    for t in GRID[::50]:
        assert m.available(float(t), 0) == m.available(float(t), 17)


@pytest.mark.parametrize("start,expected", [("up", True), ("down", False)])
def test_markov_start_state_honoured(start: str, expected: bool) -> None:
    for seed in range(20):
        m = _markov(seed, start=start)
        assert m.available(0.0, 0) is expected
        assert m.next_change(0.0) > 0.0


def test_markov_stationary_start_fraction() -> None:
    ups = [_markov(0, up=3.0, down=1.0, key=c).available(0.0, 0) for c in range(3000)]
    assert np.mean(ups) == pytest.approx(0.75, abs=0.03)


def test_markov_next_change_is_first_flip() -> None:
    m = _markov(7, up=2.0, down=1.0)
    t = 0.0
    flips = 0
    while t < 100.0:
        state = m.available(t, 0)
        nc = m.next_change(t)
        assert nc > t
        # constant on [t, nc), flipped at nc
        for s in np.linspace(t, nc, 9, endpoint=False):
            assert m.available(float(s), 0) == state
        assert m.available(math.nextafter(nc, -math.inf), 0) == state
        assert m.available(nc, 0) != state
        assert m.available(nc + 1e-9, 0) != state or m.next_change(nc) <= nc + 1e-9
        # asking from inside the interval gives the same next change
        assert m.next_change((t + nc) / 2) == nc
        t = nc
        flips += 1
    assert flips > 20


def test_markov_long_run_up_fraction() -> None:
    for up, down in ((3.0, 1.0), (1.0, 4.0)):
        m = _markov(2, up=up, down=down)
        times = np.arange(0.0, 20_000.0, 0.25)
        frac = np.mean(_trace(m, times))
        assert frac == pytest.approx(up / (up + down), abs=0.03)


def test_markov_mean_durations() -> None:
    m = _markov(3, up=3.0, down=1.0, start="up")
    t, ups, downs = 0.0, [], []
    while t < 20_000.0:
        state = m.available(t, 0)
        nc = m.next_change(t)
        (ups if state else downs).append(nc - t)
        t = nc
    assert np.mean(ups) == pytest.approx(3.0, rel=0.08)
    assert np.mean(downs) == pytest.approx(1.0, rel=0.08)


def test_markov_queries_out_of_order_are_consistent() -> None:
    forward = _trace(_markov(9), GRID)
    m = _markov(9)
    assert isinstance(m.available(500.0, 0), bool)  # jump far ahead first
    backward = [m.available(float(t), 0) for t in GRID[::-1]][::-1]
    assert backward == forward
    shuffled = _markov(9)
    order = np.random.default_rng(0).permutation(len(GRID))
    answers = {int(i): shuffled.available(float(GRID[i]), 0) for i in order}
    assert [answers[i] for i in range(len(GRID))] == forward
    # next_change also agrees whatever was asked before
    a, b = _markov(9), _markov(9)
    b.next_change(1000.0)
    for t in GRID[::37][::-1]:
        assert a.next_change(float(t)) == b.next_change(float(t))


# --------------------------------------------------------------------------- factories
def make_availability(cfg: AvailabilityModel, seed: int, client: int) -> Any:
    return cfg.build(seed, client, TraceFiles())


def test_each_config_builds_its_model() -> None:
    assert isinstance(make_availability(AlwaysAvailable(), 0, 0), Always)
    p = make_availability(PeriodicMissing(type="periodic_missing", period=2, offset=1), 0, 3)
    assert isinstance(p, Periodic) and (p.period, p.offset) == (2, 1)
    cfg = MarkovOnOff(type="markov", mean_up_s=3.0, mean_down_s=1.0, start="down")
    m = make_availability(cfg, 5, 3)
    assert isinstance(m, Markov) and m.available(0.0, 0) is False
    assert _trace(m, GRID) == _trace(make_availability(cfg, 5, 3), GRID)
    assert _trace(m, GRID) == _trace(Markov(3.0, 1.0, "down", numpy_rng(5, Stream.AVAILABILITY, 3)), GRID)
    assert _trace(m, GRID) != _trace(make_availability(cfg, 5, 4), GRID)


def test_population_availability_default_always_is_shared() -> None:
    out = population_availability(PopulationConfig(num_clients=6), seed=0)
    assert len(out) == 6
    assert all(isinstance(a, Always) for a in out)
    assert all(a is out[0] for a in out)


def test_population_availability_overrides() -> None:
    pop = PopulationConfig.model_validate({
        "num_clients": 6,
        "availability": {"type": "markov", "mean_up_s": 2.0, "mean_down_s": 2.0},
        "clients": [
            {"ids": [1, 3], "availability": {"type": "always"}},
            {"ids": [4], "availability": {"type": "periodic_missing", "period": 3, "offset": 2}},
            {"ids": [5], "compute": 9.0},  # no availability: keeps the default
        ],
    })
    out = population_availability(pop, seed=8)
    assert [type(a).__name__ for a in out] == ["Markov", "Always", "Markov", "Always", "Periodic", "Markov"]
    assert out[1] is out[3]
    assert (out[4].period, out[4].offset) == (3, 2)
    # each Markov client has its own seeded process, the same one make_availability builds
    for cid in (0, 2, 5):
        assert _trace(out[cid], GRID) == _trace(make_availability(pop.availability, 8, cid), GRID)
    assert _trace(out[0], GRID) != _trace(out[2], GRID)


def test_population_availability_later_override_wins() -> None:
    pop = PopulationConfig.model_validate({
        "num_clients": 3,
        "availability": {"type": "periodic_missing", "period": 1},
        "clients": [{"ids": [0, 1], "availability": {"type": "always"}},
                    {"ids": [1], "availability": {"type": "periodic_missing", "period": 4}}],
    })
    out = population_availability(pop, seed=0)
    assert isinstance(out[0], Always)
    assert isinstance(out[1], Periodic) and out[1].period == 4
    assert isinstance(out[2], Periodic) and out[2].period == 1
