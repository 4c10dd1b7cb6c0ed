"""`dataset.pool: all` (official train + test pooled, global test = the clients' test
splits) and `client_test_fraction: 0` (no client test split, global evaluation only)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fedclock.scenarios.data.datasets import load_dataset
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.loader import ScenarioError, parse_suite
from fedclock.scenarios.schema import DatasetConfig
from tests.scenarios.test_datasets import MNIST_NAMES, _write_cifar, _write_mnist_like


def test_pool_all_fmnist_like_paper_numbers(tmp_path: Path) -> None:
    """FedReCo workshop App. A.1 in miniature: 60 train + 10 test images pooled (70), 5
    clients of 14 each, 70/30 split per client; the global test set is the 5 x 4 client
    test samples (the paper's 21,000 of 70,000)."""
    arrays = _write_mnist_like(tmp_path / "FashionMNIST" / "raw", MNIST_NAMES, 60, 10, 10)
    cfg = DatasetConfig(name="fashion_mnist", root=tmp_path, pool="all", client_test_fraction=0.3)
    fed = build_federation(cfg, num_clients=5, seed=0)
    assert len(fed.y) == 70
    labels = np.concatenate([arrays[MNIST_NAMES[1]], arrays[MNIST_NAMES[3]]])
    assert np.array_equal(fed.y.numpy(), labels)  # train first, then the official test split
    assert [len(tr) + len(te) for tr, te in zip(fed.client_train, fed.client_test)] == [14] * 5
    assert [len(te) for te in fed.client_test] == [4] * 5  # round(0.3 * 14)
    pooled_test = np.sort(np.concatenate(fed.client_test))
    assert torch.equal(fed.x_test, fed.x[torch.from_numpy(pooled_test)])
    assert torch.equal(fed.y_test, fed.y[torch.from_numpy(pooled_test)])
    # no client trains on a global test sample
    assert not set(np.concatenate(fed.client_train).tolist()) & set(pooled_test.tolist())


def test_pool_train_keeps_the_official_test_set(tmp_path: Path) -> None:
    _write_mnist_like(tmp_path / "MNIST" / "raw", MNIST_NAMES, 40, 12, 10)
    fed = build_federation(DatasetConfig(name="mnist", root=tmp_path), num_clients=4, seed=0)
    assert len(fed.y) == 40 and len(fed.y_test) == 12


def test_pool_all_cifar(tmp_path: Path) -> None:
    files = {f"data_batch_{i}": 6 for i in range(1, 6)} | {"test_batch": 10}
    labels = _write_cifar(tmp_path / "cifar-10-batches-py", files, "labels", 10)
    ds = load_dataset(DatasetConfig(name="cifar10", root=tmp_path, pool="all"), seed=0, num_clients=2)
    assert len(ds.y_train) == 40 and len(ds.y_test) == 0
    assert np.array_equal(ds.y_train.numpy(), np.concatenate(list(labels.values())))
    # standardized over the whole pool
    assert abs(float(ds.x_train.mean())) < 1e-4


@pytest.mark.parametrize("name,why", [("digits", "digits has no official train/test split"),
                                      ("synthetic", "synthetic has no official"),
                                      ("digit_domains", "multi-domain sources keep each domain's own test set")])
def test_pool_all_needs_an_official_split(name: str, why: str) -> None:
    with pytest.raises(ValidationError, match=r"pool: 'all' needs a single dataset with an official train/test "
                                              rf"split \(allowed with: mnist, .*\); {why}"):
        DatasetConfig(name=name, pool="all")


def test_pool_all_needs_client_test_splits() -> None:
    with pytest.raises(ValidationError, match="client_test_fraction: pool 'all'"):
        DatasetConfig(name="mnist", pool="all", client_test_fraction=0)


def test_client_test_fraction_zero_trains_on_everything() -> None:
    cfg = DatasetConfig(name="digits", client_test_fraction=0)
    fed = build_federation(cfg, num_clients=6, seed=0)
    assert all(len(te) == 0 for te in fed.client_test)
    joined = np.concatenate(fed.client_train)
    assert len(joined) == len(np.unique(joined)) == len(fed.y)
    assert fed.client_data(0).x_test.shape[0] == 0


def _scenario(**dataset: object) -> dict:
    return {"name": "t", "dataset": {"name": "digits", **dataset}, "algorithm": {"name": "fedavg"},
            "stop": {"rounds": 1}}


def test_client_test_fraction_zero_with_personalized_is_one_line_error() -> None:
    with pytest.raises(ScenarioError, match="evaluation.personalized: needs every client's own test split.*"
                                            "set evaluation.personalized: false"):
        parse_suite(_scenario(client_test_fraction=0), "s.yaml")
    raw = _scenario(client_test_fraction=0) | {"evaluation": {"personalized": False}}
    suite = parse_suite(raw, "s.yaml")
    assert suite.runs[0].dataset.client_test_fraction == 0


def test_client_test_fraction_zero_runs_with_global_evaluation_only(tmp_path: Path) -> None:
    import pandas as pd

    from fedclock.actors.runtime import Runtime
    from fedclock.scenarios.experiment import run_scenario

    raw = _scenario(client_test_fraction=0, max_train_samples=300) | {
        "evaluation": {"personalized": False}, "population": {"num_clients": 3},
        "model": {"name": "logistic"}, "runtime": {"backend": "inline"}, "output": {"progress": False}}
    run_scenario(parse_suite(raw, "s.yaml").runs[0], Runtime("inline"), tmp_path)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    assert len(metrics) >= 1 and metrics["global_accuracy"].notna().all()
    assert "personal_accuracy_mean" not in metrics or metrics["personal_accuracy_mean"].isna().all()
    clients = pd.read_parquet(tmp_path / "clients.parquet")
    assert set(clients.get("num_test", pd.Series([0])).tolist()) == {0}
