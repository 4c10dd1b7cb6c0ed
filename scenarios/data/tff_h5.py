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
  (:mod:`fedclock.scenarios.data.leaf`), so the same ``char_lstm`` reads both formats. **Choice:**
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
  (:mod:`fedclock.scenarios.data.stackoverflow`); train and test hold overlapping users.

A file that is not HDF5, lacks ``examples``, or whose clients lack a feature or disagree in
length is a one-line error naming the file.

With a natural partition the users are chosen before they are read
(:mod:`fedclock.scenarios.data.client_files`): a first pass reads every client's number of samples
(the length of ``tokens`` or ``label``; Shakespeare's windows are cut and counted one role at
a time), and only the chosen users' features are then read, so only those are checked
beyond the feature that is counted.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from fedclock.scenarios.data.dataset_specs import DATASETS
from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.leaf_tasks import FEMNIST_CLASSES, LEAF_LETTERS, WINDOW, letter_indices
from fedclock.scenarios.data.stackoverflow import WORD_COUNTS, read_vocabulary, sentence_samples, special_tokens
from fedclock.scenarios.data.user_data import Choose, ClientFileReader, UserData

if TYPE_CHECKING:
    from fedclock.scenarios.schema import GeneratedFiles

__all__ = ["Cifar100H5", "FemnistH5", "ShakespeareH5", "StackOverflowH5", "TffH5Reader", "read_tff_h5"]


class _Bad(Exception):
    """What is wrong with one client (the caller adds the file)."""


Vocabulary = dict[str, int]


