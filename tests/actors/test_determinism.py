"""Contract 2: the same scenario gives the same metrics and events whatever the number of
actors, pooled or dedicated placement, or backend."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

ASYNC_HETEROGENEOUS = dict(
    population={"num_clients": 5, "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200},
                                              "down_mbps": {"dist": "loguniform", "low": 1, "high": 10},
                                              "up_mbps": {"dist": "loguniform", "low": 0.5, "high": 5}}},
    dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
    algorithm={"name": "fedasync", "lr": 0.1, "local_epochs": 1, "batch_size": 16},
    mode={"type": "async", "concurrency": 3}, stop={"versions": 15}, evaluation={"every": 3}, seed=7,
)


def results(runtime: Runtime, out: Path, **runtime_cfg: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    s = scenario(**ASYNC_HETEROGENEOUS, runtime={"backend": runtime.backend, **runtime_cfg})
    run_scenario(s, runtime, out)
    metrics = pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"])
    return metrics, pd.read_parquet(out / "events.parquet")


def test_same_results_for_any_actor_count_and_placement(ray_runtime: Runtime, tmp_path: Path) -> None:
    one_m, one_e = results(ray_runtime, tmp_path / "one", num_actors=1, placement="pooled")
    two_m, two_e = results(ray_runtime, tmp_path / "two", num_actors=2, placement="pooled")
    ded_m, ded_e = results(ray_runtime, tmp_path / "dedicated", placement="dedicated", num_cpus=0.4)
    inline_m, inline_e = results(Runtime("inline"), tmp_path / "inline")
    assert len(one_e) >= 15 and one_e.staleness.max() > 0  # a real async run with stale arrivals
    for m, e in ((two_m, two_e), (ded_m, ded_e), (inline_m, inline_e)):
        pd.testing.assert_frame_equal(one_m, m, check_exact=True)
        pd.testing.assert_frame_equal(one_e, e, check_exact=True)


def test_too_many_cpus_is_a_clear_error(ray_runtime: Runtime, tmp_path: Path) -> None:
    from fedclock.actors.runtime import ResourceError

    s = scenario(population={"num_clients": 3}, runtime={"placement": "dedicated", "num_cpus": 1})
    with pytest.raises(ResourceError, match=r"runtime.num_cpus: 3 client actors x 1 CPUs need 3 CPUs"):
        run_scenario(s, ray_runtime, tmp_path)


SYNC_COHORTS = dict(population={"num_clients": 9},
                    dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
                    algorithm={"name": "scaffold", "lr": 0.1, "batch_size": 16},
                    mode={"type": "sync", "cohort_size": 7}, stop={"rounds": 3}, evaluation={"every": 1}, seed=5)


def test_tasks_per_call_groups_calls_and_changes_no_number(ray_runtime: Runtime, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync cohort of 7 on 2 pooled Ray executors: by default one call per executor per
    round (groups of 4 and 3, run task by task by ``train_each``), with ``tasks_per_call: 2``
    four calls, with 1 a call per task; a stateful algorithm (SCAFFOLD's control variates),
    so the client states travel through grouped calls too. Metrics and events bit for bit."""
    from fedclock.actors.launcher import Launcher

    sizes: list[list[int]] = []
    original = Launcher._start_groups

    def record(self: Launcher, groups: list[Any]) -> None:
        sizes[-1].extend(len(g) for g in groups)
        original(self, groups)

    monkeypatch.setattr(Launcher, "_start_groups", record)
    tables = []
    for per_call in (None, 2, 1):
        sizes.append([])
        s = scenario(**SYNC_COHORTS, runtime={"backend": "ray", "num_actors": 2, "placement": "pooled",
                                              "tasks_per_call": per_call})
        run_scenario(s, ray_runtime, tmp_path / str(per_call))
        tables.append((pd.read_parquet(tmp_path / str(per_call) / "metrics.parquet").drop(columns=["wall_time"]),
                       pd.read_parquet(tmp_path / str(per_call) / "events.parquet")))
    assert sizes == [[4, 3] * 3, [2, 2, 2, 1] * 3, []]
    for m, e in tables[1:]:
        pd.testing.assert_frame_equal(tables[0][0], m, check_exact=True)
        pd.testing.assert_frame_equal(tables[0][1], e, check_exact=True)
    assert tables[0][0].global_accuracy.iloc[-1] > tables[0][0].global_accuracy.iloc[0]
