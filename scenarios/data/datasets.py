"""Datasets loaded whole into memory as tensors.

Every dataset becomes a :class:`Dataset`: a training pool and a global test set as float32
tensors plus int64 labels. Images are ``(N, C, H, W)``; vectors are ``(N, D)``.

Choices, in one place:

* **Normalization.** Images are scaled to [0, 1] (``digits`` from 0..16, the rest from
  0..255), optionally resized (``image_size``, bilinear), then standardized per channel
  with the mean and standard deviation of the training pool as kept (after
  ``max_train_samples``); the test set uses the same constants. Synthetic vectors are
  left as generated, like the FedProx code base.
* **Pool.** With ``pool: all`` the official train and test splits are concatenated (train
  first) into one pool before everything below, and the dataset's test set is empty: the
  federation takes the global test set from the clients' own test splits
  (:mod:`fedclock.scenarios.data.federation`). Only datasets with an official split allow it.
* **digits** has no official test split: a stratified ``global_test_fraction`` of each
  class goes to the test set, drawn from the scenario seed.
* **synthetic** follows FedProx Synthetic(alpha, beta) (see :func:`_synthetic`). Client
  sizes follow the FedProx code base, ``lognormal(4, 2) + 50`` per client, rescaled so the
  total is ``synthetic_samples`` (at least 4 samples per client, so the total can be a
  little larger when there are very many clients). ``synthetic_draws: blocks`` draws many
  clients per call (the same model, other draws; for millions of clients). ``max_train_samples`` subsamples every
  client's training samples proportionally (at least one each).
* **MNIST, Fashion-MNIST, EMNIST** are read from the uncompressed IDX files under
  ``<root>/<Name>/raw`` (the files and folders ``torchvision.datasets`` uses), or, when that
  folder holds none of them, from the four files lying directly in ``<root>`` (a flat folder
  of the published files, as distributed); ``.gz`` files found under ``raw`` instead are
  decompressed beside themselves first (torchvision's cache), those of a flat folder or of a
  folder without write permission in memory (a user's folder is never written to). Files are checked (IDX
  header against the file size), so a broken file is named, and then read by this module
  with NumPy (an unsigned-byte IDX file is a 4-byte magic number, the dimensions, then the
  bytes: the same arrays torchvision's reader returns) — importing ``torchvision.datasets``
  costs a second or more of a run's start-up, as it imports every torchvision model.
  ``download: true`` still fetches the files through torchvision. EMNIST images are
  transposed upright, and the ``letters`` split's labels 1..26 become 0..25.
* **TinyImageNet** is read from image folders by :mod:`fedclock.scenarios.data.tinyimagenet`.
* **CIFAR-10/100** are read from the python pickles under ``<root>/cifar-10-batches-py``
  or ``<root>/cifar-100-python`` by this module (same on-disk format as torchvision):
  torchvision insists on the official MD5 of every file, which would reject subsets and
  test fixtures and would only say "not found or corrupted" without naming the file.
  ``download: true`` still fetches and verifies the official archive through torchvision.
  The pickles are trusted local files, as they are for torchvision.
"""
from __future__ import annotations

import gzip
import importlib.util
import inspect
import os
import pickle
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedclock.actors.federation import ClientIndex
from fedclock.scenarios.data.dataset_specs import DATASET_NAMES, DATASETS, PublishedFiles
from fedclock.scenarios.plugins import PluginError, find
from fedclock.scenarios.memory_estimate import SYNTHETIC_MIN_PER_CLIENT, machine_memory, synthetic_bytes
from fedclock.scenarios.schema import DatasetConfig
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["Dataset", "DatasetError", "DomainSplit", "data_root", "download_files", "load_dataset",
           "read_idx_files"]

_SYNTHETIC_MIN_PER_CLIENT = SYNTHETIC_MIN_PER_CLIENT


class DatasetError(Exception):
    """One-line, user-facing message; names the file/folder and what to do."""


@dataclass(frozen=True, eq=False)
class DomainSplit:
    """A multi-domain source's clients (:mod:`fedclock.scenarios.data.domains`): every
    client's training samples, drawn within its domain, and the domain of every client and
    sample."""

    names: tuple[str, ...]
    clients: tuple[np.ndarray, ...]
    """Every client's indices into the training pool, before its own test split."""
    client_domain: np.ndarray
    train_domain: np.ndarray
    test_domain: np.ndarray