class TffH5Reader(ClientFileReader):
    """TFF's HDF5 train and test files (module docstring); a subclass per dataset names its
    files and says how a client's samples read."""

    reads_users_first = True
    files: ClassVar[tuple[tuple[str, str], ...]] = ()
    """The train and test file names TFF uses (first pair found wins)."""
    counted: ClassVar[str] = "label"
    """The feature whose length is a client's number of samples."""

    def vocabulary(self, root: Path) -> Vocabulary | None:
        """The word indices its samples need, read from ``root`` (None: none)."""
        return None

    def count(self, group: Any) -> int:
        """A client's number of samples, from the shape of :attr:`counted`."""
        if self.counted not in group:
            raise _Bad(f"has no {self.counted!r} dataset (features: {', '.join(sorted(group)) or 'none'})")
        return int(group[self.counted].shape[0]) if group[self.counted].shape else 1

    def client(self, group: Any, vocab: Vocabulary | None, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        """A client's inputs and targets, its first ``limit`` samples where a limit is given."""
        raise NotImplementedError

    def classes(self, users: list[UserData], train: Path, test: Path, vocab: Vocabulary | None) -> int:
        """The number of classes of the users read from ``train`` and ``test``."""
        raise NotImplementedError

    def users(self, root: Path, choose: Choose | None = None,
              max_train: int | None = None) -> tuple[list[UserData], int]:
        """The clients of the train file (in the file's order), matched by id with the test
        file's; test-only clients last. With ``choose``, every user's sample counts are read first
        (the files' shapes; Shakespeare's windows are counted one role at a time) and only the
        users it picks are read whole, so memory follows the users kept, not the file.
        ``max_train`` keeps a user's first that many training samples (file order). Returns the
        users and the number of classes."""
        found = next(((root / a, root / b) for a, b in self.files if (root / a).is_file()), None)
        if found is None:
            names = " or ".join(f"{a} and {b}" for a, b in self.files)
            raise DatasetError(f"dataset.root: {root} holds no {names} (TFF's files)")
        train_path, test_path = found
        if not test_path.is_file():
            raise DatasetError(f"dataset.root: {root} holds {train_path.name} but not {test_path.name}")
        vocab = self.vocabulary(root)
        wanted: tuple[set[str], set[str]] | None = None
        if choose is not None:
            train_n, test_n = _scan(self, train_path, max_train), _scan(self, test_path, None)
            ids = list(train_n) + [cid for cid in test_n if cid not in train_n]
            keep = {ids[int(k)] for k in choose(np.array([train_n.get(c, 0) for c in ids], dtype=np.int64),
                                                np.array([test_n.get(c, 0) for c in ids], dtype=np.int64))}
            wanted = ({c for c in train_n if c in keep}, {c for c in test_n if c in keep})
        train = _read(self, train_path, vocab, wanted[0] if wanted else None, max_train)
        test = _read(self, test_path, vocab, wanted[1] if wanted else None, None)
        users = [UserData(cid, x, y, *test.pop(cid, (x[:0], y[:0]))) for cid, (x, y) in train.items()]
        users += [UserData(cid, x[:0], y[:0], x, y) for cid, (x, y) in test.items()]
        return users, self.classes(users, train_path, test_path, vocab)


class FemnistH5(TffH5Reader):
    """FEMNIST: ``pixels`` (28x28) and ``label``; 62 classes, or 10 from the digits-only files."""

    files = (("fed_emnist_train.h5", "fed_emnist_test.h5"),
             ("fed_emnist_digitsonly_train.h5", "fed_emnist_digitsonly_test.h5"))

    def client(self, group: Any, vocab: Vocabulary | None, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        x, y = _feature(group, "pixels", limit), _feature(group, "label", limit)
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise _Bad(f"pixels must be 28x28 images, got shape {x.shape}")
        return _labelled(x.astype(np.float32).reshape(-1, 1, 28, 28), y)

    def classes(self, users: list[UserData], train: Path, test: Path, vocab: Vocabulary | None) -> int:
        classes = 10 if "digitsonly" in train.name else FEMNIST_CLASSES
        for u in users:
            for y, path in ((u.y_train, train), (u.y_test, test)):
                if len(y) and (y.min() < 0 or y.max() >= classes):
                    raise DatasetError(f"{path}: client {u.user!r}: label outside 0..{classes - 1}")
        return classes


class ShakespeareH5(TffH5Reader):
    """Shakespeare: ``snippets`` cut into LEAF's 80-character windows (module docstring)."""

    files = (("shakespeare_train.h5", "shakespeare_test.h5"),)

    def count(self, group: Any) -> int:
        return len(_windows(_feature(group, "snippets"))[1])

    def client(self, group: Any, vocab: Vocabulary | None, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        x, y = _windows(_feature(group, "snippets"))
        return x[:limit], y[:limit]

    def classes(self, users: list[UserData], train: Path, test: Path, vocab: Vocabulary | None) -> int:
        return len(LEAF_LETTERS)


class Cifar100H5(TffH5Reader):
    """CIFAR-100: ``image`` (32x32x3 bytes, scaled to [0, 1]) and ``label``, 100 classes."""

    files = (("fed_cifar100_train.h5", "fed_cifar100_test.h5"),)

    def client(self, group: Any, vocab: Vocabulary | None, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        x, y = _feature(group, "image", limit), _feature(group, "label", limit)
        if x.ndim != 4 or x.shape[1:] != (32, 32, 3):
            raise _Bad(f"image must be 32x32x3 images, got shape {x.shape}")
        x, y = _labelled(x.astype(np.float32).transpose(0, 3, 1, 2) / 255.0, y)
        if len(y) and (y.min() < 0 or y.max() >= 100):
            raise _Bad("label outside 0..99")
        return x, y

    def classes(self, users: list[UserData], train: Path, test: Path, vocab: Vocabulary | None) -> int:
        return 100


class StackOverflowH5(TffH5Reader):
    """Stack Overflow: ``tokens`` (one sentence each) as word indices over the files' word
    counts (:mod:`fedclock.scenarios.data.stackoverflow`), a target per token."""

    files = (("stackoverflow_train.h5", "stackoverflow_test.h5"),)
    counted = "tokens"

    def vocabulary(self, root: Path) -> Vocabulary | None:
        return read_vocabulary(root / WORD_COUNTS)

    def client(self, group: Any, vocab: Vocabulary | None, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        assert vocab is not None
        sentences = _feature(group, "tokens", limit)
        if sentences.dtype.kind not in "OSU":
            raise _Bad(f"tokens must be strings (one sentence each), got type {sentences.dtype}")
        return sentence_samples(sentences, vocab)

    def classes(self, users: list[UserData], train: Path, test: Path, vocab: Vocabulary | None) -> int:
        assert vocab is not None
        return special_tokens(len(vocab)).eos + 1

    def write(self, root: Path, generate: GeneratedFiles, seed: int) -> None:
        from fedclock.scenarios.data.stackoverflow_generate import write_stackoverflow

        write_stackoverflow(root, generate, seed)


def read_tff_h5(name: str, root: Path, choose: Choose | None = None,
                max_train: int | None = None) -> tuple[list[UserData], int]:
    """Dataset ``name``'s TFF files under ``root`` (the reader its spec names,
    :meth:`TffH5Reader.users`)."""
    reader: TffH5Reader = DATASETS[name].reader("tff_h5")
    return reader.users(root, choose, max_train)


def _examples(path: Path) -> Any:
    """The open file and its ``examples`` group (one-line errors naming the file)."""
    import h5py  # imported when used: a second of start-up otherwise

    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(f"{path}: not a readable HDF5 file ({str(exc).splitlines()[0]})") from None
    examples = handle.get("examples")
    if not isinstance(examples, h5py.Group):
        handle.close()
        raise DatasetError(f"{path}: no examples group (TFF's layout: examples/<client_id>/<feature>)")
    return handle, examples


def _each_client(path: Path, examples: Any, wanted: set[str] | None, read: Callable[[Any], Any]) -> dict[str, Any]:
    """``read(group)`` of every client (or of the ``wanted`` ones), in file order, a bad
    client a one-line error naming the file and the client."""
    import h5py

    out: dict[str, Any] = {}
    for cid in examples:
        if wanted is not None and str(cid) not in wanted:
            continue
        group = examples[cid]
        try:
            if not isinstance(group, h5py.Group):
                raise _Bad("is not a group of features")
            out[str(cid)] = read(group)
        except _Bad as bad:
            raise DatasetError(f"{path}: client {str(cid)!r} {bad}") from None
        except (OSError, ValueError, TypeError) as exc:
            raise DatasetError(f"{path}: client {str(cid)!r} cannot be read ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return out


def _scan(reader: TffH5Reader, path: Path, limit: int | None) -> dict[str, int]:
    """Every client's number of samples (at most ``limit``), reading shapes, not arrays,
    where a sample is one row of a feature."""
    handle, examples = _examples(path)

    def count(group: Any) -> int:
        n = reader.count(group)
        return n if limit is None else min(n, limit)

    with handle:
        return _each_client(path, examples, None, count)


def _read(reader: TffH5Reader, path: Path, vocab: Vocabulary | None, wanted: set[str] | None,
          limit: int | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    handle, examples = _examples(path)
    with handle:
        return _each_client(path, examples, wanted, lambda group: reader.client(group, vocab, limit))


def _feature(group: Any, key: str, limit: int | None = None) -> np.ndarray:
    """A client's feature, its first ``limit`` rows only where a limit is given."""
    if key not in group:
        raise _Bad(f"has no {key!r} dataset (features: {', '.join(sorted(group)) or 'none'})")
    data = group[key]
    return np.asarray(data[:limit] if limit is not None and data.shape else data[()])


def _labelled(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A client's images and their labels, checked to be one integer label per image."""
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise _Bad(f"has {len(x)} inputs but label of shape {y.shape} and type {y.dtype} (one integer each)")
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
