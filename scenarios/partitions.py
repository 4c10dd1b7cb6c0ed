"""Splitting a training pool's sample indices among clients.

:func:`partition_indices` implements every label-based scheme of the scenario schema.
Each scheme first decides an owner client for every sample (``-1`` for samples nobody
uses) and then groups indices by owner, so every returned array is sorted, the arrays are
disjoint, and their dtype is int64. Only classes present in ``labels`` count as classes.
The ``natural`` partition is the dataset's own split and is handled by the federation.
"""
from __future__ import annotations

import numpy as np

from fedclock.scenarios.schema import (ClassSamplingPartition, DirichletPartition, IIDPartition,
                                       NaturalPartition, PartitionConfig, PathologicalPartition)

__all__ = ["partition_indices"]

_DIRICHLET_TRIES = 1000


def partition_indices(labels: np.ndarray, num_clients: int, cfg: PartitionConfig,
                      rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``range(len(labels))`` among ``num_clients`` clients following ``cfg``.

    Returns one sorted int64 index array per client; arrays are disjoint. Samples of
    classes no client holds (pathological, class sampling) are left out. Raises
    ``ValueError`` with a message that starts with the offending scenario field.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if num_clients < 1:
        raise ValueError(f"population.num_clients: must be at least 1, got {num_clients}")
    if num_clients > n:
        raise ValueError(f"population.num_clients: {num_clients} clients but the training pool has only {n} "
                         "samples; use fewer clients or a larger dataset")
    if isinstance(cfg, IIDPartition):
        owner = np.empty(n, dtype=np.int64)
        owner[rng.permutation(n)] = _even_owners(n, np.arange(num_clients))
    elif isinstance(cfg, DirichletPartition):
        owner = _dirichlet(labels, num_clients, cfg, rng)
    elif isinstance(cfg, PathologicalPartition):
        classes = _classes(labels, cfg.classes_per_client, "pathological")
        k = cfg.classes_per_client
        order = rng.permutation(classes)
        slots = (np.arange(num_clients)[:, None] * k + np.arange(k)[None, :]) % len(classes)
        owner = _deal(labels, order[slots], rng)
    elif isinstance(cfg, ClassSamplingPartition):
        classes = _classes(labels, cfg.classes_per_client, "class_sampling")
        k = cfg.classes_per_client
        if cfg.shared:
            chosen = rng.choice(classes, size=k, replace=False)
            pool = np.flatnonzero(np.isin(labels, chosen))
            owner = np.full(n, -1, dtype=np.int64)
            owner[rng.permutation(pool)] = _even_owners(len(pool), np.arange(num_clients))
        else:
            owner = _deal(labels, _sample_classes(classes, num_clients, k, rng), rng)
    elif isinstance(cfg, NaturalPartition):
        raise ValueError("dataset.partition: 'natural' uses the dataset's own client split "
                         "(build_federation handles it), not a label-based split")
    else:  # pragma: no cover - the schema's union is closed
        raise ValueError(f"dataset.partition: unknown partition {cfg!r}")
    return _group(owner, num_clients)


def _group(owner: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Indices grouped by owner (``-1`` dropped), each group ascending."""
    used = np.flatnonzero(owner >= 0).astype(np.int64)
    order = used[np.argsort(owner[used], kind="stable")]
    counts = np.bincount(owner[used], minlength=num_clients)
    return [part.copy() for part in np.split(order, np.cumsum(counts)[:-1])]


def _even_owners(count: int, holders: np.ndarray) -> np.ndarray:
    """Owners for ``count`` shuffled samples split as evenly as possible among
    ``holders`` (the first ``count % len(holders)`` get one more)."""
    h = len(holders)
    sizes = count // h + (np.arange(h) < count % h)
    return np.repeat(holders, sizes)


def _classes(labels: np.ndarray, per_client: int, scheme: str) -> np.ndarray:
    classes = np.unique(labels)
    if per_client > len(classes):
        raise ValueError(f"dataset.partition.classes_per_client: {per_client} exceeds the {len(classes)} classes "
                         f"of the training pool ({scheme}; allowed: 1..{len(classes)})")
    return classes


def _deal(labels: np.ndarray, held: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``held[i]`` are client i's classes; each class's samples are split evenly among
    the clients holding it. Samples of classes nobody holds get owner ``-1``."""
    num_clients, k = held.shape
    owner = np.full(len(labels), -1, dtype=np.int64)
    flat_classes = held.ravel()
    flat_clients = np.repeat(np.arange(num_clients), k)
    order = np.argsort(flat_classes, kind="stable")
    flat_classes, flat_clients = flat_classes[order], flat_clients[order]
    for c in np.unique(flat_classes):
        lo, hi = np.searchsorted(flat_classes, c, "left"), np.searchsorted(flat_classes, c, "right")
        members = rng.permutation(np.flatnonzero(labels == c))
        owner[members] = _even_owners(len(members), flat_clients[lo:hi])
    return owner


def _sample_classes(classes: np.ndarray, num_clients: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Each client draws ``k`` distinct classes uniformly at random: (num_clients, k)."""
    rows = []
    chunk = max(1, (1 << 22) // len(classes))  # bound memory for very many clients
    for start in range(0, num_clients, chunk):
        keys = rng.random((min(chunk, num_clients - start), len(classes)))
        rows.append(np.argpartition(keys, k - 1, axis=1)[:, :k] if k < len(classes) else np.argsort(keys, axis=1))
    return classes[np.concatenate(rows)]


def _dirichlet(labels: np.ndarray, num_clients: int, cfg: DirichletPartition,
               rng: np.random.Generator) -> np.ndarray:
    """Hsu et al. 2019: per class, client shares ~ Dir(alpha); redraw until every client
    holds at least ``min_samples``."""
    n = len(labels)
    need = num_clients * cfg.min_samples
    if need > n:
        raise ValueError(f"dataset.partition.min_samples: {num_clients} clients x {cfg.min_samples} samples need "
                         f"{need} training samples but the pool has {n}; lower min_samples or use fewer clients")
    members = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    for _ in range(_DIRICHLET_TRIES):
        counts = np.empty((len(members), num_clients), dtype=np.int64)
        for row, idx in enumerate(members):
            share = rng.dirichlet(np.full(num_clients, cfg.alpha))
            cuts = (np.cumsum(share) * len(idx)).astype(np.int64)[:-1]
            counts[row] = np.diff(np.concatenate([[0], np.minimum(cuts, len(idx)), [len(idx)]]))
        if counts.sum(axis=0).min() >= cfg.min_samples:
            owner = np.empty(n, dtype=np.int64)
            for row, idx in enumerate(members):
                owner[idx] = np.repeat(np.arange(num_clients), counts[row])
            return owner
    raise ValueError(f"dataset.partition.alpha: Dirichlet(alpha={cfg.alpha}) left some client with fewer than "
                     f"min_samples={cfg.min_samples} samples in {_DIRICHLET_TRIES} draws; raise alpha, lower "
                     "min_samples or use fewer clients")
