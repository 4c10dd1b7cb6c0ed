"""The federation: per-client train/test index arrays over one shared training pool.

:func:`build_federation` is the one place a :class:`Federation` is built, for every kind of
dataset. It loads the dataset (a loader of the registry, a user's, a client-file reader, a
multi-domain source), splits the training pool among clients (a label-based partition, the
dataset's own client split for ``natural``, or a multi-domain source's clients as it dealt
them to its domains), then holds out
``client_test_fraction`` of every client's samples as that client's own test split (a
plain seeded shuffle; with ``client_test_fraction: 0`` clients keep every sample for
training and have no test split, so only global accuracy is measured). With ``pool:
train`` the global test set is the dataset's official one and is never touched. With
``pool: all`` (official train and test pooled before partitioning) the global test set is
the union of the clients' test splits, as in FedReCo (workshop version, App. A.1: FMNIST's
70,000 images over 50 clients, 1,400 each, 70/30 split per client; "training set" 49,000
and "test set" 21,000 are the sums over clients). Every random draw comes from a
generator seeded by (scenario seed, fixed stream id), so the federation depends on the
seed only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from fedclock.actors.federation import ClientIndex, Federation
from fedclock.scenarios.data.client_files import load_client_files
from fedclock.scenarios.data.client_split import client_test_sizes, client_test_split
from fedclock.scenarios.data.dataset_specs import USER_ARRAYS
from fedclock.scenarios.data.datasets import Dataset, DatasetError, load_dataset
from fedclock.scenarios.data.partitions import partition_indices
from fedclock.scenarios.data.partition_config import NaturalPartition
from fedclock.scenarios.data.user_arrays import user_arrays_federation
from fedclock.scenarios.schema import DatasetConfig
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["Federation", "build_federation", "with_own_tests"]


def build_federation(cfg: DatasetConfig, num_clients: int, seed: int, plugin_dir: Path | None = None) -> Federation:
    """Load ``cfg``'s dataset and split it among ``num_clients`` clients (a user's dataset
    loader is looked for in ``plugin_dir`` first, the scenario file's folder).

    Raises :class:`DatasetError` (one line naming the scenario field) when files are
    missing or broken, when the partition cannot be drawn, or when a client would be left
    without training data.
    """
    if cfg.format == USER_ARRAYS:  # mapped from the files, nothing loaded (its own partition: every user a client)
        return user_arrays_federation(cfg, seed, num_clients)
    ds = load_client_files(cfg, seed, num_clients) if cfg.format is not None else \
        load_dataset(cfg, seed, num_clients, plugin_dir)
    if ds.natural_tests is not None and ds.natural_clients is not None:
        return with_own_tests(ds)
    split_stream = DataStream.CLIENT_SPLIT
    parts: Sequence[np.ndarray]
    if ds.domains is not None:  # dealt within each domain by the source (dataset.partition applied there)
        parts, split_stream = ds.domains.clients, DataStream.DOMAIN_CLIENT_SPLIT
    elif isinstance(cfg.partition, NaturalPartition):
        if ds.natural_clients is None or len(ds.natural_clients) != num_clients:
            raise DatasetError(f"dataset.partition: {cfg.name} has no natural split into {num_clients} clients; "
                               "use another partition type")
        parts = ds.natural_clients if isinstance(ds.natural_clients, ClientIndex) else \
            [np.asarray(p, dtype=np.int64) for p in ds.natural_clients]  # a ClientIndex hands out one view at a time
    else:
        if ds.y_train.dim() > 1 and cfg.partition.type != "iid":
            raise DatasetError(f"dataset.partition.type: {cfg.partition.type} splits by class, but {cfg.name} has "
                               "a target per token (allowed: natural, iid)")
        rng = numpy_rng(seed, Stream.DATA, DataStream.PARTITION)
        try:
            parts = partition_indices(ds.y_train.numpy(), num_clients, cfg.partition, rng)
        except ValueError as err:
            raise DatasetError(str(err)) from err
    rng = numpy_rng(seed, Stream.DATA, split_stream)
    # written straight into flat arrays (ClientIndex) of their final size: no train and test
    # array per client, and no larger array to copy them out of
    sizes = parts.sizes() if isinstance(parts, ClientIndex) else \
        np.fromiter((len(idx) for idx in parts), dtype=np.int64, count=len(parts))
    if len(sizes) and not sizes.all():
        raise DatasetError(f"population.num_clients: {num_clients} clients leave client {int(np.argmin(sizes))} "
                           "with no data; use fewer clients or a larger dataset")
    held_out = client_test_sizes(sizes, cfg.client_test_fraction)
    ends_train, ends_test = np.zeros(len(sizes) + 1, dtype=np.int64), np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes - held_out, out=ends_train[1:])
    np.cumsum(held_out, out=ends_test[1:])
    flat_train, flat_test = np.empty(ends_train[-1], dtype=np.int64), np.empty(ends_test[-1], dtype=np.int64)
    if cfg.client_test_fraction == 0 and isinstance(parts, ClientIndex):
        # nothing held out: each client's indices sorted, as the loop's split gives them (its
        # shuffles draw from a stream nothing else reads), in one pass instead of one call a client
        flat_train[:] = _sorted_within(parts.flat, parts.offsets)
    else:
        for k, idx in enumerate(parts):
            tr, te = client_test_split(idx, cfg.client_test_fraction, rng, int(held_out[k]))
            flat_train[ends_train[k]:ends_train[k + 1]] = tr
            flat_test[ends_test[k]:ends_test[k + 1]] = te
    train = ClientIndex(flat_train, ends_train)
    test = ClientIndex(flat_test, ends_test)
    x_test, y_test = ds.x_test, ds.y_test
    if cfg.pool == "all":
        pooled_test = torch.from_numpy(np.sort(test.flat))
        x_test, y_test = ds.x_train[pooled_test], ds.y_train[pooled_test]
    if ds.domains is None:
        return Federation(x=ds.x_train, y=ds.y_train, client_train=train, client_test=test,
                          x_test=x_test, y_test=y_test, num_classes=ds.num_classes, dataset_name=ds.name)
    return Federation(x=ds.x_train, y=ds.y_train, client_train=train, client_test=test,
                      x_test=x_test, y_test=y_test, num_classes=ds.num_classes, dataset_name=ds.name,
                      domain_names=ds.domains.names, client_domain=ds.domains.client_domain,
                      train_domain=ds.domains.train_domain, test_domain=ds.domains.test_domain)


def _sorted_within(flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``flat`` with every segment ``offsets[k]:offsets[k + 1]`` sorted (already sorted
    segments, as a natural split's are, cost one comparison pass)."""
    descents = np.flatnonzero(flat[1:] < flat[:-1]) + 1  # positions where a value is below the one before
    if not len(descents) or np.isin(descents, offsets).all():
        return flat
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return flat[np.lexsort((flat, owner))]


def with_own_tests(ds: Dataset) -> Federation:
    """Client files with a natural split: every client keeps its own train and test samples
    (:mod:`fedclock.scenarios.data.client_files`); the test samples sit after the training pool in
    the shared tensors, and the global test set is their union."""
    assert ds.natural_clients is not None and ds.natural_tests is not None
    offset = len(ds.y_train)
    x = torch.cat([ds.x_train, ds.x_test])
    y = torch.cat([ds.y_train, ds.y_test])
    tests = [np.asarray(t, dtype=np.int64) + offset for t in ds.natural_tests]
    return Federation(x=x, y=y, client_train=[np.asarray(p, dtype=np.int64) for p in ds.natural_clients],
                      client_test=tests, x_test=x[offset:], y_test=y[offset:], num_classes=ds.num_classes,
                      dataset_name=ds.name)
