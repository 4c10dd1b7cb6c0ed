"""Trace replay (availability and devices) and the diurnal availability model.

The shipped sample traces (scenarios/traces/) are replayed by the shipped scenario
library/scripting/trace_replay, and every dispatch time is checked against a schedule
worked out by hand from the two files (see the comments).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError, load_suite
from fedclock.scheduling.traces import TraceError, read_availability_trace, read_device_trace
from fedclock.scheduling.availability import Diurnal, TraceReplay
from fedclock.scheduling.population import population_availability
from tests.conftest import scenario

ROOT = Path(__file__).resolve().parents[2] / "scenarios"


def test_shipped_traces_replay_exactly(tmp_path: Path) -> None:
    s = load_suite(ROOT / "library" / "scripting" / "trace_replay.yaml").runs[0]
    run_scenario(s, Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    dispatched = {c: list(events[events.client == c].dispatched_at) for c in range(3)}
    # client 0: online [0, 250) and [400, 1000); 1 + 80 + 1 = 82 s per task; from 500 s its
    # download takes 10 s (91 s per task). Dispatched at 246 (< 250), back at 400.
    assert dispatched[0] == [0, 82, 164, 246, 400, 482, 564, 655, 746, 837, 928]
    # client 1: online [100, 700), 82 s per task; the task dispatched at 674 is its last.
    assert dispatched[1] == [100, 182, 264, 346, 428, 510, 592, 674]
    # client 2: always online until 1000; 1 + 40 + 1 = 42 s, compute 4x slower from 300 s (162 s).
    assert dispatched[2] == [0, 42, 84, 126, 168, 210, 252, 294, 336, 498, 660, 822, 984]
    c0, c2 = events[events.client == 0], events[events.client == 2]
    assert list(c0.download_s) == [1.0] * 6 + [10.0] * 5 and (c0.compute_s == 80.0).all()
    assert list(c2.compute_s) == [40.0] * 8 + [160.0] * 5
    timeline = pd.read_parquet(tmp_path / "timeline.parquet")
    assert list(timeline.time) == [300.0, 500.0] and list(timeline.type) == ["device_trace"] * 2
    assert list(timeline.event) == [-1, -1]
    clients = pd.read_parquet(tmp_path / "clients.parquet")
    assert list(clients.compute) == [0.125, 0.125, 0.25]  # initial profiles (time_s = 0 rows)
    reloaded = load_suite(tmp_path / "scenario.resolved.yaml").runs[0]
    assert reloaded.model_dump() == s.model_dump()  # absolute trace paths reload (the plugin folder is the run's)


def test_trace_naming_a_missing_client_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("client,start,end\n0,0,1\n3,0,1\n")
    with pytest.raises(ScenarioError, match=r"population.clients\[0\].availability.path: a.csv names client 3, "
                                            r"which does not exist \(allowed: 0..2\)"):
        scenario(population={"num_clients": 3, "clients": [{"ids": [1], "availability": {"type": "trace",
                                                                                          "path": str(path)}}]})


def test_availability_trace_reader_merges_and_sorts(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("client,start,end\n1,50,60\n0,10,20\n0,15,30\n0,30,40\n0,0,5\n")
    assert read_availability_trace(path) == {0: [(0.0, 5.0), (10.0, 40.0)], 1: [(50.0, 60.0)]}
    pq_path = tmp_path / "a.parquet"
    pd.DataFrame({"client": [3], "start": [1.5], "end": [2.5]}).to_parquet(pq_path)
    assert read_availability_trace(pq_path) == {3: [(1.5, 2.5)]}


def test_trace_replay_model() -> None:
    model = TraceReplay([(0.0, 5.0), (10.0, 40.0)])
    assert [model.available(t, 0) for t in (0, 4.9, 5, 9.9, 10, 39.9, 40, 100)] == \
        [True, True, False, False, True, True, False, False]
    assert [model.next_change(t) for t in (0, 5, 10, 40)] == [5.0, 10.0, 40.0, math.inf]
    empty = TraceReplay([])
    assert not empty.available(0, 0) and empty.next_change(0) == math.inf


def test_trace_missing_clients_offline_or_always(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("client,start,end\n0,0,10\n")
    for missing, expected in (("offline", False), ("always", True)):
        s = scenario(population={"num_clients": 2,
                                 "availability": {"type": "trace", "path": str(path), "missing": missing}})
        models = population_availability(s.population, 0)
        assert models[0].available(5, 0) and not models[0].available(10, 0)
        assert models[1].available(5, 0) is expected


def test_device_trace_reader_keeps_empty_cells(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("client,time_s,compute,up_mbps\n1,5,2.0,\n0,5,,3.0\n0,0,1.0,1.0\n")
    frame = read_device_trace(path)
    assert list(frame.client) == [0, 0, 1] and list(frame.time_s) == [0, 5, 5]
    assert np.isnan(frame.down_mbps).all() and np.isnan(frame.compute[1]) and frame.up_mbps[1] == 3.0
    no_time = tmp_path / "n.csv"
    no_time.write_text("client,compute\n0,4\n")
    assert list(read_device_trace(no_time).time_s) == [0.0]


@pytest.mark.parametrize("text, message", [
    ("client,begin,end\n0,0,1\n", "missing column 'start'"),
    ("client,start,end\n0,5,5\n", "row 1: needs end > start >= 0"),
    ("client,start,end\n0,x,5\n", "column 'start', row 1: not a number"),
    ("client,start,end\n-1,0,5\n", "column 'client' must hold client ids"),
])
def test_bad_availability_trace_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "a.csv"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        scenario(population={"availability": {"type": "trace", "path": str(path)}})
    assert message in str(err.value) and "population.availability.path" in str(err.value)
    with pytest.raises(TraceError):
        read_availability_trace(path)


@pytest.mark.parametrize("text, message", [
    ("client,time_s\n0,0\n", "needs at least one of the columns compute"),
    ("client,compute\n0,0\n", "column 'compute' must be > 0"),
    ("client,time_s,latency_s\n0,-1,0\n", "column 'time_s' must be >= 0"),
    ("client,compute\n12,1\n", "device_trace: d.csv names client 12, which does not exist (allowed: 0..9)"),
])
def test_bad_device_trace_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "d.csv"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        scenario(population={"device_trace": str(path)})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_trace_paths_are_relative_to_the_scenario_file(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "a.csv").write_text("client,start,end\n0,0,10\n")
    body = ("algorithm: {name: fedavg}\nstop: {rounds: 1}\npopulation:\n  num_clients: 1\n"
            "  availability: {type: trace, path: traces/a.csv}\n")
    (tmp_path / "s.yaml").write_text(body)
    s = load_suite(tmp_path / "s.yaml").runs[0]
    assert s.population.availability.path == tmp_path / "traces" / "a.csv"
    (tmp_path / "bad.yaml").write_text(body.replace("traces/a.csv", "traces/nope.csv"))
    with pytest.raises(ScenarioError, match=r"population.availability.path: trace file not found: .*nope.csv"):
        load_suite(tmp_path / "bad.yaml")
    (tmp_path / "fmt.yaml").write_text(body.replace("traces/a.csv", "s.yaml"))
    with pytest.raises(ScenarioError, match=r"unknown trace format '.yaml' \(allowed: .csv, .parquet\)"):
        load_suite(tmp_path / "fmt.yaml")


def test_diurnal_cycle() -> None:
    model = Diurnal(period_s=100.0, on_fraction=0.3, phase_s=20.0)
    assert [model.available(t, 0) for t in (0, 19.9, 20, 49.9, 50, 119.9, 120, 149.9, 150)] == \
        [False, False, True, True, False, False, True, True, False]
    assert [model.next_change(t) for t in (0, 20, 49.9, 50, 120)] == [20.0, 50.0, 50.0, 120.0, 150.0]
    assert Diurnal(10.0, 1.0, 3.0).next_change(5.0) == math.inf
    for t in np.linspace(0, 1000, 997):  # the next change is always later and flips the answer
        nxt = model.next_change(float(t))
        assert nxt > t and model.available(nxt, 0) != model.available(float(t), 0)


def test_diurnal_phases_are_seeded_per_client() -> None:
    s = scenario(population={"num_clients": 50, "availability": {"type": "diurnal", "period_s": 1000}})
    phases = [m.phase_s for m in population_availability(s.population, 7)]
    assert phases == [m.phase_s for m in population_availability(s.population, 7)]
    assert len(set(phases)) == 50 and 0 <= min(phases) and max(phases) < 1000
    online = np.mean([m.available(123.0, 0) for m in population_availability(s.population, 7)])
    assert 0.3 < online < 0.7  # on_fraction 0.5 with random phases


def test_trace_memory_feeds_feasibility(tmp_path: Path) -> None:
    """A device trace's ``memory_gb`` (time-0 rows) is a device's memory: client 0 gets 1 kB,
    less than the MLP's parameters, so it is infeasible and never dispatched (as with a
    device class's memory); the others have no memory figure (not limited). The Parquet
    written with :func:`write_device_trace` records ``GB`` for it. A later row giving memory
    is refused in one line."""
    import pyarrow.parquet as pq

    from fedclock.scheduling.traces import write_device_trace

    frame = pd.DataFrame({"client": [0, 1, 2], "time_s": [0.0, 0.0, 0.0], "compute": [50.0, 50.0, 50.0],
                          "memory_gb": [1e-6, float("nan"), float("nan")]})
    trace = tmp_path / "devices.parquet"
    write_device_trace(frame, trace, "samples_per_s")
    assert pq.read_schema(trace).metadata[b"fedclock.memory_unit"] == b"GB"
    s = scenario(population={"num_clients": 3, "device_trace": str(trace)}, stop={"rounds": 2})
    run_scenario(s, Runtime("inline"), tmp_path / "out")
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    clients = pd.read_parquet(tmp_path / "out" / "clients.parquet")
    assert set(events.client) == {1, 2} and list(clients.feasible) == [False, True, True]
    assert clients.memory_gb[0] == 1e-6
    later = tmp_path / "later.csv"
    later.write_text("client,time_s,memory_gb\n0,0,4\n0,10,2\n")
    with pytest.raises(TraceError, match="row 2: column 'memory_gb' is read at time_s 0 only"):
        read_device_trace(later)
