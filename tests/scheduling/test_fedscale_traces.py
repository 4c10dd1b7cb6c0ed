"""FedScale's device files read as published (:mod:`fedclock.scheduling.fedscale_traces`):
capacities and behaviour against hand numbers, a run driven by them, their conversion to
fedclock's Parquet traces, and a malicious pickle refused before it runs."""
from __future__ import annotations

import math
import os
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scheduling.availability import RepeatingTrace
from fedclock.scheduling.fedscale_traces import TRAIN_FACTOR
from fedclock.scheduling.traces import TraceError, check_trace_file, read_device_trace, read_fedscale_availability
from tests.conftest import scenario

CAPACITY = {2: {"computation": 100.0, "communication": 500.0},   # keys out of order: read in ascending order
            1: {"computation": 500.0, "communication": 2000.0}}
BEHAVIOR = {1: {"active": [0, 100], "inactive": [50, 200], "finish_time": 300, "duration": 200, "model": "x"},
            2: {"active": [250, 0], "inactive": [300, 50], "finish_time": 300, "duration": 100, "model": "y"}}


def write(path: Path, data: Any) -> Path:
    path.write_bytes(pickle.dumps(data, protocol=4))
    return path


def test_capacity_entries_become_devices_in_key_order_cycling(tmp_path: Path) -> None:
    """compute = 1000 / (3 * ms) training samples/s; kbit/s / 1000 = Mbit/s both ways."""
    trace = read_device_trace(write(tmp_path / "client_device_capacity", CAPACITY), 3)
    assert trace.client.tolist() == [0, 1, 2] and set(trace.time_s) == {0.0}
    assert trace.compute.tolist() == [1000 / 1500, 1000 / 300, 1000 / 1500] and TRAIN_FACTOR == 3.0
    assert trace.down_mbps.tolist() == [2.0, 0.5, 2.0] == trace.up_mbps.tolist()
    assert trace.latency_s.isna().all()  # not in the file: the population's latency stays


def test_behavior_repeats_every_finish_time(tmp_path: Path) -> None:
    entries = read_fedscale_availability(write(tmp_path / "client_behave_trace", BEHAVIOR))
    assert entries == [([(0.0, 50.0), (100.0, 200.0)], 300.0), ([(0.0, 50.0), (250.0, 300.0)], 300.0)]
    first, second = RepeatingTrace(*entries[0]), RepeatingTrace(*entries[1])
    assert first.state(10) == (True, 50) and first.state(60) == (False, 100) and first.state(250) == (False, 300)
    assert first.state(310) == (True, 350) and first.available(3 * 300 + 150, 0)
    assert second.state(260) == (True, 350)  # [250, 300) and the next period's [0, 50) are one stretch
    assert second.state(100) == (False, 250)
    assert RepeatingTrace([(0.0, 300.0)], 300.0).state(1e6) == (True, math.inf)


class Payload:
    """Unpickling it would run a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return os.system, (f"touch {self.marker}",)


def test_a_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    evil = write(tmp_path / "client_device_capacity", {1: {"computation": Payload(marker), "communication": 1.0}})
    with pytest.raises(TraceError, match="not a plain-data pickle"):
        check_trace_file(evil, "devices")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: evil\nalgorithm: {name: fedavg}\nstop: {rounds: 1}\n"
                    f"population: {{num_clients: 2, device_trace: {evil}}}\n")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(evil) in err and "refuses posix.system" in err
    assert main(["traces", "convert", str(evil), str(tmp_path / "out.parquet")]) == 2
    assert str(evil) in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("data, message", [
    ([1, 2], "expected a FedScale client_device_capacity file (entries with computation, communication), got neither"),
    ({1: {"computation": -1.0, "communication": 5.0}}, "entry 1: computation (ms per sample) and communication"),
    ({1: {"active": [0], "inactive": [5], "finish_time": 10}}, "expected a FedScale client_device_capacity file"),
])
def test_bad_capacity_files_are_one_line_errors(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(TraceError) as err:
        check_trace_file(write(tmp_path / "cap", data), "devices")
    assert message in str(err.value) and str(tmp_path / "cap") in str(err.value)


def test_bad_behavior_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="entry 1: active and inactive must be lists of numbers of equal length"):
        check_trace_file(write(tmp_path / "beh", {1: {"active": [0, 1], "inactive": [5], "finish_time": 10}}),
                         "availability")


FEDSCALE_RUN = dict(
    population={"num_clients": 3, "devices": {"latency_s": 0.0}},
    algorithm={"name": "fedasync", "lr": 0.1, "batch_size": 10, "local_steps": 1, "alpha": 0.6},
    mode={"type": "async", "concurrency": 3}, stop={"virtual_time_s": 400}, evaluation={"every": 100},
)


def fedscale_run(tmp_path: Path, capacity: Path, behavior: Path, out: str) -> pd.DataFrame:
    pop = {**FEDSCALE_RUN["population"], "device_trace": str(capacity),
           "availability": {"type": "trace", "path": str(behavior)}}
    run_scenario(scenario(**{**FEDSCALE_RUN, "population": pop}), Runtime("inline"), tmp_path / out)
    return pd.read_parquet(tmp_path / out / "events.parquet")


def test_fedscale_files_drive_a_run_and_convert_to_the_same_parquet_run(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Client 0 and 2 take capacity entry 1 (10 samples x 3 x 500 ms = 15 s of compute per
    task), client 1 entry 2 (3 s); client 1 follows behaviour entry 2, so it is dispatched
    only in [0, 50) and [250, 350) of each 300 s period. The converted Parquet traces (over
    the run's 400 s) give the same events."""
    capacity = write(tmp_path / "client_device_capacity", CAPACITY)
    behavior = write(tmp_path / "client_behave_trace", BEHAVIOR)
    events = fedscale_run(tmp_path, capacity, behavior, "pickles")
    compute = events.groupby("client").compute_s.unique()
    assert [list(compute[c]) for c in (0, 1, 2)] == [[pytest.approx(15.0)], [pytest.approx(3.0)], [pytest.approx(15.0)]]
    one = events[events.client == 1].dispatched_at % 300
    assert len(one) > 10 and ((one < 50) | (one >= 250)).all() and (one >= 250).any()
    assert main(["traces", "convert", str(capacity), str(tmp_path / "devices.parquet"), "--clients", "3"]) == 0
    assert main(["traces", "convert", str(behavior), str(tmp_path / "avail.parquet"), "--clients", "3",
                 "--until-s", "1000"]) == 0
    assert "availability trace, 3 clients" in capsys.readouterr().out
    converted = fedscale_run(tmp_path, tmp_path / "devices.parquet", tmp_path / "avail.parquet", "parquet")
    pd.testing.assert_frame_equal(events, converted, check_exact=True)


