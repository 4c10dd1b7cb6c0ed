"""Crash-safe results: a run killed with SIGKILL at an arbitrary point leaves Parquet files that
all open, and the main files plus their part files hold every row up to the last completed
event — the same rows, in the same order, as an uninterrupted run's."""
from __future__ import annotations

import signal
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from fedclock.scenarios.results import EVENTS_SCHEMA, Table, read_rows
from fedclock.scenarios.rundirs import find_runs
from tests.user_runs import fedasync_on_digits, kill_run_when, run_inline

SCENARIO = fedasync_on_digits("crash", seed=5, num_clients=6, versions=100000, every=2, runtime="{backend: inline}",
                              output="{flush_every_s: 1000, progress: false}")


def test_a_killed_run_leaves_valid_files_with_every_completed_row(tmp_path: Path) -> None:
    file = tmp_path / "crash.yaml"
    file.write_text(SCENARIO)
    out = tmp_path / "killed"
    code = kill_run_when(file, out, lambda: len(list((out / "events.parts").glob("*.parquet"))) >= 30)
    assert code == -signal.SIGKILL
    for path in out.rglob("*.parquet"):
        pq.read_table(path)  # every Parquet file opens
    events = read_rows(out / "events.parquet").to_pandas()
    metrics = read_rows(out / "metrics.parquet").to_pandas().drop(columns=["wall_time"])
    assert len(events) >= 30 and pq.read_metadata(out / "events.parquet").num_rows == 0  # rows only in parts

    # an uninterrupted run, stopped a little after the version the killed run reached
    reached = int(events.version_applied.max())
    run_inline(file, tmp_path / "whole", [f"stop.versions={reached + 5}"])
    whole_e = pd.read_parquet(tmp_path / "whole" / "events.parquet")
    whole_m = pd.read_parquet(tmp_path / "whole" / "metrics.parquet").drop(columns=["wall_time"])
    pd.testing.assert_frame_equal(events, whole_e.iloc[:len(events)], check_exact=True,
                                  check_dtype=False)  # the whole run ends with unfinished tasks (nulls)
    pd.testing.assert_frame_equal(metrics, whole_m.iloc[:len(metrics)], check_exact=True, check_dtype=False)
    assert find_runs([out])[0].events is not None  # plot/compare read the parts too
    assert len(find_runs([out])[0].events) == len(events)


def test_a_flush_folds_the_parts_into_the_main_file(tmp_path: Path) -> None:
    table = Table(tmp_path / "events.parquet", EVENTS_SCHEMA, journal=True)
    table.flush()
    for i in range(3):
        table.append({"task": i, "status": "applied"})
        table.commit()
    assert len(list(table.parts_dir.iterdir())) == 3 and read_rows(table.path).column("task").to_pylist() == [0, 1, 2]
    table.flush()
    assert not table.parts_dir.exists() and pq.read_table(table.path).column("task").to_pylist() == [0, 1, 2]
    table.append({"task": 3, "status": "applied"})
    table.commit()
    (table.parts_dir / "000000000001.parquet").write_bytes(b"")  # a stale part from before the flush is ignored
    assert read_rows(table.path).column("task").to_pylist() == [0, 1, 2, 3]
