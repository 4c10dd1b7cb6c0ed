"""Label-based partitions: coverage, disjointness, class counts, skew and determinism."""
from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from fedclock.scenarios.data.partitions import _group, partition_indices
from fedclock.scenarios.data.partition_config import (ClassSamplingPartition, DirichletByClassPartition,
                                                      DirichletPartition, IIDPartition, NaturalPartition,
                                                      PathologicalPartition, ShardsPartition)

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


def test_dirichlet_by_class_sizes_and_min_samples() -> None:
    cfg = DirichletByClassPartition(type="dirichlet_by_class", alpha=0.3, min_samples=10)
    parts = partition_indices(LABELS, 10, cfg, _rng())
    assert len(_check_basic(parts, 10, 1000)) == 1000
    assert min(len(p) for p in parts) >= 10


def _mean_tv_from_global(parts: list[np.ndarray]) -> float:
    glob = np.bincount(LABELS, minlength=10) / len(LABELS)
    return float(np.mean([0.5 * np.abs(np.bincount(LABELS[p], minlength=10) / len(p) - glob).sum() for p in parts]))


def test_dirichlet_by_class_small_alpha_is_more_skewed() -> None:
    skewed = partition_indices(LABELS, 10, DirichletByClassPartition(type="dirichlet_by_class", alpha=0.1,
                                                                     min_samples=1), _rng())
    flat = partition_indices(LABELS, 10, DirichletByClassPartition(type="dirichlet_by_class", alpha=100.0,
                                                                   min_samples=1), _rng())
    assert _mean_tv_from_global(skewed) > 0.4 > 0.15 > _mean_tv_from_global(flat)


def test_dirichlet_by_class_impossible_requests_raise() -> None:
    with pytest.raises(ValueError, match="dataset.partition.min_samples"):
        partition_indices(LABELS, 50, DirichletByClassPartition(type="dirichlet_by_class", min_samples=30), _rng())
    with pytest.raises(ValueError, match="dataset.partition.alpha"):
        partition_indices(LABELS, 100, DirichletByClassPartition(type="dirichlet_by_class", alpha=0.01, min_samples=9),
                          _rng())


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


@pytest.mark.parametrize("k", [2, 4])
def test_sliding_label_sets_give_every_client_exactly_k_classes_and_equal_sizes(k: int) -> None:
    """label_sets: sliding (FedReCo's code): client c holds classes c..c+k-1 of one class
    order, so exactly k classes each, 10 distinct label sets over 50 clients, every class
    held by k x 50 / 10 clients and, with equal classes, equal clients (1000 / 50 samples each)
    — where 4 shards per client leave clients with fewer than 4 classes."""
    cfg = PathologicalPartition(type="pathological", classes_per_client=k, label_sets="sliding")
    parts = partition_indices(LABELS, 50, cfg, _rng(3))
    assert len(_check_basic(parts, 50, 1000)) == 1000
    held = _classes_per_client(parts)
    assert all(len(c) == k for c in held)
    assert len({frozenset(c) for c in held}) == 10
    assert all(sum(cls in c for c in held) == k * 5 for cls in range(10))
    assert {len(p) for p in parts} == {20}  # k classes x 100 / (k x 5 holders)
    assert held[:10] == held[10:20]  # the window slides by one class per client, period 10
    assert all(len(held[c] & held[c + 1]) == k - 1 for c in range(49))  # neighbours share k - 1 classes
    blocks = partition_indices(LABELS, 50, PathologicalPartition(type="pathological", classes_per_client=k), _rng(3))
    assert len({frozenset(c) for c in _classes_per_client(blocks)}) == 5
    if k == 4:
        shards = partition_indices(LABELS, 50, ShardsPartition(type="shards", shards_per_client=4), _rng(3))
        assert min(len(c) for c in _classes_per_client(shards)) < 4


