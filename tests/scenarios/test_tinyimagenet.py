"""TinyImageNet from image folders, on tiny trees written by the tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedclock.scenarios.data.datasets import DatasetError, load_dataset
from fedclock.scenarios.schema import DatasetConfig

CLASSES = ("n01", "n02", "n03")


def _image(path: Path, value: int, side: int = 64) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((side, side, 3), value, dtype=np.uint8)
    pixels[0, 0] = (value + 1, value + 2, value + 3)
    Image.fromarray(pixels).save(path, format="PNG")


def _train_tree(base: Path) -> None:
    for c, name in enumerate(CLASSES):
        for i in range(2):
            side = 32 if (c, i) == (2, 1) else 64  # one odd-sized image is resized while reading
            _image(base / "train" / name / "images" / f"{name}_{i}.JPEG", 40 * c + 10 * i, side)


def test_official_layout_with_val_annotations(tmp_path: Path) -> None:
    base = tmp_path / "tiny-imagenet-200"
    _train_tree(base)
    lines = []
    for j, name in enumerate(("n03", "n01")):
        _image(base / "val" / "images" / f"val_{j}.JPEG", 200 + j)
        lines.append(f"val_{j}.JPEG\t{name}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    ds = load_dataset(DatasetConfig(name="tinyimagenet", root=tmp_path), seed=0, num_clients=2)
    assert ds.num_classes == 3 and ds.input_shape == (3, 64, 64)
    assert ds.y_train.tolist() == [0, 0, 1, 1, 2, 2] and ds.y_test.tolist() == [2, 0]
    assert ds.x_train.dtype == torch.float32
    # standardized per channel with the training pool's statistics
    torch.testing.assert_close(ds.x_train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4, rtol=0)


def test_imagefolder_val_and_image_size(tmp_path: Path) -> None:
    base = tmp_path / "tiny-imagenet-200"
    _train_tree(base)
    _image(base / "val" / "n02" / "a.png", 7)
    cfg = DatasetConfig(name="tinyimagenet", root=tmp_path, image_size=16)
    ds = load_dataset(cfg, seed=0, num_clients=1)
    assert ds.input_shape == (3, 16, 16) and ds.y_test.tolist() == [1] and len(ds.y_train) == 6


def test_missing_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        load_dataset(DatasetConfig(name="tinyimagenet", root=tmp_path), seed=0, num_clients=1)
    text = str(err.value)
    assert "\n" not in text and text.startswith("dataset.root:")
    assert str(tmp_path / "tiny-imagenet-200" / "train") in text


def test_annotation_with_unknown_class(tmp_path: Path) -> None:
    base = tmp_path / "tiny-imagenet-200"
    _train_tree(base)
    _image(base / "val" / "images" / "v.JPEG", 1)
    (base / "val" / "val_annotations.txt").write_text("v.JPEG\tn99\t0\t0\t1\t1\n")
    with pytest.raises(DatasetError, match="val_annotations.txt line 1"):
        load_dataset(DatasetConfig(name="tinyimagenet", root=tmp_path), seed=0, num_clients=1)


def test_download_is_refused_with_the_folder_to_fill(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"^dataset.download: TinyImageNet cannot be downloaded"):
        load_dataset(DatasetConfig(name="tinyimagenet", root=tmp_path, download=True), seed=0, num_clients=1)


def test_val_class_folder_missing_from_train(tmp_path: Path) -> None:
    base = tmp_path / "tiny-imagenet-200"
    _train_tree(base)
    _image(base / "val" / "n77" / "a.png", 7)
    with pytest.raises(DatasetError, match="class folders absent from"):
        load_dataset(DatasetConfig(name="tinyimagenet", root=tmp_path), seed=0, num_clients=1)
