"""TensorFlow Federated's HDF5 client files (``dataset.format: tff_h5``), read with h5py.

TFF's simulation data sets (``tff.simulation.datasets``) are HDF5 files with one group per
client, ``examples/<client_id>/<feature>``; ``dataset.root`` is the folder holding a data
set's train and test files, as TFF's downloader leaves them:

* ``femnist``: ``fed_emnist_train.h5`` / ``fed_emnist_test.h5`` (or the ``fed_emnist_digitsonly``
  pair: 10 classes instead of 62), features ``pixels`` (28x28 floats, used as given, read as
  ``(1, 28, 28)`` images) and ``label``; train and test hold the same writers.
* ``shakespeare``: ``shakespeare_train.h5`` / ``shakespeare_test.h5``, feature ``snippets``
  (byte strings: a speaking role's lines). Every snippet becomes LEAF's samples: each
  80-character window with the next character as target, over LEAF's 80 letters
  (:mod:`fedclock.scenarios.leaf`), so the same ``char_lstm`` reads both formats. **Choice:**
  TFF's own pipeline uses another vocabulary (86 characters plus padding and end tokens)
  and cuts snippets into padded chunks; we keep LEAF's task, and a window or target holding
  a character outside LEAF's letters is left out.
* ``cifar100``: ``fed_cifar100_train.h5`` / ``fed_cifar100_test.h5``, features ``image``
  (32x32x3 bytes, read as ``(3, 32, 32)`` scaled to [0, 1]) and ``label`` (the 100 fine
  classes); its test clients differ from its train clients, so they only add to the global
  test set.
* ``stackoverflow``: ``stackoverflow_train.h5`` / ``stackoverflow_test.h5`` and the word counts
  ``stackoverflow.word_count``, feature ``tokens`` (one sentence per example): TFF's
  next-word task, 20 word indices per sentence with one target per token
  (:mod:`fedclock.scenarios.stackoverflow`); train and test hold overlapping users.

A file that is not HDF5, lacks ``examples``, or whose clients lack a feature or disagree in
length is a one-line error naming the file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedclock.scenarios.datasets import DatasetError
from fedclock.scenarios.leaf import FEMNIST_CLASSES, LEAF_LETTERS, WINDOW, letter_indices
from fedclock.scenarios.stackoverflow import WORD_COUNTS, read_vocabulary, sentence_samples, special_tokens
from fedclock.scenarios.user_data import UserData

__all__ = ["TFF_FILES", "read_tff_h5"]

TFF_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "femnist": (("fed_emnist_train.h5", "fed_emnist_test.h5"),
                ("fed_emnist_digitsonly_train.h5", "fed_emnist_digitsonly_test.h5")),
    "shakespeare": (("shakespeare_train.h5", "shakespeare_test.h5"),),
    "cifar100": (("fed_cifar100_train.h5", "fed_cifar100_test.h5"),),
    "stackoverflow": (("stackoverflow_train.h5", "stackoverflow_test.h5"),),
}
"""The train and test file names TFF uses, per data set (first pair found wins)."""


class _Bad(Exception):
    """What is wrong with one client (the caller adds the file)."""


def read_tff_h5(name: str, root: Path) -> tuple[list[UserData], int]:
    """Every client of the train file (in the file's order), matched by id with the test
    file's; test-only clients last. Returns the users and the number of classes."""
    pairs = TFF_FILES[name]
    found = next(((root / a, root / b) for a, b in pairs if (root / a).is_file()), None)
    if found is None:
        names = " or ".join(f"{a} and {b}" for a, b in pairs)
        raise DatasetError(f"dataset.root: {root} holds no {names} (TFF's files for {name})")
    train_path, test_path = found
    if not test_path.is_file():
        raise DatasetError(f"dataset.root: {root} holds {train_path.name} but not {test_path.name}")
    vocab = read_vocabulary(root / WORD_COUNTS) if name == "stackoverflow" else None
    train, test = _read(name, train_path, vocab), _read(name, test_path, vocab)
    users = [UserData(cid, x, y, *test.pop(cid, (x[:0], y[:0]))) for cid, (x, y) in train.items()]
    users += [UserData(cid, x[:0], y[:0], x, y) for cid, (x, y) in test.items()]
    if name == "femnist":
        classes = 10 if "digitsonly" in train_path.name else FEMNIST_CLASSES
        for u in users:
            for y, path in ((u.y_train, train_path), (u.y_test, test_path)):
                if len(y) and (y.min() < 0 or y.max() >= classes):
                    raise DatasetError(f"{path}: client {u.user!r}: label outside 0..{classes - 1}")
        return users, classes
    if name == "cifar100":
        return users, 100
    if vocab is not None:
        return users, special_tokens(len(vocab)).eos + 1
    return users, len(LEAF_LETTERS)


def _read(name: str, path: Path, vocab: dict[str, int] | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    import h5py  # imported when used: a second of start-up otherwise

    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(f"{path}: not a readable HDF5 file ({str(exc).splitlines()[0]})") from None
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with handle:
        examples = handle.get("examples")
        if not isinstance(examples, h5py.Group):
            raise DatasetError(f"{path}: no examples group (TFF's layout: examples/<client_id>/<feature>)")
        for cid in examples:
            group = examples[cid]
            try:
                if not isinstance(group, h5py.Group):
                    raise _Bad("is not a group of features")
                out[str(cid)] = _client(name, group, vocab)
            except _Bad as bad:
                raise DatasetError(f"{path}: client {str(cid)!r} {bad}") from None
            except (OSError, ValueError, TypeError) as exc:
                raise DatasetError(f"{path}: client {str(cid)!r} cannot be read ({type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return out


def _feature(group: Any, key: str) -> np.ndarray:
    if key not in group:
        raise _Bad(f"has no {key!r} dataset (features: {', '.join(sorted(group)) or 'none'})")
    return np.asarray(group[key][()])


def _client(name: str, group: Any, vocab: dict[str, int] | None) -> tuple[np.ndarray, np.ndarray]:
    if vocab is not None:
        sentences = _feature(group, "tokens")
        if sentences.dtype.kind not in "OSU":
            raise _Bad(f"tokens must be strings (one sentence each), got type {sentences.dtype}")
        return sentence_samples(sentences, vocab)
    if name == "shakespeare":
        return _windows(_feature(group, "snippets"))
    if name == "femnist":
        x, y = _feature(group, "pixels"), _feature(group, "label")
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise _Bad(f"pixels must be 28x28 images, got shape {x.shape}")
        x = x.astype(np.float32).reshape(-1, 1, 28, 28)
    else:
        x, y = _feature(group, "image"), _feature(group, "label")
        if x.ndim != 4 or x.shape[1:] != (32, 32, 3):
            raise _Bad(f"image must be 32x32x3 images, got shape {x.shape}")
        x = x.astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise _Bad(f"has {len(x)} inputs but label of shape {y.shape} and type {y.dtype} (one integer each)")
    if name == "cifar100" and len(y) and (y.min() < 0 or y.max() >= 100):
        raise _Bad("label outside 0..99")
    return np.ascontiguousarray(x), y.astype(np.int64)


def _windows(snippets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's samples from a role's snippets: every 80-character window and the character
    after it, windows or targets with a character outside LEAF's letters left out."""
    xs, ys = [], []
    for raw in snippets.reshape(-1):
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        codes = letter_indices(text)
        if len(codes) <= WINDOW:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(codes, WINDOW + 1)
        keep = (windows >= 0).all(axis=1)
        xs.append(windows[keep, :WINDOW])
        ys.append(windows[keep, WINDOW])
    if not xs:
        return np.zeros((0, WINDOW), dtype=np.float32), np.zeros(0, dtype=np.int64)
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)
