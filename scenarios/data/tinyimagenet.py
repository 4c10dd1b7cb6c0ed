"""TinyImageNet (200 classes, 64x64 colour) read from image folders.

Layout under ``dataset.root`` (``<root>/tiny-imagenet-200``, the official archive's folder):

* ``train/<class>/...``: an ImageFolder tree (the official ``train/<wnid>/images/*.JPEG``
  works as is: files are found recursively under each class folder);
* ``val/``: either the official layout, ``val/images/*`` with ``val/val_annotations.txt``
  (``file<TAB>class<TAB>...`` per line), or an ImageFolder tree ``val/<class>/...`` with
  the same class folders as ``train``. The validation split is the global test set (the
  official test split has no labels).

Files are listed by ``torchvision.datasets.ImageFolder`` (class indices: sorted folder names)
and decoded with Pillow to RGB; an image whose side differs from ``image_size`` (default 64)
is resized (bilinear) while reading, so the pool fits one uint8 tensor.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

FOLDER = "tiny-imagenet-200"
NATIVE_SIDE = 64


class TinyImageNetMissing(Exception):
    """The expected folders are absent or unreadable (turned into a DatasetError by the caller)."""


def load_tinyimagenet(root: Path, side: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                             torch.Tensor, int]:
    """``(x_train, y_train, x_test, y_test, classes)`` with uint8 images ``(N, 3, s, s)``."""
    import torchvision.datasets as tvd

    base = root / FOLDER
    train_dir, val_dir = base / "train", base / "val"
    if not train_dir.is_dir() or not val_dir.is_dir():
        raise TinyImageNetMissing(f"dataset.root: TinyImageNet not found under {root} (expected image folders "
                                  f"{train_dir}/<class>/ and {val_dir}/); put the extracted {FOLDER} folder there")
    try:
        train = tvd.ImageFolder(str(train_dir))
    except (FileNotFoundError, RuntimeError) as err:
        raise TinyImageNetMissing(f"dataset.root: no images in class folders under {train_dir} "
                                  f"({' '.join(str(err).split())[:160]})") from err
    classes = train.class_to_idx
    size = side or NATIVE_SIDE
    x_train, y_train = _decode(train.samples, size)
    annotations = val_dir / "val_annotations.txt"
    if annotations.is_file():
        val_samples = []
        for line_no, line in enumerate(annotations.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 2 or parts[1] not in classes:
                raise TinyImageNetMissing(f"dataset.root: {annotations} line {line_no} names no known class "
                                          f"(got {line[:80]!r}); the file does not match {train_dir}")
            val_samples.append((str(val_dir / "images" / parts[0]), classes[parts[1]]))
    else:
        try:
            val = tvd.ImageFolder(str(val_dir))
        except (FileNotFoundError, RuntimeError) as err:
            raise TinyImageNetMissing(f"dataset.root: no images in class folders under {val_dir} and no "
                                      f"{annotations.name} ({' '.join(str(err).split())[:160]})") from err
        unknown = sorted(set(val.classes) - set(classes))
        if unknown:
            raise TinyImageNetMissing(f"dataset.root: {val_dir} has class folders absent from {train_dir} "
                                      f"({', '.join(unknown[:5])})")
        val_samples = [(path, classes[val.classes[idx]]) for path, idx in val.samples]
    x_test, y_test = _decode(val_samples, size)
    return x_train, y_train, x_test, y_test, len(classes)


def _decode(samples: list[tuple[str, int]], side: int) -> tuple[torch.Tensor, torch.Tensor]:
    from PIL import Image, UnidentifiedImageError

    images = np.empty((len(samples), 3, side, side), dtype=np.uint8)
    labels = np.empty(len(samples), dtype=np.int64)
    for i, (path, label) in enumerate(samples):
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB")
                if rgb.size != (side, side):
                    rgb = rgb.resize((side, side), Image.Resampling.BILINEAR)
                images[i] = np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)
        except (OSError, UnidentifiedImageError) as err:
            raise TinyImageNetMissing(f"dataset.root: cannot read image {path} ({type(err).__name__}); "
                                      "replace or delete it") from err
        labels[i] = label
    return torch.from_numpy(images), torch.from_numpy(labels)
