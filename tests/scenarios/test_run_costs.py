"""Counted costs live in a per-session context object (:mod:`fedclock.scenarios.run_costs`),
never in module state: two runs of one process with different models get their own."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.run_costs import CountedCosts
from tests.conftest import scenario


def test_same_inputs_share_a_count_and_different_models_do_not() -> None:
    costs = CountedCosts()
    params = FedAvg.Params(batch_size=4, local_steps=1)
    small = FedAvg(params, ModelFactory("mlp", (1, 4, 4), 3, (8,)))
    wide = FedAvg(params, ModelFactory("mlp", (1, 4, 4), 3, (32,)))
    again = FedAvg(params, ModelFactory("mlp", (1, 4, 4), 3, (8,)))
    assert costs.task(small, torch.float32) is costs.task(again, torch.float32)
    assert costs.task(small, torch.float32).flops(40) < costs.task(wide, torch.float32).flops(40)
    assert len(costs.tasks) == 2
    assert CountedCosts().tasks == {}  # a fresh session counts anew


def test_two_runs_with_different_models_get_their_own_costs(tmp_path: Path) -> None:
    """Two runs in one process and one session, hidden widths 8 and 32: each run's task
    durations follow its own model (the wider one's compute is longer), and the session holds
    one count per model."""
    costs = CountedCosts()
    durations = {}
    for hidden in (8, 32):
        s = scenario(model={"name": "mlp", "hidden": [hidden]}, stop={"rounds": 1},
                     population={"num_clients": 2, "compute_unit": "gflops",
                                 "clients": [{"ids": [0, 1], "compute": 1e-3}]})
        run_scenario(s, Runtime("inline"), tmp_path / str(hidden), costs=costs)
        events = pd.read_parquet(tmp_path / str(hidden) / "events.parquet")
        durations[hidden] = float(events.compute_s.max())
    assert len(costs.tasks) == 2
    assert durations[32] > 2 * durations[8]
