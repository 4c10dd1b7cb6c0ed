"""Naturally partitioned data read from published client files (``dataset.format``).

Cross-device benchmarks ship one data set per user (writer, speaking role, ...): LEAF's
JSON folders (:mod:`fedclock.scenarios.data.leaf`), TensorFlow Federated's HDF5 files
(:mod:`fedclock.scenarios.data.tff_h5`) and FedScale's ``client_data_mapping`` CSVs
(:mod:`fedclock.scenarios.data.fedscale_csv`). Each format is a reader class
(:class:`~fedclock.scenarios.data.user_data.ClientFileReader`), each dataset read in it a
subclass, and the dataset's spec names the class for every format
(``DatasetSpec.readers``). Each reader returns the users in file order, each
with its own train and test samples (:class:`UserData`); :func:`natural_dataset` turns them
into one :class:`~fedclock.scenarios.data.datasets.Dataset`:

* the training pool is every user's train samples, concatenated in user order, and the
  global test set the union of every user's test samples (LEAF's evaluation); a user found
  only in the test files (LEAF's ``-t user`` split) adds to the global test set only;
* ``partition: {type: natural}`` makes every user a client with its own train and test
  samples (``natural_clients``/``natural_tests``), so personalized evaluation runs on each
  user's own test set; ``min_samples`` keeps users with at least that many samples (train +
  test, LEAF's ``-k``), then ``sample_clients`` keeps that many users drawn without
  replacement from a generator seeded by (scenario seed, a fixed stream), in file order;
  ``population.num_clients`` must equal the number of users left (the error says it);
  ``max_train_per_client`` keeps each user's first that many training samples, in file order,
  before those filters (its test samples are all kept). That is the per-user cap of Reddi et
  al., "Adaptive Federated Optimization", ICLR 2021, App. C (Stack Overflow: at most 1000
  training sentences per client); **which** 1000 the paper does not say, and the authors'
  public code settles it: github.com/google-research/federated,
  ``utils/datasets/stackoverflow_word_prediction.py``, ``get_federated_datasets``
  (``max_elements_per_train_client=1000``, test clients uncapped) takes a client's first
  examples in file order before shuffling them, as we do;
* TFF's HDF5 files are read **users first** (:mod:`fedclock.scenarios.data.tff_h5`): the filters
  and the sample run on every user's sample counts (read from the files' shapes, the same
  counts, so the same users as reading everything), and only the chosen users' arrays (and
  test-only users', which always stay) are read, so a sample of Stack Overflow's 342,477
  users costs what the sample holds (``benchmarks/RESULTS.md``, "Client files"). LEAF's JSON
  and FedScale's CSVs are parsed whole and then filtered (a JSON file has no lazy reader);
* any other partition splits the pooled training samples as for any data set.

Every client shares the pool: a client costs its two index arrays, not a copy of its data,
so a population of a million users costs what their samples cost plus the index arrays
(``benchmarks/RESULTS.md``, "Client files"). Inputs are used as the files give them (LEAF's
reference models train on them unscaled). ``dataset.generate`` writes a small data set in
the format from the scenario seed into a temporary folder and reads it back
(:mod:`fedclock.scenarios.data.leaf_generate`; Stack Overflow's TFF files:
:mod:`fedclock.scenarios.data.stackoverflow_generate`).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from fedclock.scenarios.data.dataset_specs import DATASETS
from fedclock.scenarios.data.datasets import Dataset, DatasetError, data_root
from fedclock.scenarios.data.partition_config import NaturalPartition
from fedclock.scenarios.data.user_data import ClientFileReader, UserData
from fedclock.scenarios.schema import DatasetConfig
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["ClientFileReader", "UserData", "files_root", "load_client_files", "natural_dataset"]


def files_root(cfg: DatasetConfig) -> Path:
    """The folder holding the files: ``dataset.root`` as given, else
    ``<data root>/<name>_<format>`` (e.g. ``~/.fedclock/data/femnist_leaf``)."""
    if cfg.root is not None:
        return Path(cfg.root).expanduser()
    return data_root(cfg) / f"{cfg.name}_{cfg.format}"


def load_client_files(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """Read ``cfg.format`` files (or generate them, ``cfg.generate``) into a dataset with a
    natural split, with the reader class the dataset's spec names for the format. Raises
    :class:`DatasetError` (one line naming the file) on a bad file."""
    assert cfg.format is not None
    reader: ClientFileReader = DATASETS[cfg.name].reader(cfg.format)
    if cfg.generate is not None:
        with tempfile.TemporaryDirectory(prefix="fedclock-generated-") as tmp:
            reader.write(Path(tmp), cfg.generate, seed)
            return _read(reader, cfg, Path(tmp), seed, num_clients)
    return _read(reader, cfg, files_root(cfg), seed, num_clients)


def _read(reader: ClientFileReader, cfg: DatasetConfig, root: Path, seed: int, num_clients: int) -> Dataset:
    natural = cfg.partition if isinstance(cfg.partition, NaturalPartition) else None
    if natural is not None and reader.reads_users_first:
        part = natural
        users, classes = reader.users(root, lambda train, test: _chosen(train, test, part, seed, root),
                                      natural.max_train_per_client)
        return natural_dataset(cfg, users, classes, seed, num_clients, root, selected=True)
    users, classes = reader.users(root)
    return natural_dataset(cfg, users, classes, seed, num_clients, root)


def natural_dataset(cfg: DatasetConfig, users: list[UserData], num_classes: int, seed: int, num_clients: int,
                    root: Path, selected: bool = False) -> Dataset:
    """The users as one dataset (module docstring): cap, filter and sample them for a natural
    partition (unless the reader did, ``selected``), pool their samples, index every
    client's train and test samples."""
    natural = cfg.partition if isinstance(cfg.partition, NaturalPartition) else None
    if natural is not None and not selected:
        cap = natural.max_train_per_client
        users = [UserData(u.user, u.x_train[:cap], u.y_train[:cap], u.x_test, u.y_test) for u in users]
        keep = _chosen(np.array([len(u.y_train) for u in users], dtype=np.int64),
                       np.array([len(u.y_test) for u in users], dtype=np.int64), natural, seed, root)
        users = [users[int(k)] for k in keep]
    test_only = [u for u in users if len(u.y_train) == 0]
    clients = [u for u in users if len(u.y_train) > 0]
    if not clients:
        raise DatasetError(f"dataset.root: the files under {root} hold no training samples")
    if natural is not None:
        if len(clients) != num_clients:
            raise DatasetError(f"population.num_clients: {num_clients} clients, but the files under {root} give "
                               f"{len(clients)} users (after min_samples and sample_clients); set "
                               f"population.num_clients: {len(clients)} or partition.sample_clients")
    sizes = np.array([len(u.y_train) for u in clients], dtype=np.int64)
    test_sizes = np.array([len(u.y_test) for u in clients + test_only], dtype=np.int64)
    x_train = torch.from_numpy(np.concatenate([u.x_train for u in clients]).astype(np.float32, copy=False))
    y_train = torch.from_numpy(np.concatenate([u.y_train for u in clients]).astype(np.int64, copy=False))
    tests = [u for u in clients + test_only if len(u.y_test)]
    if tests:
        x_test = torch.from_numpy(np.concatenate([u.x_test for u in tests]).astype(np.float32, copy=False))
        y_test = torch.from_numpy(np.concatenate([u.y_test for u in tests]).astype(np.int64, copy=False))
    else:
        x_test, y_test = x_train[:0], y_train[:0]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    test_starts = np.concatenate([[0], np.cumsum(test_sizes)[:-1]])
    train_parts = tuple(np.arange(s, s + n, dtype=np.int64) for s, n in zip(starts, sizes))
    test_parts = tuple(np.arange(s, s + n, dtype=np.int64) for s, n in zip(test_starts[:len(clients)],
                                                                         test_sizes[:len(clients)]))
    return Dataset(cfg.name, x_train.contiguous(), y_train, x_test.contiguous(), y_test, num_classes,
                   train_parts if natural is not None else None, test_parts if natural is not None else None)


