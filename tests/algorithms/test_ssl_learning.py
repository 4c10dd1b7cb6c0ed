"""End-to-end: self-supervised runs learn, and the linear evaluation is written per domain."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.schema import DatasetConfig
from fedclock.scenarios.data.federation import build_federation
from tests.conftest import scenario


def test_simclr_loss_falls_over_local_tasks() -> None:
    """NT-Xent on the client's whole train split with the same two views, before and after
    six local tasks (one task's batch losses are too noisy to compare)."""
    fed = build_federation(DatasetConfig(name="digit_styles", image_size=8), 4, seed=0)
    data = fed.client_data(0)
    alg = FedAvg(FedAvgParams(objective="simclr", lr=0.2, batch_size=32, local_steps=3),
                 ModelFactory("mlp", (1, 8, 8), 10, hidden=(64,)))
    state = alg.init_server(torch.Generator().manual_seed(0))

    def full_loss(weights: torch.Tensor) -> float:
        alg.model_factory.load_flat(alg.workspace, weights)
        with torch.no_grad():
            loss_fn = alg.objective_loss(torch.Generator().manual_seed(99))
            return float(loss_fn(alg.workspace, data.x_train, data.y_train))

    before = full_loss(state.tensors["weights"])
    for t in range(6):
        r = alg.client_update(alg.payload_for(state, 0), None, data, torch.Generator().manual_seed(t))
        state.tensors["weights"] = state.tensors["weights"] + r.upload["delta"]
    after = full_loss(state.tensors["weights"])
    assert after < before - 0.05, (before, after)  # measured: 6.31 -> 6.19


def test_fedstyle_quick_run_writes_linear_evaluation(tmp_path: Path) -> None:
    sc = scenario(dataset={"name": "digit_styles", "image_size": 8}, model={"name": "mlp", "hidden": [64]},
                  population={"num_clients": 4},
                  algorithm={"name": "fedstyle", "objective": "simsiam", "lr": 0.1, "batch_size": 64,
                             "style_epochs": 1},
                  stop={"rounds": 2}, evaluation={"every": 2, "linear": {"epochs": 15, "lr": 0.05}},
                  runtime={"backend": "inline"}, output={"progress": False})
    summary = run_scenario(sc, Runtime("inline"), tmp_path)
    rows = pd.read_parquet(tmp_path / "linear_eval.parquet")
    domains = ["original", "inverted", "blurred", "thick"]
    for kind in ("generalization", "personalization"):
        part = rows[(rows.kind == kind) & (rows.client == -1)]
        assert sorted(part.domain) == sorted(domains + ["average"])
    assert sorted(rows[rows.client >= 0].client) == [0, 1, 2, 3]
    # ten classes: chance is 0.1
    assert summary.linear_generalization > 0.5 and summary.linear_personalization > 0.5
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    assert metrics.global_accuracy.iloc[-1] > 0.3  # the k-NN monitor
