"""Label-based partitions: coverage, disjointness, class counts, skew and determinism."""
from __future__ import annotations

import numpy as np
import pytest

from fedclock.scenarios.partitions import partition_indices
from fedclock.scenarios.schema import (ClassSamplingPartition, DirichletPartition, IIDPartition,
                                       NaturalPartition, PathologicalPartition)

LABELS = np.repeat(np.arange(10), 100)[np.random.default_rng(0).permutation(1000)]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_basic(parts: list[np.ndarray], num_clients: int, n: int) -> np.ndarray:
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == np.int64
        assert np.all(np.diff(p) > 0)  # sorted, no repeats
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined)  # disjoint
    assert joined.min(initial=0) >= 0 and joined.max(initial=0) < n
    return joined


def _classes_per_client(parts: list[np.ndarray]) -> list[set[int]]:
    return [set(np.unique(LABELS[p]).tolist()) for p in parts]


def test_iid_covers_everything_evenly() -> None:
    parts = partition_indices(LABELS, 7, IIDPartition(), _rng())
    joined = _check_basic(parts, 7, 1000)
    assert len(joined) == 1000
    assert {len(p) for p in parts} <= {142, 143}


def test_dirichlet_sizes_and_min_samples() -> None:
    cfg = DirichletPartition(type="dirichlet", alpha=0.3, min_samples=10)
    parts = partition_indices(LABELS, 10, cfg, _rng())
    assert len(_check_basic(parts, 10, 1000)) == 1000
    assert min(len(p) for p in parts) >= 10


def _mean_tv_from_global(parts: list[np.ndarray]) -> float:
    glob = np.bincount(LABELS, minlength=10) / len(LABELS)
    return float(np.mean([0.5 * np.abs(np.bincount(LABELS[p], minlength=10) / len(p) - glob).sum() for p in parts]))


def test_dirichlet_small_alpha_is_more_skewed() -> None:
    skewed = partition_indices(LABELS, 10, DirichletPartition(type="dirichlet", alpha=0.1, min_samples=1), _rng())
    flat = partition_indices(LABELS, 10, DirichletPartition(type="dirichlet", alpha=100.0, min_samples=1), _rng())
    assert _mean_tv_from_global(skewed) > 0.4 > 0.15 > _mean_tv_from_global(flat)


def test_dirichlet_impossible_requests_raise() -> None:
    with pytest.raises(ValueError, match="dataset.partition.min_samples"):
        partition_indices(LABELS, 50, DirichletPartition(type="dirichlet", min_samples=30), _rng())
    with pytest.raises(ValueError, match="dataset.partition.alpha"):
        partition_indices(LABELS, 100, DirichletPartition(type="dirichlet", alpha=0.01, min_samples=9), _rng())


@pytest.mark.parametrize("n,clients", [(2, 10), (3, 7), (1, 4), (10, 3)])
def test_pathological_exact_classes(n: int, clients: int) -> None:
    parts = partition_indices(LABELS, clients, PathologicalPartition(type="pathological", classes_per_client=n),
                              _rng())
    joined = _check_basic(parts, clients, 1000)
    assert all(len(c) == n for c in _classes_per_client(parts))
    # every sample of a held class is used, and a class's holders get equal shares (+-1)
    held = set().union(*_classes_per_client(parts))
    assert len(joined) == int(np.isin(LABELS, list(held)).sum())
    for c in held:
        shares = [int(np.sum(LABELS[p] == c)) for p in parts if c in set(LABELS[p].tolist())]
        assert max(shares) - min(shares) <= 1


def test_pathological_too_many_classes() -> None:
    with pytest.raises(ValueError, match=r"dataset.partition.classes_per_client: 11 .*allowed: 1..10"):
        partition_indices(LABELS, 5, PathologicalPartition(type="pathological", classes_per_client=11), _rng())


def test_class_sampling_non_iid() -> None:
    cfg = ClassSamplingPartition(type="class_sampling", classes_per_client=3)
    parts = partition_indices(LABELS, 12, cfg, _rng())
    _check_basic(parts, 12, 1000)
    classes = _classes_per_client(parts)
    assert all(len(c) == 3 for c in classes)
    assert len({frozenset(c) for c in classes}) > 1
    for c in set().union(*classes):  # split evenly among the clients that drew it
        shares = [int(np.sum(LABELS[p] == c)) for p, cs in zip(parts, classes) if c in cs]
        assert sum(shares) == 100 and max(shares) - min(shares) <= 1


def test_class_sampling_shared() -> None:
    cfg = ClassSamplingPartition(type="class_sampling", classes_per_client=4, shared=True)
    parts = partition_indices(LABELS, 8, cfg, _rng())
    joined = _check_basic(parts, 8, 1000)
    classes = _classes_per_client(parts)
    assert all(c == classes[0] for c in classes) and len(classes[0]) == 4
    assert len(joined) == 400
    assert {len(p) for p in parts} == {50}


def test_class_sampling_too_many_classes() -> None:
    with pytest.raises(ValueError, match="dataset.partition.classes_per_client"):
        partition_indices(LABELS, 3, ClassSamplingPartition(type="class_sampling", classes_per_client=12), _rng())


@pytest.mark.parametrize("cfg", [
    IIDPartition(),
    DirichletPartition(type="dirichlet", alpha=0.5),
    PathologicalPartition(type="pathological", classes_per_client=2),
    ClassSamplingPartition(type="class_sampling", classes_per_client=2),
    ClassSamplingPartition(type="class_sampling", classes_per_client=2, shared=True),
])
def test_deterministic_from_rng(cfg: object) -> None:
    a = partition_indices(LABELS, 6, cfg, _rng(5))
    b = partition_indices(LABELS, 6, cfg, _rng(5))
    c = partition_indices(LABELS, 6, cfg, _rng(6))
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c))


def test_too_many_clients_and_natural_rejected() -> None:
    with pytest.raises(ValueError, match="population.num_clients"):
        partition_indices(np.arange(5) % 2, 6, IIDPartition(), _rng())
    with pytest.raises(ValueError, match="natural"):
        partition_indices(LABELS, 2, NaturalPartition(type="natural"), _rng())
