"""The flat-array index of a DiurnalClients population answers as the scan of the same
clients' one-object-per-client Diurnal models."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fedclock.scheduling.availability import Always, Diurnal, DiurnalClients, Markov
from fedclock.scheduling.available_index import build_index
from fedclock.scheduling.population import PopulationConfig, population_availability
from fedclock.scheduling.rng import Stream, numpy_rng
from tests.scheduling.availability_cases import MODELS, MODES, run_case
from fedclock.scheduling.fenwick import Fenwick
from fedclock.scheduling.candidates import idle_clients
from fedclock.scheduling.diurnal_index import DiurnalIndex
from fedclock.scheduling.idle import BusyClients


def test_fenwick_from_array_is_the_fenwick_of_the_list() -> None:
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 3, 7, 8, 9, 100, 1000):
        marks = rng.integers(0, 2, n)
        a, b = Fenwick([int(m) for m in marks]), Fenwick.from_array(marks)
        assert list(a.tree) == list(b.tree) and (a.n, a.total, a.top) == (b.n, b.total, b.top)


@pytest.mark.parametrize("on_fraction, integer_phases, infeasible", [
    (0.5, False, False), (0.3, True, False), (0.5, True, True), (1.0, False, False), (0.0, True, False)])
def test_index_matches_the_scan_on_random_operations(on_fraction: float, integer_phases: bool,
                                                     infeasible: bool) -> None:
    rng = np.random.default_rng(3)
    n, period = 60, 10.0
    phases = rng.integers(0, 10, n).astype(float) if integer_phases else rng.uniform(0, period, n)
    clients = DiurnalClients(period, on_fraction, phases)
    if infeasible:
        clients = clients.without(rng.random(n) < 0.3)
    models = [clients[c] for c in range(n)]
    assert all(type(m) is Diurnal for m in models) or infeasible
    busy = BusyClients()
    index = idle_clients(clients, busy, 0.0)
    assert isinstance(index, DiurnalIndex) and busy.watcher is index
    now = 0.0
    for step in range(1_500):
        op = int(rng.integers(4))
        c = int(rng.integers(n))
        if op == 0 and c not in busy:
            busy[c] = step
        elif op == 1:
            busy.pop(c, None)
        elif op == 2:  # often exactly on a change, sometimes a whole period or more
            now += float(rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 2), 10.0, rng.uniform(10, 25)]))
        candidates = [x for x in range(n) if x not in busy and models[x].available(now, 0)]
        assert index.count(now, 0) == len(candidates)
        assert index.at_many(range(len(candidates))) == candidates
        assert index.candidates_array().tolist() == candidates
        everyone = min((m.next_change(now) for m in models), default=math.inf)
        idle = min((models[x].next_change(now) for x in range(n) if x not in busy), default=math.inf)
        assert index.next_change(now) == everyone
        assert index.next_idle_change(now) == idle


def test_state_of_the_arrays_is_the_models_state() -> None:
    rng = np.random.default_rng(4)
    clients = DiurnalClients(86_400.0, 0.5, rng.uniform(0, 86_400.0, 200))
    for t in [0.0, 1.5, 43_200.0, 86_399.999, 86_400.0, 1e6 + 0.25]:
        on, nxt = clients.state(np.arange(200), t)
        assert [(bool(a), float(b)) for a, b in zip(on, nxt)] == [clients[c].state(t) for c in range(200)]


@pytest.mark.parametrize("mode", list(MODES))
def test_a_clock_over_the_arrays_runs_as_over_the_objects(mode: str) -> None:
    MODELS["diurnal_arrays"] = lambda n: DiurnalClients(100.0, 0.3, np.array([float(10 * c % 100) for c in range(n)]))
    try:
        assert run_case("diurnal_arrays", False, mode) == run_case("diurnal", False, mode)
    finally:
        del MODELS["diurnal_arrays"]


def test_population_phases_give_one_array_model_unless_overridden() -> None:
    cfg = PopulationConfig(num_clients=50, availability={"type": "diurnal", "phases": "population", "on_fraction": 0.4})
    whole = population_availability(cfg, seed=3)
    assert isinstance(whole, DiurnalClients) and len(whole) == 50
    assert np.array_equal(whole.phases, numpy_rng(3, Stream.AVAILABILITY).uniform(0.0, 86_400.0, 50))
    cfg = PopulationConfig(num_clients=50, availability={"type": "diurnal", "phases": "population", "on_fraction": 0.4},
                           clients=[{"ids": [4], "availability": {"type": "always"}}])
    models = population_availability(cfg, seed=3)
    assert type(models[4]) is Always
    assert [m.phase_s for c, m in enumerate(models) if c != 4] == [whole[c].phase_s for c in range(50) if c != 4]


def test_the_object_index_gives_its_candidates_as_one_array() -> None:
    rng = np.random.default_rng(5)
    models = [Markov(3.0, 5.0, "stationary", numpy_rng(2, Stream.AVAILABILITY, c)) for c in range(50)]
    index = build_index(models, 0.0)
    busy = BusyClients(index)
    for step in range(200):
        c = int(rng.integers(50))
        if c in busy:
            busy.pop(c)
        else:
            busy[c] = step
        now = step * 0.37
        count = index.count(now, 0)
        assert index.candidates_array().tolist() == index.at_many(range(count))
