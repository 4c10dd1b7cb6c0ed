"""End-to-end runs of the personalized and private algorithms on digits (inline backend):
20 clients holding 2 classes each, so a personalized model beats the global FedAvg model
by far; FedReCo's upload is body-sized in events.parquet; the CKA analysis writes its file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest
from rich.console import Console

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.dp import classical_multiplier, cumulative_epsilon
from fedclock.scenarios.experiment import RunSummary, run_scenario
from fedclock.scenarios.loader import parse_suite
from fedclock.scenarios.progress import summary_table
from fedclock.scenarios.run_costs import CountedCosts

BASE: dict[str, Any] = {
    "name": "pers", "seed": 0,
    "dataset": {"name": "digits", "client_test_fraction": 0.3,
                "partition": {"type": "pathological", "classes_per_client": 2}},
    "model": {"name": "mlp", "hidden": [32]},
    "population": {"num_clients": 20},
    "stop": {"rounds": 5},
    "evaluation": {"every": 5},
    "runtime": {"backend": "inline"},
    "output": {"progress": False, "flush_every_s": 0},
}
SGD = {"lr": 0.05, "batch_size": 16}
FEDRECO = {"name": "fedreco", **SGD, "server_lr": 0.01}
SharedRun = Callable[[dict[str, Any]], tuple[RunSummary, Path]]


@pytest.fixture(scope="module")
def costs() -> CountedCosts:
    """The module's counted FLOPs, shared by its runs as a session's runs share them (FedReCo,
    Ditto and FedRep count a task per client size)."""
    return CountedCosts()


def run(tmp_path: Path, algorithm: dict[str, Any], costs: CountedCosts, **sections: Any) -> RunSummary:
    data = {**BASE, "algorithm": algorithm, **sections}
    scenario = parse_suite(data, "test").runs[0]
    return run_scenario(scenario, Runtime("inline"), tmp_path, costs=costs)


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory, costs: CountedCosts) -> SharedRun:
    """The BASE run of an algorithm (its summary and folder), run once for the module's tests
    that read it (FedAvg's global accuracy; FedReCo's in the personalized and the DP test)."""
    done: dict[str, tuple[RunSummary, Path]] = {}

    def get(algorithm: dict[str, Any]) -> tuple[RunSummary, Path]:
        key = json.dumps(algorithm, sort_keys=True)
        if key not in done:
            out = tmp_path_factory.mktemp(algorithm["name"])
            done[key] = (run(out, algorithm, costs), out)
        return done[key]
    return get


@pytest.fixture(scope="module")
def fedavg_global(shared_run: SharedRun) -> float:
    return shared_run({"name": "fedavg", **SGD})[0].global_accuracy


@pytest.mark.parametrize("algorithm", [
    {"name": "fedavg_ft", **SGD},
    {"name": "ditto", **SGD, "lam": 0.01},
    {"name": "fedrep", **SGD},
    {"name": "fedper", **SGD},
    {"name": "fedbabu", **SGD},
    {"name": "apfl", **SGD, "alpha": 0.5},
    FEDRECO,
    {"name": "fedreco", **SGD, "server_update": "average"},
], ids=lambda a: a["name"] + ("_avg" if a.get("server_update") == "average" else ""))
def test_personalized_beats_global_fedavg(algorithm: dict[str, Any], fedavg_global: float,
                                          shared_run: SharedRun) -> None:
    summary = shared_run(algorithm)[0]
    assert fedavg_global <= 0.6
    assert summary.personal_accuracy_mean >= 0.8
    assert summary.personal_accuracy_mean >= fedavg_global + 0.3


def test_dp_costs_fedreco_far_less_than_fedavg(tmp_path: Path, fedavg_global: float, shared_run: SharedRun,
                                               costs: CountedCosts) -> None:
    budget = {"epsilon": 0.2, "delta": 0.1, "accounting_delta": 1e-5}
    fedavg = fedavg_global
    fedavg_dp = run(tmp_path / "b", {"name": "fedavg_dp", **SGD, **budget}, costs).global_accuracy
    fedreco_summary, fedreco_out = shared_run(FEDRECO)  # the personalized test's FedReCo run
    fedreco = fedreco_summary.personal_accuracy_mean
    private = run(tmp_path / "d", {"name": "fedreco_dp", **SGD, "server_lr": 0.01, **budget}, costs)
    assert fedavg - fedavg_dp >= 0.25
    assert fedreco - private.personal_accuracy_mean <= 0.1
    assert private.personal_accuracy_mean >= 0.8
    # the privacy spent over the run: 5 uploads per client, composed at delta 1e-5
    spent = cumulative_epsilon(classical_multiplier(0.2, 0.1), 5, 1e-5)
    metrics = pd.read_parquet(tmp_path / "d" / "metrics.parquet")
    assert list(metrics["dp_uploads_max"]) == [0, 5]
    assert metrics["dp_epsilon"].iloc[-1] == pytest.approx(spent) and spent > 0.2
    assert private.privacy_epsilon == pytest.approx(spent) and private.privacy_delta == 1e-5
    assert pd.read_parquet(fedreco_out / "metrics.parquet")["dp_epsilon"].isna().all()
    console = Console(width=250, record=True)
    console.print(summary_table("t", [private]))
    assert f"{spent:.3g} (1e-05)" in console.export_text()


def test_fedreco_uploads_body_sized_messages(shared_run: SharedRun) -> None:
    """Every upload of the module's FedAvg and FedReCo runs (5 rounds of 20 clients)."""
    up_avg = pd.read_parquet(shared_run({"name": "fedavg", **SGD})[1] / "events.parquet")["bytes_up"]
    up_reco = pd.read_parquet(shared_run(FEDRECO)[1] / "events.parquet")["bytes_up"]
    assert len(up_avg) == len(up_reco) == 100
    body = 64 * 32 + 32  # the mlp body: Linear(64, 32)
    assert (up_reco == body * 4).all()
    assert (up_avg == (body + 32 * 10 + 10) * 4).all()


def test_cka_analysis_writes_a_row_per_client_and_layer(tmp_path: Path, costs: CountedCosts) -> None:
    # 4 iid clients of 70 training samples each: one client size, so FedReCo's task is counted once
    dataset = {**BASE["dataset"], "partition": {"type": "iid"}, "max_train_samples": 400}
    run(tmp_path, {"name": "fedreco", **SGD}, costs, stop={"rounds": 2}, analysis={"type": "cka", "samples": 16},
        population={"num_clients": 4}, dataset=dataset)
    table = pd.read_parquet(tmp_path / "cka.parquet")
    assert sorted(table["client"].unique()) == [0, 1, 2, 3]
    assert list(table[table.client == 0].sort_values("layer_index")["layer"]) == ["body.1", "head"]
    assert table["cka"].between(0, 1 + 1e-9).all() and (table["version"] == 2).all()