SHIPPED = Path(__file__).resolve().parents[2] / "scenarios"


def test_shipped_fedscale_sample_and_its_replay(tmp_path: Path) -> None:
    """library/scripting/fedscale_replay (first 1000 s): the files hold what its header says;
    compute 15 / 60 / 6 s per task by entry; clients 1 and 4 are dispatched only in [0, 300)
    and [600, 900) of each 1000 s, clients 2 and 5 only in [200, 700)."""
    from fedclock.scheduling.fedscale_traces import load_plain
    from fedclock.scenarios.loader import load_suite

    assert load_plain(SHIPPED / "traces" / "fedscale" / "client_device_capacity") == {
        1: {"computation": 500.0, "communication": 8000.0}, 2: {"computation": 2000.0, "communication": 2000.0},
        3: {"computation": 200.0, "communication": 20000.0}}
    assert load_plain(SHIPPED / "traces" / "fedscale" / "client_behave_trace") == {
        1: {"active": [0], "inactive": [1000], "finish_time": 1000},
        2: {"active": [0, 600], "inactive": [300, 900], "finish_time": 1000},
        3: {"active": [200], "inactive": [700], "finish_time": 1000}}
    run = load_suite(SHIPPED / "library" / "scripting" / "fedscale_replay.yaml", ["stop.virtual_time_s=1000"]).runs[0]
    run_scenario(run, Runtime("inline"), tmp_path / "out")
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    for client, seconds in enumerate([15.0, 60.0, 6.0, 15.0, 60.0, 6.0]):
        assert events[events.client == client].compute_s.round(9).unique().tolist() == [seconds]
    at = {c: events[events.client == c].dispatched_at % 1000 for c in range(6)}  # the trace repeats
    for c in (1, 4):
        assert len(at[c]) and (((at[c] >= 0) & (at[c] < 300)) | ((at[c] >= 600) & (at[c] < 900))).all()
    for c in (2, 5):
        assert len(at[c]) and ((at[c] >= 200) & (at[c] < 700)).all()


def test_a_fedscale_device_file_needs_the_samples_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """FedScale's computation is per sample: with the default GFLOP/s unit the file is refused
    in one line naming the field and the allowed unit; with samples_per_s it validates."""
    capacity = write(tmp_path / "client_device_capacity", CAPACITY)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: unit\nalgorithm: {name: fedavg}\nstop: {rounds: 1}\n"
                    f"population: {{num_clients: 2, device_trace: {capacity}}}\n")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device_trace" in err and "compute_unit: samples_per_s" in err
    spec.write_text(spec.read_text().replace("{num_clients: 2,", "{num_clients: 2, compute_unit: samples_per_s,"))
    assert main(["validate", str(spec)]) == 0


def test_a_converted_trace_records_its_unit_and_a_contradicting_scenario_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``traces convert`` writes ``fedclock.compute_unit: samples_per_s`` into the Parquet's
    schema metadata (no memory column, so no memory unit); a scenario reading it with the
    default gflops is one line naming the field and the recorded unit; samples_per_s validates."""
    import pyarrow.parquet as pq

    from fedclock.scheduling.traces import recorded_compute_unit

    capacity = write(tmp_path / "client_device_capacity", CAPACITY)
    converted = tmp_path / "devices.parquet"
    assert main(["traces", "convert", str(capacity), str(converted), "--clients", "2"]) == 0
    assert "samples_per_s" in capsys.readouterr().out
    metadata = pq.read_schema(converted).metadata
    assert metadata[b"fedclock.compute_unit"] == b"samples_per_s" and b"fedclock.memory_unit" not in metadata
    assert recorded_compute_unit(converted) == "samples_per_s"
    spec = tmp_path / "s.yaml"
    spec.write_text("name: unit\nalgorithm: {name: fedavg}\nstop: {rounds: 1}\n"
                    f"population: {{num_clients: 2, device_trace: {converted}}}\n")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device_trace" in err and "records compute in samples_per_s" in err, err
    spec.write_text(spec.read_text().replace("{num_clients: 2,", "{num_clients: 2, compute_unit: samples_per_s,"))
    assert main(["validate", str(spec)]) == 0
