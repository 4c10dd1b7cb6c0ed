"""Issue 50 at a small size: a population kept in flat arrays (diurnal phases drawn at once),
Oort's selection and synthetic data drawn in blocks with their natural split give the same
tables inline and on Ray, where the driver reads the data from the object store's copy."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

BIG_SHAPE = dict(
    dataset={"name": "synthetic", "synthetic_samples": 480, "synthetic_features": 6, "synthetic_draws": "blocks",
             "partition": {"type": "natural"}, "client_test_fraction": 0},
    population={"num_clients": 120, "availability": {"type": "diurnal", "phases": "population", "period_s": 40.0}},
    algorithm={"name": "fedavg", "lr": 0.05, "batch_size": 4}, model={"name": "mlp", "hidden": [8]},
    mode={"type": "sync", "cohort_size": 8}, selection={"name": "oort"}, stop={"rounds": 3},
    evaluation={"every": 2, "personalized": False}, seed=4,
)


def tables(runtime: Runtime, out: Path, **runtime_cfg: Any) -> list[pd.DataFrame]:
    s = scenario(**BIG_SHAPE, runtime={"backend": runtime.backend, **runtime_cfg})
    run_scenario(s, runtime, out)
    return [pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(out / "events.parquet"), pd.read_parquet(out / "clients.parquet")]


def test_flat_population_runs_alike_inline_and_on_ray(ray_runtime: Runtime, tmp_path: Path) -> None:
    on_ray = tables(ray_runtime, tmp_path / "ray", num_actors=2, placement="pooled", num_cpus=0.4)
    inline = tables(Runtime("inline"), tmp_path / "inline")
    assert on_ray[1].client.nunique() > 8  # more than one cohort's clients trained
    for a, b in zip(on_ray, inline):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_the_driver_reads_the_data_from_the_store(ray_runtime: Runtime, tmp_path: Path) -> None:
    s = scenario(**BIG_SHAPE, runtime={"backend": "ray", "num_actors": 1, "placement": "pooled", "num_cpus": 0.4})
    federation = build_federation(s.dataset, s.population.num_clients, s.seed)
    x, flat, own = federation.x.clone(), federation.client_train.flat.copy(), federation.x.data_ptr()
    assert federation.client_train.flat.flags.writeable
    run_scenario(s, ray_runtime, tmp_path / "run", federation=federation)
    # the same values, now the object store's read-only memory (the driver's own arrays let go)
    assert not federation.client_train.flat.flags.writeable and federation.x.data_ptr() != own
    assert np.array_equal(federation.client_train.flat, flat) and bool((federation.x == x).all())
