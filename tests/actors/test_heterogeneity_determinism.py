"""Contract 2 with partial work and lost connections: the same scenario gives the same
steps, losses, give-up times and metrics on one or two Ray actors and inline."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

FLAKY_PARTIAL = dict(
    population={"num_clients": 4, "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200}},
                "completeness": {"type": "random", "distribution": {"dist": "uniform", "low": 0.2, "high": 1.0}},
                "connectivity": {"type": "per_task", "probability": 0.3}},
    algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 6, "batch_size": 16, "buffer_size": 2},
    mode={"type": "async", "concurrency": 2, "task_timeout_s": 3.0}, stop={"versions": 6}, evaluation={"every": 2},
    seed=11,
)


def results(runtime: Runtime, out: Path, **runtime_cfg: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    s = scenario(**FLAKY_PARTIAL, runtime={"backend": runtime.backend, **runtime_cfg})
    run_scenario(s, runtime, out)
    return (pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(out / "events.parquet"))


def test_partial_work_and_losses_do_not_depend_on_actors(ray_runtime: Runtime, tmp_path: Path) -> None:
    one_m, one_e = results(ray_runtime, tmp_path / "one", num_actors=1, placement="pooled", num_cpus=0.4)
    two_m, two_e = results(ray_runtime, tmp_path / "two", num_actors=2, placement="pooled", num_cpus=0.4)
    inline_m, inline_e = results(Runtime("inline"), tmp_path / "inline")
    assert (one_e.status == "lost").any() and one_e.steps.nunique() > 1
    for m, e in ((two_m, two_e), (inline_m, inline_e)):
        pd.testing.assert_frame_equal(one_m, m, check_exact=True)
        pd.testing.assert_frame_equal(one_e, e, check_exact=True)