@dataclass(frozen=True, eq=False)
class Dataset:
    """A dataset in memory: training pool, global test set, and (optionally) its own
    per-client split of the training pool."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    natural_clients: Sequence[np.ndarray] | None = None
    natural_tests: tuple[np.ndarray, ...] | None = None
    """Client files only: every natural client's own test samples (indices into ``x_test``,
    which is their union)."""
    domains: DomainSplit | None = None
    """Multi-domain sources only: the clients as dealt to the domains; the federation keeps them
    whatever ``dataset.partition`` says (the source applied it within each domain)."""

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input sample."""
        return tuple(self.x_train.shape[1:])


def data_root(cfg: DatasetConfig) -> Path:
    """Folder holding downloaded datasets: ``cfg.root``, else ``$FEDCLOCK_DATA``, else
    ``~/.fedclock/data``."""
    if cfg.root is not None:
        return Path(cfg.root).expanduser()
    env = os.environ.get("FEDCLOCK_DATA")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".fedclock" / "data"


def load_dataset(cfg: DatasetConfig, seed: int, num_clients: int, plugin_dir: Path | None = None) -> Dataset:
    """Load ``cfg.name`` into memory, deterministically from ``seed``, with the loader its
    spec names (:mod:`fedclock.scenarios.data.dataset_specs`), or a user's loader. ``num_clients``
    is only used by datasets with their own client split (synthetic); ``plugin_dir`` (the
    scenario file's folder) is where a user's loader is looked for first. Raises
    :class:`DatasetError` for missing or broken files."""
    spec = DATASETS.get(cfg.name)
    if spec is None:
        return _user_dataset(cfg, seed, num_clients, plugin_dir)
    if spec.loader is None:  # pragma: no cover - the schema asks for dataset.format
        raise DatasetError(f"dataset.format: {cfg.name} is read from client files, not loaded whole")
    dataset: Dataset = spec.load_function()(cfg, seed, num_clients)
    return dataset


