"""Windowed aggregation in virtual time: window contents and staleness computed by hand."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError, parse_suite
from tests.conftest import scenario

MLP_8_BYTES = (64 * 8 + 8 + 8 * 10 + 10) * 4
WORK = 3 * 10  # three steps of ten samples


def run(tmp_path: Path, **sections: object) -> pd.DataFrame:
    s = scenario(**sections)
    run_scenario(s, Runtime("inline"), tmp_path)
    return pd.read_parquet(tmp_path / "events.parquet")


def duration(compute: float) -> float:
    transfer = MLP_8_BYTES * 8 / (100.0 * 1e6) + 0.01
    return 2 * transfer + WORK / compute


def test_window_contents_and_staleness_match_hand_computation(tmp_path: Path) -> None:
    # window 2 s; client 0 takes ~0.32 s, client 1 ~3.02 s, client 2 ~5.02 s
    computes = {0: 100.0, 1: 10.0, 2: 6.0}
    events = run(tmp_path, population={"num_clients": 3, "devices": {"down_mbps": 100.0, "up_mbps": 100.0,
                                                                     "latency_s": 0.01},
                                       "clients": [{"ids": [c], "compute": v} for c, v in computes.items()]},
                 algorithm={"name": "fedasync", "local_steps": 3, "batch_size": 10},
                 mode={"type": "async", "concurrency": 3, "aggregation": {"window_s": 2.0}},
                 stop={"versions": 6})
    assert duration(10.0) == pytest.approx(3.0 + 0.02 + 2 * MLP_8_BYTES * 8 / 1e8)
    applied = events[events.status == "applied"]
    # closes at t = 2, 4, ..., 12 each give one version; hand-derived contents per version:
    contents = {v: sorted(applied[applied.version_applied == v].client) for v in range(1, 7)}
    assert contents == {1: [0], 2: [0, 1], 3: [0, 2], 4: [0, 1], 5: [0], 6: [0, 1, 2]}
    rows = applied.sort_values(["client", "dispatched_at"])
    got = [(r.client, r.dispatched_at, r.version_dispatched, r.version_applied, r.staleness)
           for r in rows.itertuples()]
    expected = [(0, 2.0 * k, k, k + 1, 0) for k in range(6)]
    expected += [(1, 0.0, 0, 2, 1), (1, 4.0, 2, 4, 1), (1, 8.0, 4, 6, 1)]
    expected += [(2, 0.0, 0, 3, 2), (2, 6.0, 3, 6, 2)]
    assert got == sorted(expected)
    for r in rows.itertuples():
        assert r.finished_at == pytest.approx(r.dispatched_at + duration(computes[r.client]), rel=1e-12)
    # the run stops at the close that made version 6, before dispatching again
    assert len(events) == len(applied) == 11


def test_windows_dispatch_by_client_id_up_to_concurrency_and_respect_round_availability(tmp_path: Path) -> None:
    events = run(tmp_path, population={"num_clients": 4, "devices": {"compute": 1000.0},
                                       "clients": [{"ids": [0], "availability": {"type": "periodic_missing",
                                                                                 "period": 1}}]},
                 algorithm={"name": "fedasync", "local_steps": 1, "batch_size": 5},
                 mode={"type": "async", "concurrency": 2, "aggregation": {"window_s": 1.0}},
                 stop={"versions": 4})
    # window k dispatches the two lowest available ids; client 0 only in even windows
    by_window = {k: sorted(events[events["round"] == k].client) for k in range(4)}
    assert by_window == {0: [0, 1], 1: [1, 2], 2: [0, 1], 3: [1, 2]}
    assert (events[events.status == "applied"].staleness == 0).all()


def test_bad_window_is_a_one_line_error() -> None:
    data = {"name": "t", "algorithm": {"name": "fedasync"}, "stop": {"versions": 2},
            "mode": {"type": "async", "aggregation": {"window_s": -1}}}
    with pytest.raises(ScenarioError) as err:
        parse_suite(data, "t.yaml")
    assert "mode.aggregation.window_s" in str(err.value) and "\n" not in str(err.value)
    data["mode"] = {"type": "async", "aggregation": {"window": 1}}
    with pytest.raises(ScenarioError) as err:
        parse_suite(data, "t.yaml")
    assert "window" in str(err.value)


def test_windows_with_lost_connections_and_timeouts(tmp_path: Path) -> None:
    """Lost tasks end at dispatch + timeout and are never applied; a task slower than the
    timeout ends timed_out; the windowed run still completes."""
    events = run(tmp_path, population={"num_clients": 4, "devices": {"down_mbps": 100.0, "up_mbps": 100.0,
                                                                     "latency_s": 0.01},
                                       "connectivity": {"type": "per_task", "probability": 0.3},
                                       "clients": [{"ids": [0, 1, 2], "compute": 100.0}, {"ids": [3], "compute": 5.0}]},
                 algorithm={"name": "fedasync", "local_steps": 3, "batch_size": 10},
                 mode={"type": "async", "concurrency": 4, "aggregation": {"window_s": 2.0}, "task_timeout_s": 4.0},
                 stop={"versions": 8})
    lost = events[events.status == "lost"]
    assert len(lost) > 0
    assert (lost.finished_at == lost.dispatched_at + 4.0).all()
    assert lost.version_applied.isna().all()
    slow = events[(events.client == 3) & (events.status != "lost")]
    assert set(slow.status) <= {"timed_out", "unfinished"} and "timed_out" in set(slow.status)  # 6 s > 4 s timeout
    applied = events[events.status == "applied"]
    assert applied.version_applied.max() == 8 and set(applied.client) <= {0, 1, 2}
