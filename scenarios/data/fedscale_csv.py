"""FedScale's ``client_data_mapping`` CSVs with their sample files (``dataset.format: fedscale_csv``).

Lai et al., "FedScale: Benchmarking Model and System Performance of Federated Learning at
Scale", ICML 2022. A FedScale data set folder (``dataset.root``) holds
``client_data_mapping/train.csv`` and ``client_data_mapping/test.csv`` (``val.csv`` is not
read), each with the header ``client_id,sample_path,label_name,label_id`` and one row per
sample, and the sample files the rows name. ``sample_path`` is read relative to ``root``,
else to ``root/data`` (**choice**: FedScale's archives differ in where the files sit).

* ``femnist``: the samples are image files (PNG or JPEG, read with Pillow), converted to
  grey and resized to 28x28 if they are not (bilinear), scaled to [0, 1], read as
  ``(1, 28, 28)``; ``label_id`` is the class, 0..61.

Rows are grouped by ``client_id`` in order of first appearance; train and test rows of one
``client_id`` belong to the same user. A missing column, a bad ``label_id``, or a sample file
that is missing or not an image is a one-line error naming the CSV (and row) or the file.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import ClassVar

import numpy as np

from fedclock.scenarios.data.dataset_specs import DATASETS
from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.leaf_tasks import FEMNIST_CLASSES
from fedclock.scenarios.data.user_data import Choose, ClientFileReader, UserData

__all__ = ["COLUMNS", "FedScaleCsvReader", "FemnistCsv", "read_fedscale_csv"]

COLUMNS = ("client_id", "sample_path", "label_name", "label_id")
"""The header of a ``client_data_mapping`` CSV."""


class FedScaleCsvReader(ClientFileReader):
    """FedScale's ``client_data_mapping`` CSVs beside the sample images (module docstring); a
    subclass per dataset gives its number of classes."""

    classes: ClassVar[int] = 0
    """Its number of classes: every ``label_id`` lies in 0..classes-1."""

    def users(self, root: Path, choose: Choose | None = None,
              max_train: int | None = None) -> tuple[list[UserData], int]:
        """Every client of ``train.csv`` (first appearance order) with its ``test.csv`` samples;
        test-only clients last. Returns the users and the number of classes."""
        mapping = root / "client_data_mapping"
        train, test = (_read_csv(mapping / f"{part}.csv", root, self.classes) for part in ("train", "test"))
        users = [UserData(cid, x, y, *test.pop(cid, (x[:0], y[:0]))) for cid, (x, y) in train.items()]
        users += [UserData(cid, x[:0], y[:0], x, y) for cid, (x, y) in test.items()]
        return users, self.classes


class FemnistCsv(FedScaleCsvReader):
    """FEMNIST: 28x28 grey sample images, 62 classes."""

    classes = FEMNIST_CLASSES


def read_fedscale_csv(name: str, root: Path) -> tuple[list[UserData], int]:
    """Dataset ``name``'s FedScale files under ``root`` (the reader its spec names,
    :meth:`FedScaleCsvReader.users`)."""
    reader: FedScaleCsvReader = DATASETS[name].reader("fedscale_csv")
    return reader.users(root)


def _read_csv(path: Path, root: Path, classes: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    if not path.is_file():
        raise DatasetError(f"dataset.root: {path} does not exist (FedScale's layout: "
                           "client_data_mapping/train.csv and test.csv beside the sample files)")
    rows: dict[str, list[tuple[Path, int]]] = {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DatasetError(f"{path}: no {', '.join(missing)} column (the header is {','.join(COLUMNS)})")
            for line, row in enumerate(reader, start=2):
                try:
                    label = int(row["label_id"])
                except (TypeError, ValueError):
                    raise DatasetError(f"{path}: line {line}: label_id {row['label_id']!r} is not an integer") from None
                if not 0 <= label < classes:
                    raise DatasetError(f"{path}: line {line}: label_id {label} outside 0..{classes - 1}")
                if not row["client_id"] or not row["sample_path"]:
                    raise DatasetError(f"{path}: line {line}: empty client_id or sample_path")
                rows.setdefault(row["client_id"], []).append((_sample(root, row["sample_path"], path, line), label))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"{path}: cannot be read as CSV ({type(exc).__name__}: {exc})") from None
    return {cid: (np.stack([_image(p) for p, _ in samples]), np.array([lab for _, lab in samples], dtype=np.int64))
            for cid, samples in rows.items()}


def _sample(root: Path, relative: str, csv_path: Path, line: int) -> Path:
    for base in (root, root / "data"):
        if (base / relative).is_file():
            return base / relative
    raise DatasetError(f"{csv_path}: line {line}: sample file {relative} is neither under {root} nor {root / 'data'}")


def _image(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            grey = img.convert("L")
            if grey.size != (28, 28):
                grey = grey.resize((28, 28), Image.Resampling.BILINEAR)
            return (np.asarray(grey, dtype=np.float32) / 255.0).reshape(1, 28, 28)
    except (UnidentifiedImageError, OSError) as exc:
        raise DatasetError(f"{path}: not a readable image ({type(exc).__name__})") from None