def _chosen(train: np.ndarray, test: np.ndarray, natural: NaturalPartition, seed: int, root: Path) -> np.ndarray:
    """Which users stay, given every user's train and test sample counts (in the readers'
    order): LEAF's filters among the users with training samples, at least ``min_samples``
    samples, then ``sample_clients`` at random; users without training samples (test-only)
    always stay. Sorted indices."""
    candidates = np.flatnonzero(train > 0)
    if not len(candidates):
        raise DatasetError(f"dataset.root: the files under {root} hold no training samples")
    if natural.min_samples is not None:
        candidates = candidates[(train + test)[candidates] >= natural.min_samples]
        if not len(candidates):
            raise DatasetError(f"dataset.partition.min_samples: no user under {root} has {natural.min_samples} "
                               "samples; lower min_samples")
    if natural.sample_clients is not None:
        if natural.sample_clients > len(candidates):
            raise DatasetError(f"dataset.partition.sample_clients: {natural.sample_clients} exceeds the "
                               f"{len(candidates)} users under {root} (after min_samples); allowed: "
                               f"1..{len(candidates)}")
        rng = numpy_rng(seed, Stream.DATA, DataStream.SAMPLE_CLIENTS)
        candidates = candidates[np.sort(rng.choice(len(candidates), natural.sample_clients, replace=False))]
    return np.sort(np.concatenate([candidates, np.flatnonzero(train == 0)]))