def test_pathological_too_many_classes() -> None:
    with pytest.raises(ValueError, match=r"dataset.partition.classes_per_client: 11 .*allowed: 1..10"):
        partition_indices(LABELS, 5, PathologicalPartition(type="pathological", classes_per_client=11), _rng())


def test_class_sampling_follows_the_paper() -> None:
    """SPFL/PLGA App. B: every class in N equal parts, client n takes part n of each of its
    classes; so with 10 clients x 6 of 10 balanced classes every client holds 10 samples of
    each of its 6 classes (the paper's Table 5 shape: equal sizes)."""
    parts = partition_indices(LABELS, 10, ClassSamplingPartition(type="class_sampling", classes_per_client=6), _rng())
    _check_basic(parts, 10, 1000)
    classes = _classes_per_client(parts)
    assert all(len(c) == 6 for c in classes)
    assert len({frozenset(c) for c in classes}) > 1  # independent draws (non-IID)
    assert {len(p) for p in parts} == {60}
    for p in parts:
        assert set(np.bincount(LABELS[p], minlength=10).tolist()) <= {0, 10}


def test_class_sampling_sizes_do_not_depend_on_popularity() -> None:
    """Today's old rule split a class among its holders (sizes varied ~1.7x); the paper's
    gives every client |D^k| / N per class whatever the number of holders."""
    labels = np.repeat(np.arange(10), 120)
    parts = partition_indices(labels, 12, ClassSamplingPartition(type="class_sampling", classes_per_client=3), _rng(3))
    assert {len(p) for p in parts} == {30}
    hist = np.array([np.bincount(labels[p], minlength=10) for p in parts])
    holders = (hist > 0).sum(axis=0)
    assert holders.max() > holders.min()  # some classes are more popular, yet sizes stay equal