def load_idx_family(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """MNIST, Fashion-MNIST or EMNIST from their IDX files (``num_clients`` is not used)."""
    x_tr, y_tr, x_te, y_te, classes = _load_idx_family(cfg, data_root(cfg))
    return _finish_images(cfg, seed, x_tr, y_tr, x_te, y_te, classes, scale=255.0)


def load_cifar(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """CIFAR-10 or CIFAR-100 from their python pickles (``num_clients`` is not used); with
    ``dataset.generate``, CIFAR-10's pickles are first written from the seed into a temporary
    folder (:mod:`fedclock.scenarios.data.cifar_generate`) and read back through the same reader."""
    if cfg.generate is not None:
        from fedclock.scenarios.data.cifar_generate import write_cifar10

        with tempfile.TemporaryDirectory(prefix="fedclock-generated-") as tmp:
            write_cifar10(Path(tmp), cfg.generate, seed)
            x_tr, y_tr, x_te, y_te, classes = _load_cifar(cfg, Path(tmp))
        return _finish_images(cfg, seed, x_tr, y_tr, x_te, y_te, classes, scale=255.0)
    x_tr, y_tr, x_te, y_te, classes = _load_cifar(cfg, data_root(cfg))
    return _finish_images(cfg, seed, x_tr, y_tr, x_te, y_te, classes, scale=255.0)


def load_tinyimagenet(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """TinyImageNet from its image folders (:mod:`fedclock.scenarios.data.tinyimagenet`; ``num_clients``
    is not used)."""
    from fedclock.scenarios.data.tinyimagenet import TinyImageNetMissing, load_tinyimagenet as read

    root = data_root(cfg)
    if cfg.download:
        raise DatasetError("dataset.download: TinyImageNet cannot be downloaded by fedclock; extract "
                           f"tiny-imagenet-200 under {root} and set download: false")
    try:
        x_tr, y_tr, x_te, y_te, classes = read(root, cfg.image_size)
    except TinyImageNetMissing as err:
        raise DatasetError(str(err)) from None
    return _finish_images(cfg, seed, x_tr, y_tr, x_te, y_te, classes, scale=255.0)


# --------------------------------------------------------------------------- a user's dataset
LOADER_ARGUMENTS = ("seed", "num_clients")
"""Keyword arguments a user's dataset loader may declare; fedclock passes those it declares."""


def check_loader(name: str, loader: Any) -> None:
    """A user's dataset loader must be callable with no arguments besides those of
    :data:`LOADER_ARGUMENTS` (:class:`~fedclock.scenarios.plugins.PluginError` otherwise)."""
    try:
        signature = inspect.signature(loader)
    except (TypeError, ValueError):
        return  # a builtin or C callable: called without arguments
    required = [p.name for p in signature.parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and p.name not in LOADER_ARGUMENTS]
    if required:
        raise PluginError(f"dataset.name: {name} needs the arguments {', '.join(required)}; a dataset loader takes "
                          f"none, or only {' and '.join(LOADER_ARGUMENTS)}")


def _user_dataset(cfg: DatasetConfig, seed: int, num_clients: int, plugin_dir: Path | None) -> Dataset:
    """A user's dataset (``dataset.name: module:attribute`` or an entry point): the loader
    returns a mapping with ``x_train``, ``y_train``, ``x_test``, ``y_test`` (NumPy arrays or
    tensors; labels are class indices 0..C-1) and optionally ``client_ids`` (one client id
    0..K-1 per training sample, for ``partition: {type: natural}``) and ``num_classes``
    (default: the largest label + 1). Inputs are used as given (no scaling);
    ``max_train_samples`` keeps a seeded random subset of the training pool."""
    loader = find("dataset", cfg.name, plugin_dir, DATASET_NAMES).obj
    accepted = _accepted_arguments(loader)
    given = {"seed": seed, "num_clients": num_clients}
    raw = loader(**{k: v for k, v in given.items() if k in accepted})
    where = f"dataset.name: {cfg.name}"
    if not isinstance(raw, Mapping):
        raise DatasetError(f"{where} returned a {type(raw).__name__}; it must return a mapping with x_train, y_train, "
                           "x_test, y_test")
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in raw]
    if missing:
        raise DatasetError(f"{where} returned no {', '.join(missing)} (a loader returns x_train, y_train, x_test, "
                           "y_test and optionally client_ids, num_classes)")
    x_tr, x_te = (torch.as_tensor(np.asarray(raw[k]), dtype=torch.float32) for k in ("x_train", "x_test"))
    y_tr, y_te = (torch.as_tensor(np.asarray(raw[k])).to(torch.int64) for k in ("y_train", "y_test"))
    if x_tr.shape[0] != y_tr.shape[0] or x_te.shape[0] != y_te.shape[0] or x_tr.shape[1:] != x_te.shape[1:]:
        raise DatasetError(f"{where}: x_train {tuple(x_tr.shape)}, y_train {tuple(y_tr.shape)}, x_test "
                           f"{tuple(x_te.shape)}, y_test {tuple(y_te.shape)} do not match (one label per sample, "
                           "the same sample shape)")
    if len(y_tr) == 0:
        raise DatasetError(f"{where} returned no training samples")
    labels = torch.cat([y_tr, y_te])
    num_classes = int(raw.get("num_classes", int(labels.max()) + 1))
    if int(labels.min()) < 0 or int(labels.max()) >= num_classes:
        raise DatasetError(f"{where}: labels must be class indices 0..{num_classes - 1}")
    ids = None if raw.get("client_ids") is None else np.asarray(raw["client_ids"]).astype(np.int64)
    if ids is not None and ids.shape != (len(y_tr),):
        raise DatasetError(f"{where}: client_ids must hold one client id per training sample ({len(y_tr)})")
    if cfg.max_train_samples is not None and cfg.max_train_samples < len(y_tr):
        keep = _subsample(seed, len(y_tr), cfg.max_train_samples)
        x_tr, y_tr = x_tr[torch.from_numpy(keep)], y_tr[torch.from_numpy(keep)]
        ids = ids[keep] if ids is not None else None
    natural = None
    if ids is not None:
        natural = tuple(np.flatnonzero(ids == k) for k in range(int(ids.max()) + 1))
    return Dataset(cfg.name, x_tr.contiguous(), y_tr, x_te.contiguous(), y_te, num_classes, natural)


def _accepted_arguments(loader: Callable[..., Any]) -> set[str]:
    try:
        parameters = inspect.signature(loader).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return set(LOADER_ARGUMENTS)
    return {p.name for p in parameters if p.name in LOADER_ARGUMENTS}


# --------------------------------------------------------------------------- helpers
def _subsample(seed: int, total: int, keep: int) -> np.ndarray:
    """``dataset.max_train_samples``: the sorted indices of ``keep`` of ``total`` training samples."""
    return np.sort(numpy_rng(seed, Stream.DATA, DataStream.SUBSAMPLE).choice(total, keep, replace=False))


def _finish_images(cfg: DatasetConfig, seed: int, x_train: torch.Tensor, y_train: torch.Tensor,
                   x_test: torch.Tensor, y_test: torch.Tensor, num_classes: int, scale: float) -> Dataset:
    """Pool train and test (``pool: all``), subsample the pool, scale to [0, 1], resize,
    standardize per channel."""
    if cfg.pool == "all":
        x_train, y_train = torch.cat([x_train, x_test]), torch.cat([y_train, y_test])
        x_test, y_test = x_train[:0], y_train[:0]
    if cfg.max_train_samples is not None and cfg.max_train_samples < len(y_train):
        keep = _subsample(seed, len(y_train), cfg.max_train_samples)
        keep_t = torch.from_numpy(keep)
        x_train, y_train = x_train[keep_t], y_train[keep_t]
    x_train = x_train.to(torch.float32, copy=True).div_(scale)
    x_test = x_test.to(torch.float32, copy=True).div_(scale)
    if cfg.image_size is not None and tuple(x_train.shape[2:]) != (cfg.image_size, cfg.image_size):
        size = (cfg.image_size, cfg.image_size)
        x_train = F.interpolate(x_train, size=size, mode="bilinear", align_corners=False)
        x_test = F.interpolate(x_test, size=size, mode="bilinear", align_corners=False)
    mean = x_train.mean(dim=(0, 2, 3), keepdim=True)
    std = x_train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    x_train = x_train.sub_(mean).div_(std)
    x_test = x_test.sub_(mean).div_(std)
    return Dataset(cfg.name, x_train.contiguous(), y_train.to(torch.int64), x_test.contiguous(),
                   y_test.to(torch.int64), num_classes, None)


def _check_labels(y: torch.Tensor, num_classes: int, where: Path) -> None:
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DatasetError(f"dataset.root: labels in {where} lie outside 0..{num_classes - 1}; "
                           "the file is corrupt or from another dataset, replace it")


# --------------------------------------------------------------------------- digits
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``load_digits(return_X_y=True)``: its bundled ``digits.csv.gz`` read as
    scikit-learn reads it (``np.loadtxt``, the last column the label), without importing
    scikit-learn, which costs a cold run more CPU than the rest of its data loading (about
    3 CPU seconds on the loaded 2-core machine, ``benchmarks/RESULTS.md``, "Ray start-up").
    A scikit-learn whose file is not where this looks is asked the usual way."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    origin = Path(spec.origin) if spec is not None and spec.origin is not None else None
    path = origin.parent / "datasets" / "data" / "digits.csv.gz" if origin is not None else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits as sklearn_digits

        x, y = sklearn_digits(return_X_y=True)
        return x, y
    with gzip.open(path, mode="rt", encoding="utf-8") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)


def load_digits(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """scikit-learn digits with a stratified, seeded global test split (``num_clients`` is not
    used)."""
    x, y = _digits_arrays()
    rng = numpy_rng(seed, Stream.DATA, DataStream.DIGITS_SPLIT)
    test_parts = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test_parts.append(idx[: int(np.floor(cfg.global_test_fraction * len(idx) + 0.5))])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_parts)] = True
    images = torch.from_numpy(x.astype(np.float32)).reshape(-1, 1, 8, 8)
    labels = torch.from_numpy(y.astype(np.int64))
    train, test = torch.from_numpy(~is_test), torch.from_numpy(is_test)
    return _finish_images(cfg, seed, images[train], labels[train], images[test], labels[test], 10, scale=16.0)


