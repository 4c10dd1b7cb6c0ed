"""The federation: per-client splits over the shared pool, seeded and checked."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedclock.algorithms.base import ClientData
from fedclock.scenarios.data.datasets import DatasetError, load_dataset
from fedclock.scenarios.data.federation import Federation, build_federation
from fedclock.scenarios.schema import DatasetConfig


def _digits(**kw: object) -> DatasetConfig:
    return DatasetConfig(name="digits", **kw)


def test_client_splits_are_disjoint_and_cover_the_pool() -> None:
    fed = build_federation(_digits(client_test_fraction=0.25), num_clients=8, seed=0)
    assert isinstance(fed, Federation) and fed.num_clients == 8
    used = []
    for tr, te in zip(fed.client_train, fed.client_test):
        assert tr.dtype == np.int64 and te.dtype == np.int64
        assert len(tr) >= 1 and len(te) >= 1
        assert not set(tr.tolist()) & set(te.tolist())
        assert abs(len(te) - 0.25 * (len(tr) + len(te))) <= 1
        used += [tr, te]
    joined = np.concatenate(used)
    assert len(joined) == len(np.unique(joined)) == len(fed.y)  # iid partition uses every sample once


def test_global_test_set_is_the_datasets() -> None:
    cfg = _digits()
    fed = build_federation(cfg, num_clients=5, seed=3)
    ds = load_dataset(cfg, seed=3, num_clients=5)
    assert torch.equal(fed.x_test, ds.x_test) and torch.equal(fed.y_test, ds.y_test)
    assert torch.equal(fed.x, ds.x_train)
    assert len(fed.y) + len(fed.y_test) == 1797


def test_deterministic_from_seed() -> None:
    cfg = _digits(partition={"type": "dirichlet_by_class", "alpha": 0.5})
    a, b = build_federation(cfg, 6, seed=11), build_federation(cfg, 6, seed=11)
    c = build_federation(cfg, 6, seed=12)
    for x, y in ((a.client_train, b.client_train), (a.client_test, b.client_test)):
        assert all(np.array_equal(p, q) for p, q in zip(x, y))
    assert not all(np.array_equal(p, q) for p, q in zip(a.client_train, c.client_train))


def test_client_data_shapes_and_properties() -> None:
    fed = build_federation(_digits(image_size=28), num_clients=4, seed=0)
    assert fed.input_shape == (1, 28, 28) and fed.dataset_name == "digits" and fed.num_classes == 10
    data = fed.client_data(2)
    assert isinstance(data, ClientData) and data.client == 2
    assert data.x_train.shape == (len(fed.client_train[2]), 1, 28, 28)
    assert data.x_test.shape == (len(fed.client_test[2]), 1, 28, 28)
    assert torch.equal(data.y_train, fed.y[torch.from_numpy(fed.client_train[2])])
    assert np.array_equal(fed.client_sizes(), [len(t) for t in fed.client_train])
    hist = fed.label_histogram()
    assert hist.shape == (4, 10) and np.array_equal(hist.sum(axis=1), fed.client_sizes())


def test_pathological_histogram() -> None:
    cfg = _digits(partition={"type": "pathological", "classes_per_client": 2})
    fed = build_federation(cfg, num_clients=10, seed=0)
    assert np.all((fed.label_histogram() > 0).sum(axis=1) == 2)


def test_natural_split_of_synthetic() -> None:
    cfg = DatasetConfig(name="synthetic", synthetic_samples=2000, partition={"type": "natural"})
    fed = build_federation(cfg, num_clients=12, seed=0)
    ds = load_dataset(cfg, seed=0, num_clients=12)
    assert fed.num_clients == 12 and fed.input_shape == (60,)
    for k, natural in enumerate(ds.natural_clients):
        both = np.sort(np.concatenate([fed.client_train[k], fed.client_test[k]]))
        assert np.array_equal(both, natural)
        assert len(fed.client_train[k]) >= 1


def test_too_many_clients_is_a_dataset_error() -> None:
    cfg = _digits(max_train_samples=20, partition={"type": "class_sampling", "classes_per_client": 1, "shared": True})
    with pytest.raises(DatasetError, match=r"population.num_clients: 15 clients leave client \d+ with no data"):
        build_federation(cfg, num_clients=15, seed=0)
    with pytest.raises(DatasetError, match="population.num_clients"):
        build_federation(_digits(max_train_samples=10), num_clients=11, seed=0)


def test_partition_errors_become_dataset_errors() -> None:
    cfg = _digits(partition={"type": "pathological", "classes_per_client": 11})
    with pytest.raises(DatasetError, match="dataset.partition.classes_per_client"):
        build_federation(cfg, num_clients=3, seed=0)


def test_single_sample_client_keeps_it_for_training() -> None:
    fed = build_federation(_digits(max_train_samples=5), num_clients=5, seed=0)
    assert all(len(t) == 1 for t in fed.client_train) and all(len(t) == 0 for t in fed.client_test)


def test_client_test_sizes_follow_the_split_rule() -> None:
    """Held out at fraction 0.2: 0 of 0 or 1 sample, 1 of 2 (floor(0.4 + 0.5) = 0, raised to
    1), 1 of 3, 2 of 10 (floor(2.5)); at 0.5, 2 of 3 (floor(2.0), at most n - 1 = 2); at 0,
    none. client_test_split holds out that many."""
    from fedclock.scenarios.data.client_split import client_test_sizes, client_test_split

    assert client_test_sizes(np.array([0, 1, 2, 3, 10]), 0.2).tolist() == [0, 0, 1, 1, 2]
    assert client_test_sizes(np.array([3, 4]), 0.5).tolist() == [2, 2]
    assert client_test_sizes(np.array([5]), 0.0).tolist() == [0]
    rng = np.random.default_rng(0)
    for fraction in (0.0, 0.1, 0.2, 0.25, 0.5, 0.9):
        sizes = np.arange(0, 40)
        held = [len(client_test_split(np.arange(n), fraction, rng)[1]) for n in sizes]
        assert client_test_sizes(sizes, fraction).tolist() == held