def test_class_sampling_uneven_classes_differ_by_at_most_one_per_class() -> None:
    labels = np.repeat(np.arange(4), [103, 98, 100, 101])
    parts = partition_indices(labels, 7, ClassSamplingPartition(type="class_sampling", classes_per_client=2), _rng())
    for p in parts:
        counts = np.bincount(labels[p], minlength=4)
        for c in np.flatnonzero(counts):
            assert counts[c] in (int(np.sum(labels == c)) // 7, int(np.sum(labels == c)) // 7 + 1)


def test_class_sampling_shared() -> None:
    cfg = ClassSamplingPartition(type="class_sampling", classes_per_client=4, shared=True)
    parts = partition_indices(LABELS, 8, cfg, _rng())
    joined = _check_basic(parts, 8, 1000)
    classes = _classes_per_client(parts)
    assert all(c == classes[0] for c in classes) and len(classes[0]) == 4
    assert len(joined) == 400
    for p in parts:  # 100 per class in 8 parts: 12 or 13 of each of the 4 shared classes
        assert set(np.bincount(LABELS[p], minlength=10)[sorted(classes[0])].tolist()) <= {12, 13}


def test_class_sampling_too_many_classes() -> None:
    with pytest.raises(ValueError, match="dataset.partition.classes_per_client"):
        partition_indices(LABELS, 3, ClassSamplingPartition(type="class_sampling", classes_per_client=12), _rng())


@pytest.mark.parametrize("cfg", [
    IIDPartition(),
    DirichletPartition(type="dirichlet", alpha=0.5),
    DirichletByClassPartition(type="dirichlet_by_class", alpha=0.5),
    ShardsPartition(type="shards", shards_per_client=2),
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


# --------------------------------------------------------------------------- Hsu et al. Dirichlet
@pytest.mark.parametrize("alpha", [0.05, 0.3, 1.0, 100.0])
def test_dirichlet_equal_sizes_and_everything_used(alpha: float) -> None:
    parts = partition_indices(LABELS, 7, DirichletPartition(type="dirichlet", alpha=alpha), _rng())
    assert len(_check_basic(parts, 7, 1000)) == 1000
    assert {len(p) for p in parts} == {142, 143}


def test_dirichlet_skew_follows_alpha() -> None:
    skewed = partition_indices(LABELS, 10, DirichletPartition(type="dirichlet", alpha=0.1), _rng())
    flat = partition_indices(LABELS, 10, DirichletPartition(type="dirichlet", alpha=10000.0), _rng())
    # alpha multiplies the prior (0.1 per class); 100 samples per client leave ~0.12 of pure sampling noise
    assert _mean_tv_from_global(skewed) > 0.4 > 0.2 > _mean_tv_from_global(flat)


def test_dirichlet_first_client_follows_its_q() -> None:
    """Client 0 draws from the full pool, so its class counts are a multinomial sample of
    q ~ Dir(alpha p): recompute q from the same generator and compare."""
    labels = np.repeat(np.arange(4), 2000)
    parts = partition_indices(labels, 4, DirichletPartition(type="dirichlet", alpha=2.0), _rng(11))
    rng = _rng(11)
    for _ in range(4):  # replay the draws partition_indices makes before client 0's q
        rng.permutation(2000)
    q = rng.dirichlet(2.0 * np.full(4, 0.25))
    counts = np.bincount(labels[parts[0]], minlength=4)
    assert counts.sum() == 2000
    assert np.abs(counts / 2000 - q).max() < 0.04


def test_dirichlet_per_class_concentration() -> None:
    """``concentration: per_class`` draws q ~ Dir(alpha, ..., alpha): on 4 balanced classes,
    per class 0.5 is total 2.0 (2.0 x 1/4 = 0.5 exactly), the same split; on an unbalanced
    pool client 0's q is Dir(alpha * 1), not Dir(alpha * K * prior)."""
    labels = np.repeat(np.arange(4), 2000)
    per_class = partition_indices(labels, 4, DirichletPartition(type="dirichlet", alpha=0.5,
                                                                concentration="per_class"), _rng(11))
    total = partition_indices(labels, 4, DirichletPartition(type="dirichlet", alpha=2.0), _rng(11))
    assert all(np.array_equal(a, b) for a, b in zip(per_class, total))
    labels = np.repeat(np.arange(3), [6000, 1000, 1000])
    parts = partition_indices(labels, 4, DirichletPartition(type="dirichlet", alpha=50.0,
                                                            concentration="per_class"), _rng(3))
    rng = _rng(3)
    for size in (6000, 1000, 1000):  # replay the draws made before client 0's q
        rng.permutation(size)
    q = rng.dirichlet(np.full(3, 50.0))
    assert np.abs(np.bincount(labels[parts[0]], minlength=3) / 2000 - q).max() < 0.04  # ~1/3 each, not 3/4


def test_dirichlet_per_class_tells_he02_from_he08() -> None:
    """FedStyle's He@0.2 and He@0.8 on an Office-Home-sized style (65 classes x 42 training
    images, 5 clients): read per class, a client holds about half (0.2) and three quarters
    (0.8) of the classes; read as a total concentration both hold about a fifth, the least
    that fills a client when each class has 42 images."""
    labels = np.repeat(np.arange(65), 42)

    def held(alpha: float, concentration: Literal["total", "per_class"]) -> float:
        cfg = DirichletPartition(type="dirichlet", alpha=alpha, concentration=concentration)
        parts = [p for seed in range(4) for p in partition_indices(labels, 5, cfg, _rng(seed))]
        return float(np.mean([len(np.unique(labels[p])) / 65 for p in parts]))

    assert 0.35 < held(0.2, "per_class") < 0.6 < 0.65 < held(0.8, "per_class") < 0.9
    assert held(0.2, "total") < 0.3 and held(0.8, "total") < 0.3


def test_dirichlet_class_running_out_renormalizes_over_classes_left() -> None:
    """A class smaller than a client's demand runs out; the client is still filled, from
    the other classes, and no sample is used twice."""
    labels = np.repeat(np.arange(3), [10, 500, 490])
    for seed in range(5):
        parts = partition_indices(labels, 2, DirichletPartition(type="dirichlet", alpha=0.05), _rng(seed))
        assert len(_check_basic(parts, 2, 1000)) == 1000
        assert [len(p) for p in parts] == [500, 500]


def test_draw_without_replacement_renormalizes() -> None:
    from fedclock.scenarios.data.partitions import _draw_without_replacement

    take = _draw_without_replacement(np.array([0.9, 0.1, 0.0]), 50, np.array([5, 100, 100]), _rng())
    assert take.tolist()[0] == 5 and take.sum() == 50 and take[2] == 0  # class 2 has q = 0 and is not needed
    take = _draw_without_replacement(np.array([1.0, 0.0, 0.0]), 50, np.array([5, 20, 60]), _rng())
    assert take[0] == 5 and take.sum() == 50  # q has no mass left: in proportion to what remains
    assert take[1] <= 20


def test_dirichlet_rejects_min_samples() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="min_samples"):
        DirichletPartition(type="dirichlet", alpha=0.5, min_samples=3)


# --------------------------------------------------------------------------- McMahan shards
def test_shards_many_distinct_label_sets_unlike_pathological() -> None:
    """50 clients x 2 shards on 10 classes: label-sorted shards of 10 samples, each a single
    class; clients get many different pairs, while the round-robin pathological split has 5."""
    parts = partition_indices(LABELS, 50, ShardsPartition(type="shards", shards_per_client=2), _rng())
    assert len(_check_basic(parts, 50, 1000)) == 1000
    assert {len(p) for p in parts} == {20}
    sets = {frozenset(c) for c in _classes_per_client(parts)}
    assert len(sets) > 15
    assert all(1 <= len(c) <= 2 for c in _classes_per_client(parts))
    patho = partition_indices(LABELS, 50, PathologicalPartition(type="pathological", classes_per_client=2), _rng())
    assert len({frozenset(c) for c in _classes_per_client(patho)}) == 5


def test_shards_are_label_sorted_blocks() -> None:
    labels = np.repeat(np.arange(5), 12)  # 60 samples, 4 clients x 3 shards of 5
    parts = partition_indices(labels, 4, ShardsPartition(type="shards", shards_per_client=3), _rng(2))
    assert {len(p) for p in parts} == {15}
    all_shards = []
    for p in parts:  # every client's samples split into shards of consecutive labels
        counts = np.bincount(labels[p], minlength=5)
        assert counts.sum() == 15 and len(np.flatnonzero(counts)) <= 3 * 2
        all_shards.append(counts)
    # the sorted pool cut into 12 shards of 5: shard boundaries fall at multiples of 5 in the
    # label order, so label 0's 12 samples span shards 0, 1 and 2 (5, 5, 2+3)
    assert int(np.sum(np.array(all_shards)[:, 0])) == 12


def test_shards_too_many() -> None:
    with pytest.raises(ValueError, match="dataset.partition.shards_per_client"):
        partition_indices(np.arange(10) % 2, 4, ShardsPartition(type="shards", shards_per_client=3), _rng())


def test_grouping_by_owner_with_and_without_unowned_samples() -> None:
    """Owners [1, 0, 1, 2]: client 0 holds sample 1, client 1 samples 0 and 2, client 2 sample 3
    (every sample owned: grouped without copies); with sample 2 unowned (-1) it is left out."""
    every = _group(np.array([1, 0, 1, 2]), 3)
    assert every.flat.tolist() == [1, 0, 2, 3] and every.offsets.tolist() == [0, 1, 3, 4]
    assert every.flat.dtype == np.int64
    some = _group(np.array([1, 0, -1, 2]), 4)
    assert some.flat.tolist() == [1, 0, 3] and some.offsets.tolist() == [0, 1, 2, 3, 3]
