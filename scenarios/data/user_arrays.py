"""Per-user data in array files, read lazily: a user's samples are read from disk when the user
trains (``dataset.format: user_arrays``).

A cross-device population is millions of users, each with a few samples of its own (LEAF's
natural partition). Read whole, ten million users' samples are built in memory before the first
round (minutes, and the data's size in every process that holds them; ``benchmarks/RESULTS.md``,
"Ten million clients"). In this layout each user's samples lie together in one array file, so a
run maps the files (:func:`numpy.load` with ``mmap_mode="r"``) and the operating system reads a
user's rows the first time the user's task touches them: set-up reads only the offsets (8 bytes a
user), memory holds the pages of the users picked so far (shared by every process on the
machine, as the page cache), and on Ray no copy of the data goes through the object store: each
process maps the same files (:class:`~fedclock.actors.federation.MappedRows`; on a cluster the
folder must be at the same path on every node).

**Why this layout and not LEAF's.** LEAF's JSON files cannot be read in part (a file is parsed
whole); one file per user costs ten million files (and at least a 4 KiB block each on most file
systems, 40 GB for 1 GB of samples); HDF5 with a group per user (TensorFlow Federated's files)
opens a group per read. Flat ``.npy`` arrays with per-user offsets are read by NumPy alone, a
user's rows in one contiguous read.

**The layout** (a folder; every array a ``.npy`` file):

* ``manifest.json``: ``{"layout": "fedclock user arrays", "version": 1, "dataset": <name>,
  "num_classes": C, "users": U, "train_samples": N_train, "test_samples": N_test}`` (written
  last: a folder without it is incomplete), and for generated data the settings it was generated
  from (``generated``);
* ``x.npy`` (float32, ``(N_train + N_test, ...)``) and ``y.npy`` (int64): every user's training
  samples, user after user, then every user's test samples, user after user;
* ``train_offsets.npy`` and ``test_offsets.npy`` (int64, ``U + 1`` each): user ``u``'s training
  rows are ``train_offsets[u] .. train_offsets[u + 1] - 1`` (from 0 to ``N_train``), its test
  rows ``test_offsets[u] .. test_offsets[u + 1] - 1`` (from ``N_train`` to ``N_train + N_test``).

Users are clients in file order (``partition: {type: natural}``, ``population.num_clients`` the
number of users); a client's test split is its user's test rows, and the global test set is every
user's test rows (LEAF's evaluation). :func:`write_user_arrays` writes a folder from arrays (a
conversion from another format, the tests' small files); ``dataset.generate`` writes
FedProx's Synthetic(alpha, beta) (:func:`fedclock.scenarios.data.datasets.load_synthetic`'s
model, drawn a block of users at a time) straight into the files, into ``<root>/generated/``
(``dataset.root``, else the data folder), and a later run with the same settings and seed maps
the same files again instead of drawing them anew.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from filelock import FileLock

from fedclock.actors.federation import ClientRanges, Federation, MappedRows
from fedclock.scenarios.data.datasets import DatasetError, _synthetic_blocks, data_root
from fedclock.scenarios.schema import DatasetConfig, GeneratedFiles
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["LAYOUT", "MANIFEST", "generate_synthetic", "read_user_arrays", "user_arrays_federation",
           "write_user_arrays"]

LAYOUT = "fedclock user arrays"
VERSION = 1
MANIFEST = "manifest.json"
_ARRAYS = ("x.npy", "y.npy", "train_offsets.npy", "test_offsets.npy")


def user_arrays_federation(cfg: DatasetConfig, seed: int, num_clients: int) -> Federation:
    """The federation of ``cfg``'s user arrays: the folder ``dataset.root`` (or the data
    folder's ``<name>_user_arrays``), or with ``dataset.generate`` the generated folder (drawn
    now when no earlier run drew it)."""
    assert cfg.format == "user_arrays"
    if cfg.generate is None:
        folder = Path(cfg.root).expanduser() if cfg.root is not None else data_root(cfg) / f"{cfg.name}_user_arrays"
    else:
        folder = generated_folder(cfg, seed)
        with FileLock(str(folder) + ".lock"):  # two runs of one grid: one draws, the other waits and maps
            if not _matches(folder, _generated_settings(cfg, seed)):
                generate_synthetic(cfg, seed, folder)
    return read_user_arrays(folder, cfg.name, num_clients)


def generated_folder(cfg: DatasetConfig, seed: int) -> Path:
    """Where ``dataset.generate`` writes: ``<root>/generated/<name>-user-arrays-<key>``, the key
    a digest of every setting the draws depend on (so other settings never reuse the files)."""
    settings = json.dumps(_generated_settings(cfg, seed), sort_keys=True)
    key = hashlib.sha256(settings.encode()).hexdigest()[:16]
    base = Path(cfg.root).expanduser() if cfg.root is not None else data_root(cfg)
    return base / "generated" / f"{cfg.name}-user-arrays-{key}"


def _generated_settings(cfg: DatasetConfig, seed: int) -> dict[str, Any]:
    gen = cfg.generate
    assert gen is not None
    return {"seed": seed, "users": gen.users, "mean_samples": gen.mean_samples, "test_fraction": gen.test_fraction,
            "alpha": cfg.synthetic_alpha, "beta": cfg.synthetic_beta, "features": cfg.synthetic_features,
            "classes": cfg.synthetic_classes, "version": VERSION}


def _matches(folder: Path, settings: dict[str, Any]) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(manifest.get("generated") == settings)


def user_sizes(rng: np.random.Generator, gen: GeneratedFiles) -> tuple[np.ndarray, np.ndarray]:
    """Every user's sample count and how many of them are its test samples: ``max(4, round(mean x
    lognormal(0, 0.8)))`` samples (as :mod:`fedclock.scenarios.data.leaf_generate`), of which
    ``max(1, round(test_fraction x n))`` (at most ``n - 1``) are test samples."""
    sizes = np.maximum(4, np.round(gen.mean_samples * rng.lognormal(0.0, 0.8, gen.users))).astype(np.int64)
    tests = np.minimum(sizes - 1, np.maximum(1, np.round(gen.test_fraction * sizes))).astype(np.int64)
    return sizes, tests


def generate_synthetic(cfg: DatasetConfig, seed: int, folder: Path) -> None:
    """Draw ``cfg.generate.users`` users of FedProx Synthetic(alpha, beta) into ``folder`` in the
    layout of the module: the draws of ``synthetic_draws: blocks``
    (:func:`~fedclock.scenarios.data.datasets._synthetic_blocks`, a block of users a call),
    written straight into the mapped files (memory holds one block, not the data). The folder
    is written beside its final place and renamed into it when whole. Raises
    :class:`DatasetError` when the disk cannot hold it."""
    gen = cfg.generate
    assert gen is not None
    rng = numpy_rng(seed, Stream.DATA, DataStream.GENERATE)
    dim, classes = cfg.synthetic_features, cfg.synthetic_classes
    sizes, tests = user_sizes(rng, gen)
    n_train, n_test = int((sizes - tests).sum()), int(tests.sum())
    need = (n_train + n_test) * (4 * dim + 8) + 16 * (gen.users + 1)
    folder.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder.parent).free
    if need > free:
        raise DatasetError(f"dataset.generate.users: {gen.users:,} users need about {need / 2**30:,.1f} GiB of files, "
                           f"more than the {free / 2**30:,.1f} GiB free under {folder.parent}; set dataset.root to "
                           f"a larger disk, or use fewer users")
    cov_sd = np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2) ** 0.5
    u = rng.normal(0.0, cfg.synthetic_alpha, gen.users)
    big_b = rng.normal(0.0, cfg.synthetic_beta, gen.users)
    part = folder.with_name(folder.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    x = np.lib.format.open_memmap(part / "x.npy", mode="w+", dtype=np.float32, shape=(n_train + n_test, dim))
    y = np.lib.format.open_memmap(part / "y.npy", mode="w+", dtype=np.int64, shape=(n_train + n_test,))
    parts = (x[:n_train], y[:n_train], x[n_train:], y[n_train:])  # train rows, then test rows
    _synthetic_blocks(rng, sizes, tests, u, big_b, cov_sd, classes, parts)
    x.flush()
    y.flush()
    del x, y
    _write_offsets(part, sizes - tests, tests)
    _write_manifest(part, "synthetic", classes, gen.users, n_train, n_test, generated=_generated_settings(cfg, seed))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(part, folder)


def write_user_arrays(folder: Path, dataset: str, num_classes: int,
                      users: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """Write ``users`` (each its ``x_train, y_train, x_test, y_test``) into ``folder`` in the
    layout of the module, for :func:`read_user_arrays` (converting another format's users, or a
    test's small files)."""
    folder.mkdir(parents=True, exist_ok=True)
    train_sizes = np.array([len(u[1]) for u in users], dtype=np.int64)
    test_sizes = np.array([len(u[3]) for u in users], dtype=np.int64)
    x = np.concatenate([np.asarray(u[0], dtype=np.float32) for u in users]
                       + [np.asarray(u[2], dtype=np.float32) for u in users])
    y = np.concatenate([np.asarray(u[1], dtype=np.int64) for u in users] + [np.asarray(u[3], dtype=np.int64)
                                                                             for u in users])
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", y)
    _write_offsets(folder, train_sizes, test_sizes)
    _write_manifest(folder, dataset, num_classes, len(users), int(train_sizes.sum()), int(test_sizes.sum()))


def _write_offsets(folder: Path, train_sizes: np.ndarray, test_sizes: np.ndarray) -> None:
    n_train = int(train_sizes.sum())
    train, test = np.zeros(len(train_sizes) + 1, dtype=np.int64), np.full(len(test_sizes) + 1, n_train, dtype=np.int64)
    np.cumsum(train_sizes, out=train[1:])
    test[1:] += np.cumsum(test_sizes)
    np.save(folder / "train_offsets.npy", train)
    np.save(folder / "test_offsets.npy", test)


def _write_manifest(folder: Path, dataset: str, num_classes: int, users: int, n_train: int, n_test: int,
                    generated: dict[str, Any] | None = None) -> None:
    manifest: dict[str, Any] = {"layout": LAYOUT, "version": VERSION, "dataset": dataset, "num_classes": num_classes,
                                "users": users, "train_samples": n_train, "test_samples": n_test}
    if generated is not None:
        manifest["generated"] = generated
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def read_user_arrays(folder: Path, dataset: str, num_clients: int) -> Federation:
    """Map ``folder``'s user arrays as a federation (every user a client, in file order), after
    checking the manifest against the files. Raises :class:`DatasetError` (one line naming the
    field or file) on a missing or broken file, another dataset's files, or a population of
    another size."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"dataset.root: {folder} holds no user arrays ({MANIFEST} missing); write them with "
                           "fedclock.scenarios.data.user_arrays.write_user_arrays, or set dataset.generate") from None
    except (OSError, ValueError) as err:
        raise DatasetError(f"dataset.root: {path} is not a readable manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("layout") != LAYOUT or manifest.get("version") != VERSION:
        raise DatasetError(f"dataset.root: {path} is not a manifest of {LAYOUT!r} version {VERSION}")
    if manifest.get("dataset") != dataset:
        raise DatasetError(f"dataset.name: {folder} holds {manifest.get('dataset')!r} user arrays, not {dataset!r}")
    users, n_train, n_test = (int(manifest[k]) for k in ("users", "train_samples", "test_samples"))
    if users != num_clients:
        raise DatasetError(f"population.num_clients: {folder} holds {users:,} users (one client each); "
                           f"set num_clients: {users}")
    arrays = {}
    for name in _ARRAYS:  # every array mapped, the offsets too: nothing read into memory here but the checks' passes
        try:
            arrays[name] = np.load(folder / name, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise DatasetError(f"dataset.root: {folder / name} cannot be read as a .npy array ({err})") from None
    x, y = arrays["x.npy"], arrays["y.npy"]
    train, test = arrays["train_offsets.npy"], arrays["test_offsets.npy"]
    total = n_train + n_test
    problems = []
    if x.ndim < 2 or x.shape[0] != total or x.dtype != np.float32:
        problems.append(f"x.npy is {x.dtype} {x.shape}")
    if y.shape != (total,) or y.dtype != np.int64:
        problems.append(f"y.npy is {y.dtype} {y.shape}")
    sizes = {}  # each offsets file's per-user counts, one pass over it
    for name, off, first, last in (("train_offsets.npy", train, 0, n_train),
                                   ("test_offsets.npy", test, n_train, total)):
        sizes[name] = np.diff(off) if off.ndim == 1 else off
        if off.shape != (users + 1,) or off.dtype != np.int64 or off[0] != first or off[-1] != last \
                or np.any(sizes[name] < 0):
            problems.append(f"{name} is not {users + 1:,} rising offsets from {first:,} to {last:,}")
    if problems:
        raise DatasetError(f"dataset.root: {folder} does not match its manifest ({users:,} users, {n_train:,} + "
                           f"{n_test:,} samples, float32 x and int64 y): {'; '.join(problems)}")
    if users and not np.all(sizes["train_offsets.npy"] > 0):
        empty = int(np.argmin(sizes["train_offsets.npy"]))
        raise DatasetError(f"dataset.root: user {empty} of {folder} has no training samples")
    files = {"x": MappedRows(str(folder / "x.npy"), 0, total), "y": MappedRows(str(folder / "y.npy"), 0, total),
             "x_test": MappedRows(str(folder / "x.npy"), n_train, total),
             "y_test": MappedRows(str(folder / "y.npy"), n_train, total)}
    tensors = {name: rows.tensor() for name, rows in files.items()}
    train_clients, test_clients = (ClientRanges(arrays[name], source=str(folder / name))  # the maps checked above
                                   for name in ("train_offsets.npy", "test_offsets.npy"))
    return Federation(x=tensors["x"], y=tensors["y"], client_train=train_clients, client_test=test_clients,
                      x_test=tensors["x_test"], y_test=tensors["y_test"], num_classes=int(manifest["num_classes"]),
                      dataset_name=dataset, mapped=files)