# --------------------------------------------------------------------------- MNIST-1D
def load_mnist1d(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """MNIST-1D vectors (N, 40), generated locally (:mod:`fedclock.scenarios.data.mnist1d`), used as
    generated (the package standardizes them); ``max_train_samples`` subsamples the pool
    (``num_clients`` is not used)."""
    from fedclock.scenarios.data.mnist1d import load_mnist1d as generate

    if cfg.image_size is not None:
        raise DatasetError("dataset.image_size: mnist1d samples are 1-D signals, not images; remove image_size")
    raw = generate(cfg.mnist1d_samples, cfg.global_test_fraction, data_root(cfg))
    x_tr, y_tr = torch.from_numpy(raw["x_train"]), torch.from_numpy(raw["y_train"])
    if cfg.max_train_samples is not None and cfg.max_train_samples < len(y_tr):
        keep = torch.from_numpy(_subsample(seed, len(y_tr), cfg.max_train_samples))
        x_tr, y_tr = x_tr[keep], y_tr[keep]
    return Dataset(cfg.name, x_tr.contiguous(), y_tr, torch.from_numpy(raw["x_test"]).contiguous(),
                   torch.from_numpy(raw["y_test"]), 10, None)


# --------------------------------------------------------------------------- synthetic
def load_synthetic(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """FedProx Synthetic(alpha, beta) (Li et al. 2020, after Shamir et al.).

    For client k: ``u_k ~ N(0, alpha)``, ``W_k ~ N(u_k, 1)`` (classes x dim),
    ``b_k ~ N(u_k, 1)``, ``B_k ~ N(0, beta)``, ``v_k ~ N(B_k, 1)`` per feature,
    ``x ~ N(v_k, diag(j^-1.2))`` and ``y = argmax(W_k x + b_k)``. (As in the original,
    ``u_k`` shifts every class's score by the same amount, so ``beta`` is what moves the
    label distribution; ``alpha`` changes the models only through the drawn noise.)
    Standard deviations are ``alpha`` and ``beta``, as in the FedProx generator.
    """
    if cfg.image_size is not None:
        raise DatasetError("dataset.image_size: synthetic data are vectors, not images; remove image_size")
    rng = numpy_rng(seed, Stream.DATA, DataStream.SYNTHETIC)
    dim, classes = cfg.synthetic_features, cfg.synthetic_classes
    sizes = _synthetic_sizes(rng, num_clients, cfg.synthetic_samples)
    need = synthetic_bytes(int(sizes.sum()), dim)  # each client is raised to a minimum size
    if need > machine_memory():
        raise DatasetError(f"population.num_clients: {num_clients:,} clients of at least {_SYNTHETIC_MIN_PER_CLIENT} "
                           f"synthetic samples x {dim} features need about {need / 2**30:,.1f} GiB (estimated "
                           f"before allocating), more than this machine's {machine_memory() / 2**30:,.1f} GiB of "
                           f"memory; use fewer clients or features")
    cov_sd = np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2) ** 0.5
    u = rng.normal(0.0, cfg.synthetic_alpha, num_clients)
    big_b = rng.normal(0.0, cfg.synthetic_beta, num_clients)
    # every client's samples are written straight into the flat arrays (the same draws in the
    # same order as drawing and concatenating them): no arrays per client, which cost about
    # 1 KB per client beside the samples (benchmarks/RESULTS.md, "Idle clients")
    n_tests = np.minimum(sizes - 1, np.floor(cfg.global_test_fraction * sizes + 0.5).astype(np.int64))
    test_ends, train_ends = np.cumsum(n_tests), np.cumsum(sizes - n_tests)
    x_test, y_test = np.empty((int(test_ends[-1]), dim), np.float32), np.empty(int(test_ends[-1]), np.int64)
    x_train, y_train = np.empty((int(train_ends[-1]), dim), np.float32), np.empty(int(train_ends[-1]), np.int64)
    for k in range(num_clients if cfg.synthetic_draws == "client" else 0):
        w = rng.normal(u[k], 1.0, (classes, dim))
        b = rng.normal(u[k], 1.0, classes)
        v = rng.normal(big_b[k], 1.0, dim)
        x = v + rng.standard_normal((sizes[k], dim)) * cov_sd
        y = np.argmax(x @ w.T + b, axis=1)
        n_test, test_end, train_end = n_tests[k], test_ends[k], train_ends[k]
        x_test[test_end - n_test:test_end], y_test[test_end - n_test:test_end] = x[:n_test], y[:n_test]
        n_train = sizes[k] - n_test
        x_train[train_end - n_train:train_end], y_train[train_end - n_train:train_end] = x[n_test:], y[n_test:]
    if cfg.synthetic_draws == "blocks":
        _synthetic_blocks(rng, sizes, n_tests, u, big_b, cov_sd, classes, (x_train, y_train, x_test, y_test))
    counts = sizes - n_tests
    clients = ClientIndex(np.arange(len(y_train), dtype=np.int64), np.concatenate([[0], train_ends]))
    if cfg.max_train_samples is not None and cfg.max_train_samples < len(y_train):
        keep_per_client = np.minimum(_proportional(counts, cfg.max_train_samples, minimum=1), counts)
        kept = [np.sort(rng.choice(idx, n, replace=False)) for idx, n in zip(clients, keep_per_client)]
        keep = np.concatenate(kept)
        x_train, y_train = x_train[keep], y_train[keep]
        clients = ClientIndex(np.arange(len(keep), dtype=np.int64),
                              np.concatenate([[0], np.cumsum(keep_per_client)]).astype(np.int64))
    return Dataset("synthetic", torch.from_numpy(x_train), torch.from_numpy(y_train), torch.from_numpy(x_test),
                   torch.from_numpy(y_test), classes, clients)


SYNTHETIC_BLOCK_SAMPLES = 200_000
"""``synthetic_draws: blocks``: about this many samples drawn in one call."""


def _synthetic_blocks(rng: np.random.Generator, sizes: np.ndarray, n_tests: np.ndarray, u: np.ndarray,
                      big_b: np.ndarray, cov_sd: np.ndarray, classes: int,
                      out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    """:func:`load_synthetic`'s draws for ``synthetic_draws: blocks``: the same model per client
    (``W_k``, ``b_k``, ``v_k``, ``x``, ``y = argmax(W_k x + b_k)``), drawn for a block of clients
    (about :data:`SYNTHETIC_BLOCK_SAMPLES` samples) per call instead of one client per call; a
    client's first ``n_tests[k]`` samples are its test samples, as in the per-client loop."""
    x_train, y_train, x_test, y_test = out
    dim = len(cov_sd)
    n = len(sizes)
    train_at = test_at = 0
    start = 0
    ends = np.cumsum(sizes)
    while start < n:
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + SYNTHETIC_BLOCK_SAMPLES, side="right")))
        stop = min(stop, n, start + max(1, SYNTHETIC_BLOCK_SAMPLES // (classes * dim)))  # W: classes x dim a client
        m = stop - start
        w = rng.normal(u[start:stop, None, None], 1.0, (m, classes, dim))
        b = rng.normal(u[start:stop, None], 1.0, (m, classes))
        v = rng.normal(big_b[start:stop, None], 1.0, (m, dim))
        block_sizes = sizes[start:stop]
        owner = np.repeat(np.arange(m), block_sizes)
        x = v[owner]
        x += rng.standard_normal((len(owner), dim)) * cov_sd
        y = np.argmax(np.einsum("scd,sd->sc", w[owner], x) + b[owner], axis=1)
        first = np.concatenate([[0], np.cumsum(block_sizes)[:-1]])
        is_test = (np.arange(len(owner)) - first[owner]) < n_tests[start:stop][owner]
        k_test = int(is_test.sum())
        x_test[test_at:test_at + k_test], y_test[test_at:test_at + k_test] = x[is_test], y[is_test]
        k_train = len(owner) - k_test
        x_train[train_at:train_at + k_train], y_train[train_at:train_at + k_train] = x[~is_test], y[~is_test]
        test_at, train_at = test_at + k_test, train_at + k_train
        start = stop


def _synthetic_sizes(rng: np.random.Generator, num_clients: int, total: int) -> np.ndarray:
    """FedProx's ``lognormal(4, 2) + 50`` client sizes, rescaled to sum to ``total``."""
    raw = rng.lognormal(4.0, 2.0, num_clients) + 50.0
    return _proportional(raw, total, minimum=_SYNTHETIC_MIN_PER_CLIENT)


def _proportional(weights: np.ndarray, total: int, minimum: int) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (largest remainders),
    each raised to ``minimum`` if below it."""
    share = np.asarray(weights, dtype=np.float64) / float(np.sum(weights)) * total
    out = np.floor(share).astype(np.int64)
    short = total - int(out.sum())
    if short > 0:
        out[np.argsort(-(share - out), kind="stable")[:short]] += 1
    return np.maximum(out, minimum)


# --------------------------------------------------------------------------- IDX (MNIST family)
def _load_idx_family(cfg: DatasetConfig, root: Path
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """MNIST, Fashion-MNIST or EMNIST from the IDX files its spec names, after checking them."""
    return read_idx_files(_files(cfg).for_split(cfg.emnist_split), root, cfg.download)


def _files(cfg: DatasetConfig) -> PublishedFiles:
    """The published files ``cfg.name``'s spec names."""
    files = DATASETS[cfg.name].files
    assert files is not None, f"{cfg.name}'s spec names no files"
    return files


def read_idx_files(files: PublishedFiles, root: Path, download: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The training and test images (N, 1, H, W, unsigned bytes) and labels of ``files``
    (an IDX dataset's, with its EMNIST split filled in) under ``root``, and its classes;
    missing files are downloaded through torchvision with ``download``."""
    title, folder, classes = files.title, files.folder, files.classes
    names = [*files.train, *files.test]
    raw = root / folder / "raw"
    flat = not any(_present(raw / n) for n in names) and all(_present(root / n) for n in names)
    if flat:
        raw = root  # a flat folder holding the four files as published
    paths = [raw / n for n in names]
    if download and not all(_present(p) for p in paths):
        download_files(title, root, lambda: _torchvision_files(files, str(root)))
    sources = [_ensure_plain(p, title, root, in_memory=flat) for p in paths]
    dims = []
    for (img, lbl), (img_src, lbl_src) in zip(((paths[0], paths[1]), (paths[2], paths[3])),
                                              ((sources[0], sources[1]), (sources[2], sources[3]))):
        dims += [_check_idx(img_src, 3, img), _check_idx(lbl_src, 1, lbl)]
        if dims[-2][0] != dims[-1][0]:
            raise DatasetError(f"dataset.root: {img} holds {dims[-2][0]} images but {lbl} holds {dims[-1][0]} "
                               "labels; the files do not belong together, replace them")
    tensors = []
    for k in (0, 2):
        x = _read_idx(sources[k], dims[k])
        y = _read_idx(sources[k + 1], dims[k + 1]).to(torch.int64)
        train = k == 0
        if files.upright:
            x = x.transpose(1, 2)
            if files.split == "letters":
                y = y - 1
        _check_labels(y, classes, paths[1] if train else paths[3])
        tensors += [x.unsqueeze(1), y]
    return tensors[0], tensors[1], tensors[2], tensors[3], classes


def _torchvision_files(files: PublishedFiles, root: str) -> Any:
    """Download the dataset's files through torchvision (``dataset.download: true``)."""
    import torchvision.datasets as tvd

    split = {"split": files.split} if files.split else {}
    return getattr(tvd, files.torchvision)(root, train=True, download=True, **split)


def _read_idx(source: Path | bytes, dims: tuple[int, ...]) -> torch.Tensor:
    """The unsigned bytes of an IDX file (a path, or its bytes when decompressed in memory)
    checked by :func:`_check_idx`, shaped ``dims``."""
    offset = 4 + 4 * len(dims)
    if isinstance(source, bytes):
        data = np.frombuffer(source, dtype=np.uint8, offset=offset).copy()
    else:
        data = np.fromfile(source, dtype=np.uint8, offset=offset)
    return torch.from_numpy(data.reshape(dims))


def _gz(path: Path) -> Path:
    return path.with_name(path.name + ".gz")


def _present(path: Path) -> bool:
    """Whether the IDX file or its ``.gz`` exists."""
    return path.is_file() or _gz(path).is_file()


def _ensure_plain(path: Path, title: str, root: Path, in_memory: bool) -> Path | bytes:
    """The uncompressed file: ``path`` itself, ``<file>.gz`` decompressed beside it, or, with
    ``in_memory`` (a user's flat folder) or when the folder is not writable, the decompressed
    bytes."""
    if path.is_file():
        return path
    gz = _gz(path)
    if not gz.is_file():
        raise DatasetError(f"dataset.root: {title} not found under {root} (expected {path}[.gz], or the four "
                           f"files directly in {root}); put the files there or set dataset.download: true")
    if in_memory or not os.access(path.parent, os.W_OK):
        try:
            return gzip.decompress(gz.read_bytes())
        except (gzip.BadGzipFile, EOFError, zlib.error) as err:
            raise DatasetError(f"dataset.root: {gz} is truncated or corrupt ({_one_line(err)}); "
                               "put a good copy there or set dataset.download: true") from err
    tmp = path.with_name(path.name + ".part")
    try:
        with gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        tmp.unlink(missing_ok=True)
        raise DatasetError(f"dataset.root: {gz} is truncated or corrupt ({_one_line(err)}); "
                           "delete it and put a good copy there or set dataset.download: true") from err
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise DatasetError(f"dataset.root: cannot decompress {gz} into {path} ({_one_line(err)}); "
                           "decompress it yourself or make the folder writable") from err
    return path


def _check_idx(source: Path | bytes, ndim: int, path: Path) -> tuple[int, ...]:
    """Validate an IDX ubyte file's header against its size (``source``: the file, or its bytes;
    ``path``: the name errors give); return its dimensions."""
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    header_len = 4 + 4 * ndim
    if isinstance(source, bytes):
        header = source[:header_len]
    else:
        with open(source, "rb") as f:
            header = f.read(header_len)
    bad = len(header) < header_len or header[:3] != b"\x00\x00\x08" or header[3] != ndim
    dims = tuple(int.from_bytes(header[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)) if not bad else ()
    expected = header_len + int(np.prod(dims)) if not bad else -1
    if bad or size != expected:
        what = "not an IDX ubyte file" if bad else f"expected {expected} bytes, found {size}"
        raise DatasetError(f"dataset.root: {path} is truncated or corrupt ({what}); "
                           "delete it and put a good copy there or set dataset.download: true")
    return dims


def download_files(title: str, root: Path, fetch: Callable[[], Any]) -> None:
    """Run ``fetch`` (a torchvision download of ``title`` into ``root``), its failure a
    :class:`DatasetError` of one line."""
    try:
        fetch()
    except (RuntimeError, OSError, ValueError) as err:
        raise DatasetError(f"dataset.download: could not download {title} into {root} ({_one_line(err)}); "
                           "check the network or put the files there yourself") from err


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return (text[:200] + "...") if len(text) > 200 else (text or type(err).__name__)


# --------------------------------------------------------------------------- CIFAR
def _load_cifar(cfg: DatasetConfig, root: Path
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """CIFAR-10/100 python pickles, read here (download through torchvision, imported only then:
    importing ``torchvision.datasets`` imports PyTorch's compiler, 1.7-2.5 s)."""
    published = _files(cfg)
    title, folder, classes, key = published.title, published.folder, published.classes, published.label_key
    train_files, test_files = list(published.train), list(published.test)
    base = root / folder
    if cfg.download and not all((base / f).is_file() for f in train_files + test_files):
        import torchvision.datasets as tvd

        tv_cls = getattr(tvd, published.torchvision)
        download_files(title, root, lambda: tv_cls(str(root), train=True, download=True))
    for f in train_files + test_files:
        if not (base / f).is_file():
            raise DatasetError(f"dataset.root: {title} not found under {root} (expected {base / f}); "
                               "put the files there or set dataset.download: true")
    out = []
    for files in (train_files, test_files):
        xs, ys = zip(*(_read_cifar_batch(base / f, key, classes) for f in files))
        out += [torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))]
    return out[0], out[1], out[2], out[3], classes


_CIFAR_GLOBALS = {(f"numpy.{core}.{module}", name) for core in ("core", "_core")
                  for module, name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                                       ("numeric", "_frombuffer"))} \
    | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, strings and numpy arrays only: a CIFAR batch file that names any
    other global (which could run code) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR batch holds only arrays")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path, key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR pickle: images (N, 3, 32, 32) uint8 and int64 labels."""
    try:
        with open(path, "rb") as f:
            entry = _ArrayUnpickler(f, encoding="latin1").load()
        data = np.asarray(entry["data"], dtype=np.uint8)
        labels = np.asarray(entry[key], dtype=np.int64)
        images = data.reshape(-1, 3, 32, 32)
    except Exception as err:  # any unpickling or layout failure means a broken file
        raise DatasetError(f"dataset.root: {path} is truncated or corrupt ({type(err).__name__}: "
                           f"{_one_line(err)}); delete it and put a good copy there or set dataset.download: true"
                           ) from err
    if len(images) != len(labels):
        raise DatasetError(f"dataset.root: {path} holds {len(images)} images but {len(labels)} labels; "
                           "the file is corrupt, replace it")
    _check_labels(torch.from_numpy(labels), num_classes, path)
    return np.ascontiguousarray(images), labels
