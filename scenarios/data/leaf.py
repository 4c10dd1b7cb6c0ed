"""LEAF's JSON client files (``dataset.format: leaf``).

Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018 (arXiv:1812.01097). LEAF's
preprocessing leaves ``train/*.json`` and ``test/*.json`` under a data set's folder (the
folder ``dataset.root`` names); every file is ``{"users": [...], "num_samples": [...],
"user_data": {user: {"x": [...], "y": [...]}}}`` (an optional ``"hierarchies"`` is ignored).
Users are read in file-name order, then in each file's ``users`` order; a user's train and
test samples are matched by name (LEAF's ``-t sample`` split gives both, ``-t user`` gives
disjoint users: see :mod:`fedclock.scenarios.data.client_files`).

Per data set:

* ``femnist``: ``x`` are 784 numbers (a 28x28 image, row by row) read as ``(1, 28, 28)``
  images unscaled, ``y`` class indices 0..61 (LEAF's reference CNN reads them as given).
* ``shakespeare``: ``x`` are strings of 80 characters, ``y`` the next character; both are
  mapped to indices of LEAF's 80-letter vocabulary (:data:`LEAF_LETTERS`, the order of
  LEAF's ``models/utils/language_utils.py``), so inputs are ``(80,)`` index sequences and
  there are 80 classes. A character outside the vocabulary is an error naming the file
  (LEAF's own lookup would give -1, which its embedding cannot take).
* ``synthetic_leaf``: ``x`` are equal-length vectors, ``y`` class indices; the classes are
  the largest label + 1.
* ``sent140``: ``x`` are LEAF's tweet records (the Sentiment140 CSV row without its polarity:
  id, date, query, user, tweet, and LEAF's training/test tag), the tweet at index 4; ``y`` is
  0 or 1 (LEAF writes 1 for polarity 4). A tweet is split into words as LEAF's
  ``split_line`` does (runs of word characters and apostrophes, and each of ``.,!?;``) and
  becomes :data:`SENT140_WORDS` word indices, cut or padded with the unknown index as LEAF's
  ``line_to_indices`` does. **Choice:** LEAF indexes GloVe's vocabulary, which is not in the
  files; here the vocabulary is the words of the training tweets, most frequent first (ties
  alphabetical), at most :data:`SENT140_VOCAB` of them, so indices are 0..SENT140_VOCAB and
  :data:`SENT140_VOCAB` stands for any other word and for padding, whatever the files (a
  model's embedding has ``SENT140_VOCAB + 1`` rows). Inputs are ``(25,)``, 2 classes.
* ``celeba``: ``x`` are image file names under ``<root>/raw/img_align_celeba/`` (where LEAF's
  preprocessing leaves CelebA's aligned images, beside ``train/`` and ``test/``), ``y`` is 0
  or 1 (LEAF's attribute: smiling). Images are read as LEAF's CelebA model reads them: resized
  to 84x84 with Pillow's default filter, converted to RGB, values 0..255 unscaled, read as
  ``(3, 84, 84)``. A missing or unreadable image is an error naming it. Every image is held
  in memory (84.7 KB as float32): LEAF's whole CelebA (about 200k images) does not fit, use a
  sample of its users.

Any departure from this layout is a one-line :class:`~fedclock.scenarios.data.datasets.DatasetError`
naming the file and what is wrong.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from fedclock.scenarios.data.dataset_specs import DATASETS
from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.leaf_tasks import FEMNIST_CLASSES, LEAF_LETTERS, WINDOW, letter_indices
from fedclock.scenarios.data.user_data import Choose, ClientFileReader, UserData

if TYPE_CHECKING:
    from fedclock.scenarios.schema import GeneratedFiles

__all__ = ["SENT140_WORDS", "SENT140_VOCAB", "CELEBA_SIDE", "CELEBA_IMAGES", "CelebaLeaf", "FemnistLeaf",
           "LeafReader", "Sent140Leaf", "ShakespeareLeaf", "SyntheticLeaf", "read_leaf", "split_words"]

SENT140_WORDS = 25
"""Words of a Sent140 input (LEAF's ``max_words``)."""
SENT140_VOCAB = 10_000
"""Most frequent training words indexed for Sent140; index ``SENT140_VOCAB`` is any other word
and padding."""
CELEBA_SIDE = 84
"""Side of a CelebA input image (LEAF's ``IMAGE_SIZE``)."""
CELEBA_IMAGES = Path("raw") / "img_align_celeba"
"""Where CelebA's images are, relative to ``dataset.root``."""
_WORD = re.compile(r"[\w']+|[.,!?;]")

class _Bad(Exception):
    """What is wrong with one user's samples (the caller adds the file and user)."""


def _femnist(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    try:
        xs = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError):
        raise _Bad("x must be lists of 784 numbers (28x28 images)") from None
    if xs.ndim != 2 or xs.shape[1] != 784:
        raise _Bad(f"x must be lists of 784 numbers (28x28 images), got shape {xs.shape}")
    if not np.isfinite(xs).all():
        raise _Bad("x holds a value that is not a finite number")
    return xs.reshape(-1, 1, 28, 28), _labels(y, FEMNIST_CLASSES)


def _shakespeare(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    if not all(isinstance(s, str) and len(s) == WINDOW for s in x):
        raise _Bad(f"x must be strings of {WINDOW} characters")
    if not all(isinstance(s, str) and len(s) == 1 for s in y):
        raise _Bad("y must be single characters (the next character)")
    xs = letter_indices("".join(x)).reshape(len(x), WINDOW)
    ys = letter_indices("".join(y))
    for arr in (xs, ys):
        if (arr < 0).any():
            text = "".join(x) if arr is xs else "".join(y)
            bad = text[int(np.flatnonzero(arr.reshape(-1) < 0)[0])]
            raise _Bad(f"character {bad!r} is not in LEAF's 80-letter vocabulary")
    return xs.astype(np.float32), ys


def _vectors(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    try:
        xs = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError):
        raise _Bad("x must be lists of numbers of one length") from None
    if xs.ndim != 2 or (len(xs) and xs.shape[1] == 0):
        raise _Bad(f"x must be lists of numbers of one length, got shape {xs.shape}")
    return xs, _labels(y, None)


def split_words(text: str) -> list[str]:
    """A tweet's words as LEAF's ``split_line`` gives them."""
    return _WORD.findall(text)


def _sent140(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    """The tweets' word lists (an object array; indexed once the vocabulary is known) and labels."""
    if not all(isinstance(r, list) and len(r) >= 5 and all(isinstance(f, str) for f in r) for r in x):
        raise _Bad("x must be LEAF's tweet records (lists of at least 5 strings: id, date, query, user, tweet)")
    words = np.empty(len(x), dtype=object)
    words[:] = [split_words(r[4]) for r in x]
    return words, _labels(y, 2)


def _celeba(images: Path, x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    if not all(isinstance(name, str) and name for name in x):
        raise _Bad(f"x must be image file names (under {images})")
    return np.stack([_face(images, name) for name in x]), _labels(y, 2)


def _face(images: Path, name: str) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    path = images / name
    if not path.is_file():
        raise DatasetError(f"{path}: no such image (LEAF's CelebA images are under <root>/{CELEBA_IMAGES.as_posix()})")
    try:
        with Image.open(path) as img:
            rgb = img.resize((CELEBA_SIDE, CELEBA_SIDE)).convert("RGB")
            return np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1).copy()
    except (UnidentifiedImageError, OSError) as exc:
        raise DatasetError(f"{path}: not a readable image ({type(exc).__name__})") from None


def _index_words(users: list[UserData]) -> list[UserData]:
    """Sent140's word lists as :data:`SENT140_WORDS` indices over the training tweets'
    vocabulary (module docstring)."""
    counts = Counter(w for u in users for words in u.x_train for w in words)
    vocab = sorted(counts, key=lambda w: (-counts[w], w))[:SENT140_VOCAB]
    index = {w: i for i, w in enumerate(vocab)}

    def indices(tweets: np.ndarray) -> np.ndarray:
        out = np.full((len(tweets), SENT140_WORDS), SENT140_VOCAB, dtype=np.float32)
        for row, words in enumerate(tweets):
            ids = [index.get(w, SENT140_VOCAB) for w in words[:SENT140_WORDS]]
            out[row, :len(ids)] = ids
        return out

    return [UserData(u.user, indices(u.x_train), u.y_train, indices(u.x_test), u.y_test) for u in users]


def _labels(y: list, classes: int | None) -> np.ndarray:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in y):
        raise _Bad("y must be integer class labels")
    ys = np.asarray(y, dtype=np.int64)
    if len(ys) and ys.min() < 0:
        raise _Bad(f"y holds the negative label {int(ys.min())}")
    if len(ys) and classes is not None and ys.max() >= classes:
        raise _Bad(f"y holds label {int(ys.max())}, outside 0..{classes - 1}")
    return ys


Convert = Callable[[list, list], tuple[np.ndarray, np.ndarray]]
"""A user's ``x`` and ``y`` lists as input and label arrays (raises :class:`_Bad`)."""


class LeafReader(ClientFileReader):
    """LEAF's JSON folders ``train/`` and ``test/`` (module docstring); a subclass per dataset
    says how its samples convert and how many classes it has."""

    classes: ClassVar[int | None] = None
    """Its number of classes; None: the largest label found + 1 (at least 2)."""

    def convert(self, root: Path) -> Convert:
        """How a user's samples under ``root`` convert."""
        raise NotImplementedError

    def finish(self, users: list[UserData]) -> list[UserData]:
        """The users once every file is read (all of them are needed, as for Sent140's vocabulary)."""
        return users

    def users(self, root: Path, choose: Choose | None = None,
              max_train: int | None = None) -> tuple[list[UserData], int]:
        """Every user of ``root/train`` and ``root/test`` (train users first, in file order, then
        users found only in test files) and the number of classes."""
        convert = self.convert(root)
        train = _read_folder(root, "train", convert)
        test = _read_folder(root, "test", convert)
        users: list[UserData] = []
        for user, (x, y) in train.items():
            xt, yt = test.pop(user, (x[:0], y[:0]))
            users.append(UserData(user, x, y, xt, yt))
        for user, (xt, yt) in test.items():
            users.append(UserData(user, xt[:0], yt[:0], xt, yt))
        users = self.finish(users)
        shapes = {u.x_train.shape[1:] if len(u.y_train) else u.x_test.shape[1:] for u in users}
        if len(shapes) > 1:
            raise DatasetError(f"dataset.root: the users under {root} have samples of different shapes "
                               f"({', '.join(str(s) for s in sorted(shapes))})")
        if self.classes is not None:
            return users, self.classes
        classes = max(int(u.y_train.max(initial=0)) for u in users) + 1
        return users, max(classes, max(int(u.y_test.max(initial=0)) for u in users) + 1, 2)


class FemnistLeaf(LeafReader):
    """FEMNIST: 784 numbers per sample, read as (1, 28, 28) images, 62 classes."""

    classes = FEMNIST_CLASSES

    def convert(self, root: Path) -> Convert:
        return _femnist

    def write(self, root: Path, generate: GeneratedFiles, seed: int) -> None:
        from fedclock.scenarios.data.leaf_generate import femnist_samples, write_leaf

        write_leaf(root, femnist_samples, generate, seed)


class ShakespeareLeaf(LeafReader):
    """Shakespeare: 80-character windows and the next character, over LEAF's 80 letters."""

    classes = len(LEAF_LETTERS)

    def convert(self, root: Path) -> Convert:
        return _shakespeare

    def write(self, root: Path, generate: GeneratedFiles, seed: int) -> None:
        from fedclock.scenarios.data.leaf_generate import shakespeare_samples, write_leaf

        write_leaf(root, shakespeare_samples, generate, seed)


class SyntheticLeaf(LeafReader):
    """LEAF's Synthetic data set: vectors, classes from the labels found."""

    def convert(self, root: Path) -> Convert:
        return _vectors

    def write(self, root: Path, generate: GeneratedFiles, seed: int) -> None:
        from fedclock.scenarios.data.leaf_generate import synthetic_samples, write_leaf

        write_leaf(root, synthetic_samples, generate, seed)


class Sent140Leaf(LeafReader):
    """Sentiment140: tweets as word indices over the training tweets' vocabulary, 2 classes."""

    classes = 2

    def convert(self, root: Path) -> Convert:
        return _sent140

    def finish(self, users: list[UserData]) -> list[UserData]:
        return _index_words(users)


class CelebaLeaf(LeafReader):
    """CelebA: image file names under ``<root>/raw/img_align_celeba``, smiling or not."""

    classes = 2

    def convert(self, root: Path) -> Convert:
        return partial(_celeba, root / CELEBA_IMAGES)


def read_leaf(name: str, root: Path) -> tuple[list[UserData], int]:
    """Every user of dataset ``name``'s LEAF files under ``root`` and the number of classes
    (the reader its spec names, :meth:`LeafReader.users`)."""
    reader: LeafReader = DATASETS[name].reader("leaf")
    return reader.users(root)


def _read_folder(root: Path, part: str, convert: Convert) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    folder = root / part
    if not folder.is_dir():
        raise DatasetError(f"dataset.root: {root} has no {part}/ folder (LEAF's layout: train/*.json and "
                           "test/*.json); point root at the folder that holds them")
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DatasetError(f"dataset.root: {folder} holds no .json files (LEAF's layout)")
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    where: dict[str, Path] = {}
    for path in files:
        for user, xy in _read_file(path, convert):
            if user in out:
                raise DatasetError(f"{path}: user {user!r} is also in {where[user]} (each user in one file)")
            out[user], where[user] = xy, path
    return out


def _read_file(path: Path, convert: Convert) -> list[tuple[str, tuple[np.ndarray, np.ndarray]]]:
    try:
        with open(path, encoding="utf-8") as f:
            data: Any = json.load(f)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: a LEAF file is an object with users, num_samples and user_data")
    missing = [k for k in ("users", "num_samples", "user_data") if k not in data]
    if missing:
        raise DatasetError(f"{path}: no {', '.join(missing)} (a LEAF file holds users, num_samples and user_data)")
    users, counts, user_data = data["users"], data["num_samples"], data["user_data"]
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise DatasetError(f"{path}: users must be a list of user names")
    if not isinstance(counts, list) or len(counts) != len(users):
        raise DatasetError(f"{path}: num_samples must list one count per user ({len(users)} users)")
    if not isinstance(user_data, dict):
        raise DatasetError(f"{path}: user_data must map every user to its x and y")
    if len(set(users)) != len(users):
        raise DatasetError(f"{path}: a user is listed twice in users")
    out = []
    for user, count in zip(users, counts):
        entry = user_data.get(user)
        if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) or not isinstance(entry.get("y"), list):
            raise DatasetError(f"{path}: user {user!r} has no x and y lists in user_data")
        x, y = entry["x"], entry["y"]
        if len(x) != len(y) or len(x) != count:
            raise DatasetError(f"{path}: user {user!r} has {len(x)} x and {len(y)} y but num_samples says {count}")
        if count == 0:
            continue  # a user without samples in this part is as if absent from it
        try:
            out.append((user, convert(x, y)))
        except _Bad as bad:
            raise DatasetError(f"{path}: user {user!r}: {bad}") from None
    return out
