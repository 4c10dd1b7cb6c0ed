"""Result files: atomic Parquet tables, the resolved scenario, and flush throttling."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from fedclock.scenarios.loader import parse_suite
from fedclock.scenarios.results import (CLIENTS_SCHEMA, EVENTS_SCHEMA, METRICS_SCHEMA, ResultsWriter, Table,
                                        read_rows, resolved_dict)
from fedclock.scenarios.schema import Scenario
from fedclock.scheduling.clock import APPLIED, DROPPED, UNFINISHED, Task
from fedclock.scheduling.devices import TaskTiming

SMALL = {"name": "t", "dataset": {"name": "digits"}, "population": {"num_clients": 3},
         "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1}}


def _scenario(data: dict[str, Any] = SMALL) -> Scenario:
    return parse_suite(data, "x").runs[0]


def _task(index: int, status: str = APPLIED, client: int = 0, staleness: int | None = 0,
          loss: float | None = 0.5) -> Task:
    timing = TaskTiming(download_s=1.0, compute_s=2.0, upload_s=0.5)
    task = Task(index=index, client=client, client_task=index, round=index, version=index,
                dispatched_at=10.0 * index, timing=timing, bytes_down=1000, bytes_up=400, num_samples=32)
    task.status, task.staleness, task.ended_at = status, staleness, 10.0 * index + timing.total_s
    task.version_applied = index + 1 if status == APPLIED else None
    task.metrics = {} if loss is None else {"train_loss": loss}
    return task


def _no_tmp(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- Table
def test_table_flush_writes_schema_and_nullable_ints(tmp_path: Path) -> None:
    table = Table(tmp_path / "events.parquet", EVENTS_SCHEMA)
    table.append({"task": 0, "client": 3, "staleness": 2, "version_applied": 5, "train_loss": 0.25,
                  "status": "applied", "dispatched_at": 1.5})
    table.append({"task": 1, "client": 4, "staleness": None, "version_applied": None, "train_loss": None,
                  "status": "dropped"})
    assert len(table) == 2
    table.flush()
    _no_tmp(tmp_path)
    assert pq.read_schema(tmp_path / "events.parquet").equals(EVENTS_SCHEMA)
    df = pd.read_parquet(tmp_path / "events.parquet")
    assert list(df.columns) == EVENTS_SCHEMA.names
    assert df["task"].dtype == "int64" and df["client"].tolist() == [3, 4]
    assert df["train_loss"].iloc[0] == 0.25 and pd.isna(df["train_loss"].iloc[1])
    assert df["status"].tolist() == ["applied", "dropped"]
    nullable = pd.read_parquet(tmp_path / "events.parquet", dtype_backend="numpy_nullable")
    assert str(nullable["staleness"].dtype) == "Int64"
    assert nullable["staleness"].iloc[0] == 2 and nullable["staleness"].iloc[1] is pd.NA
    assert nullable["version_applied"].isna().tolist() == [False, True]
    assert nullable["bytes_down"].isna().all()  # missing keys are nulls
    assert str(nullable["dispatched_at"].dtype) == "Float64"


@pytest.mark.parametrize("schema", [EVENTS_SCHEMA, METRICS_SCHEMA, CLIENTS_SCHEMA])
def test_empty_table_is_a_valid_file(tmp_path: Path, schema: pa.Schema) -> None:
    table = Table(tmp_path / "t.parquet", schema)
    assert len(table) == 0
    table.flush()
    read = pq.read_table(tmp_path / "t.parquet")
    assert read.num_rows == 0 and read.schema.equals(schema)
    assert list(pd.read_parquet(tmp_path / "t.parquet").columns) == schema.names


def test_file_complete_after_each_flush(tmp_path: Path) -> None:
    path = tmp_path / "metrics.parquet"
    table = Table(path, METRICS_SCHEMA)
    inodes = set()
    for i in range(5):
        table.append({"virtual_time": float(i), "wall_time": 0.1 * i, "version": i, "round": i,
                      "global_accuracy": None if i == 0 else 0.1 * i, "tasks_applied": i, "tasks_dropped": 0,
                      "bytes_total": 100 * i})
        table.flush()
        inodes.add(os.stat(path).st_ino)
        df = pd.read_parquet(path)
        assert len(df) == i + 1
        assert df["version"].tolist() == list(range(i + 1))
        assert df["bytes_total"].tolist() == [100 * k for k in range(i + 1)]
        _no_tmp(tmp_path)
        # rows appended but not flushed are not on disk yet
        table.append({"version": 99})
        assert len(pd.read_parquet(path)) == i + 1
        table.columns = {k: v[:-1] for k, v in table.columns.items()}
    assert len(inodes) > 1  # rewritten by rename, not in place


def test_flush_without_changes_does_not_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "e.parquet"
    table = Table(path, EVENTS_SCHEMA)
    table.append({"task": 1})
    table.flush()
    before = os.stat(path)
    table.flush()
    after = os.stat(path)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_failed_flush_keeps_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "e.parquet"
    table = Table(path, EVENTS_SCHEMA)
    table.append({"task": 1})
    table.flush()
    table.append({"task": "not a number"})
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        table.flush()
    assert pd.read_parquet(path)["task"].tolist() == [1]
    _no_tmp(tmp_path)


def test_replace_then_flush(tmp_path: Path) -> None:
    table = Table(tmp_path / "c.parquet", CLIENTS_SCHEMA)
    cols = {name: [None, None] for name in CLIENTS_SCHEMA.names}
    cols.update(client=[0, 1], compute=[1.5, 2.5], availability=["always", "markov"], tasks=[3, 0])
    table.replace(cols)
    table.flush()
    df = pd.read_parquet(tmp_path / "c.parquet")
    assert df["client"].tolist() == [0, 1] and df["compute"].tolist() == [1.5, 2.5]
    assert df["availability"].tolist() == ["always", "markov"]


# --------------------------------------------------------------------------- resolved scenario
def test_resolved_yaml_round_trips_small(tmp_path: Path) -> None:
    scenario = _scenario()
    ResultsWriter(tmp_path, scenario, flush_every_s=0.0)
    text = (tmp_path / "scenario.resolved.yaml").read_text(encoding="utf-8")
    again = parse_suite(yaml.safe_load(text), "x").runs[0]
    assert again == scenario
    assert yaml.safe_load(text)["algorithm"]["name"] == "fedavg"
    assert "lr" in yaml.safe_load(text)["algorithm"]  # defaults filled in, beside the name


def test_resolved_yaml_round_trips_rich(tmp_path: Path) -> None:
    data = {
        "name": "rich", "description": "all the trimmings", "seed": 2**40 + 3,
        "dataset": {"name": "digits", "root": str(tmp_path / "data"),
                    "partition": {"type": "dirichlet_by_class", "alpha": 0.3}},
        "model": {"name": "mlp", "hidden": [16, 8]},
        "population": {"num_clients": 5,
                       "devices": {"compute": {"dist": "lognormal", "median": 50, "sigma": 0.5},
                                   "down_mbps": {"dist": "choice", "values": [1, 10], "weights": [1, 2]},
                                   "up_mbps": {"dist": "loguniform", "low": 1, "high": 5},
                                   "latency_s": {"dist": "uniform", "low": 0.0001, "high": 0.1}},
                       "availability": {"type": "markov", "mean_up_s": 30, "mean_down_s": 10},
                       "clients": [{"ids": [0, 2], "compute": 7},
                                   {"ids": [4], "availability": {"type": "periodic_missing", "period": 2}}]},
        "algorithm": {"name": "fedavg", "lr": 0.1, "local_epochs": 2},
        "mode": {"type": "sync", "cohort_size": 2, "deadline_s": 30, "late_results": "include"},
        "stop": {"rounds": 4, "virtual_time_s": 1000},
        "output": {"dir": str(tmp_path / "out"), "flush_every_s": 0},
    }
    scenario = _scenario(data)
    assert resolved_dict(scenario)["algorithm"]["lr"] == 0.1
    ResultsWriter(tmp_path / "o", scenario, flush_every_s=0.0)
    text = (tmp_path / "o" / "scenario.resolved.yaml").read_text(encoding="utf-8")
    assert parse_suite(yaml.safe_load(text), "x").runs[0] == scenario


# --------------------------------------------------------------------------- ResultsWriter
def _rows(path: Path) -> int:
    return pq.read_table(path).num_rows


def test_writer_creates_all_files_at_start(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "run"
    ResultsWriter(out, _scenario(), flush_every_s=3600.0)
    for name in ("events.parquet", "metrics.parquet", "clients.parquet"):
        assert _rows(out / name) == 0
    assert (out / "scenario.resolved.yaml").is_file()
    _no_tmp(out)


def test_writer_throttles_flushes(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, _scenario(), flush_every_s=3600.0)
    w.task_ended(_task(0))
    w.task_ended(_task(1, DROPPED))
    w.evaluated(5.0, 1, 1, {"global_accuracy": 0.5, "global_loss": 1.0})
    assert _rows(tmp_path / "events.parquet") == 0
    assert _rows(tmp_path / "metrics.parquet") == 0
    w.flush()
    assert _rows(tmp_path / "events.parquet") == 2
    assert _rows(tmp_path / "metrics.parquet") == 1
    _no_tmp(tmp_path)


def test_writer_flush_every_zero_writes_immediately(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, _scenario(), flush_every_s=0.0)
    for i in range(3):
        w.task_ended(_task(i))
        w.task_ended(_task(10 + i))  # task ends are written at the clock's next progress report, together
        assert _rows(tmp_path / "events.parquet") == 2 * i
        w.progress(float(i), i, 0)
        assert _rows(tmp_path / "events.parquet") == 2 * i + 2
        assert _rows(tmp_path / "metrics.parquet") == i
        w.evaluated(float(i), i, i, {"global_accuracy": 0.1})
        assert _rows(tmp_path / "metrics.parquet") == i + 1
    _no_tmp(tmp_path)


def test_writer_event_rows_and_totals(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, _scenario(), flush_every_s=0.0)
    w.task_ended(_task(0, APPLIED, client=2, staleness=3))
    w.task_ended(_task(1, DROPPED, client=1, staleness=4, loss=None))
    w.task_ended(_task(2, UNFINISHED, client=0, staleness=None, loss=None))
    w.evaluated(42.0, 7, 2, {"global_accuracy": 0.9, "global_loss": 0.2, "extra_key": 1})
    ev = pd.read_parquet(tmp_path / "events.parquet", dtype_backend="numpy_nullable")
    assert ev["client"].tolist() == [2, 1, 0]
    assert ev["status"].tolist() == [APPLIED, DROPPED, UNFINISHED]
    assert ev["staleness"].iloc[0] == 3 and ev["staleness"].iloc[1:].isna().all()  # only applied tasks
    assert ev["version_applied"].tolist()[0] == 1 and ev["version_applied"].iloc[1:].isna().all()
    assert ev["bytes_up"].tolist() == [400, 400, 0]  # unfinished tasks never uploaded
    assert ev["bytes_down"].tolist() == [1000, 1000, 1000]
    assert ev["comm_s"].tolist() == [1.5, 1.5, 1.5]
    assert ev["finished_at"].tolist() == [3.5, 13.5, 23.5]
    assert ev["train_loss"].iloc[0] == 0.5 and ev["train_loss"].iloc[1:].isna().all()
    assert (w.totals.applied, w.totals.dropped, w.totals.unfinished) == (1, 1, 1)
    assert w.totals.staleness_sum == 3
    assert w.totals.bytes_total == 1400 + 1400 + 1000
    m = pd.read_parquet(tmp_path / "metrics.parquet", dtype_backend="numpy_nullable")
    assert list(m.columns) == METRICS_SCHEMA.names + ["extra_key"]  # an unknown key is an open float column
    row = m.iloc[0]
    assert row["extra_key"] == 1.0
    assert (row["virtual_time"], row["version"], row["round"]) == (42.0, 7, 2)
    assert (row["tasks_applied"], row["tasks_dropped"], row["bytes_total"]) == (1, 1, 3800)
    assert row["global_accuracy"] == 0.9 and row["personal_accuracy_mean"] is pd.NA
    assert row["wall_time"] >= 0
    assert w.last_accuracy == 0.9
    cols = w.client_columns()
    assert cols["client"].tolist() == [2, 1, 0]
    assert cols["busy"].tolist() == [3.5, 3.5, 3.5]


def test_writer_progress_callback(tmp_path: Path) -> None:
    seen = []
    w = ResultsWriter(tmp_path, _scenario(), flush_every_s=3600.0, on_progress=lambda *a: seen.append(a))
    w.progress(1.0, 0, 2)
    w.evaluated(2.0, 1, 1, {"global_accuracy": 0.4})
    w.progress(3.0, 1, 1)
    assert seen == [(1.0, 0, 2, None), (3.0, 1, 1, 0.4)]


def test_writer_clients_table(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, _scenario(), flush_every_s=3600.0)
    cols = {name: [1, 2, 3] for name in CLIENTS_SCHEMA.names}
    cols["availability"] = ["always"] * 3
    cols["device_class"] = ["custom"] * 3
    cols["tags"] = [[], ["phone"], []]
    cols["feasible"] = [True, False, True]
    w.write_clients(cols)
    assert _rows(tmp_path / "clients.parquet") == 0
    w.flush()
    df = pd.read_parquet(tmp_path / "clients.parquet")
    assert df["client"].tolist() == [1, 2, 3] and df["compute"].dtype == "float64"


def test_task_ends_before_one_progress_report_share_one_part_file(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, _scenario(), flush_every_s=1000.0)
    for i in range(5):  # a sync round's cohort arrives
        w.task_ended(_task(i))
    assert not (tmp_path / "events.parts").exists()
    w.progress(1.0, 1, 0)
    parts = list((tmp_path / "events.parts").glob("*.parquet"))
    assert len(parts) == 1 and _rows(parts[0]) == 5
    assert read_rows(tmp_path / "events.parquet").num_rows == 5


def test_rows_written_a_block_at_a_time_with_computed_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five rows in blocks of two: three row groups, read back as one table; a RowsColumn is
    asked for rows 0-1, 2-3 and 4 only. The counts of events of clients [2, 0, 2, 5] over 6 clients
    are 0:1, 1:0, 2:2, 3:0, 4:0, 5:1; with weights [1.5, 2, 0.25, 4] the sums 2, 0, 1.75; of the
    events [yes, no, yes, yes] 0:0, 2:2, 5:1."""
    from fedclock.scenarios import results

    events = results.ClientEvents(np.array([2, 0, 2, 5]), 6)
    counts = events.counts()
    assert counts[1:4].tolist() == [0, 2, 0] and counts[0:6].tolist() == [1, 0, 2, 0, 0, 1]
    assert events.counts(weights=np.array([1.5, 2, 0.25, 4]))[0:3].tolist() == [2, 0, 1.75]
    assert events.counts(np.array([True, False, True, True]))[0:6].tolist() == [0, 0, 2, 0, 0, 1]
    with pytest.raises(ValueError, match="consecutive"):
        counts[::2]
    monkeypatch.setattr(results, "ROWS_PER_GROUP", 2)
    asked: list[tuple[int, int]] = []

    def ids(start: int, stop: int) -> np.ndarray:
        asked.append((start, stop))
        return np.arange(start, stop) * 10

    table = Table(tmp_path / "c.parquet", CLIENTS_SCHEMA)
    cols: dict[str, Any] = {name: [None] * 5 for name in CLIENTS_SCHEMA.names}
    cols.update(client=results.RowsColumn(5, ids), compute=np.array([1.5, 2.5, 3.5, 4.5, 5.5]))
    table.replace(cols)
    table.flush()
    assert asked == [(0, 2), (2, 4), (4, 5)] and pq.ParquetFile(tmp_path / "c.parquet").num_row_groups == 3
    df = pd.read_parquet(tmp_path / "c.parquet")
    assert df["client"].tolist() == [0, 10, 20, 30, 40] and df["compute"].tolist() == [1.5, 2.5, 3.5, 4.5, 5.5]
    _no_tmp(tmp_path)
