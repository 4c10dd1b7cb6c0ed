"""dataset.generate for cifar10: CIFAR-10's own pickles written from the seed and read back
through the reader of the real files (scenarios/data/cifar_generate.py)."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from fedclock.scenarios.data.cifar_generate import cifar_sizes, write_cifar10
from fedclock.scenarios.data.datasets import load_dataset
from fedclock.scenarios.schema import DatasetConfig, GeneratedFiles


def test_generated_files_have_cifar10s_layout(tmp_path: Path) -> None:
    cfg = GeneratedFiles(users=4, mean_samples=5, test_samples=3)
    assert cifar_sizes(cfg) == (20, 3)
    assert cifar_sizes(GeneratedFiles(users=1000, mean_samples=50, test_fraction=1 / 6)) == (50_000, 10_000)
    write_cifar10(tmp_path, cfg, 0)
    base = tmp_path / "cifar-10-batches-py"
    assert sorted(p.name for p in base.iterdir()) == ["batches.meta", *[f"data_batch_{i}" for i in range(1, 6)],
                                                      "test_batch"]
    entry = pickle.loads((base / "data_batch_1").read_bytes())
    assert entry["data"].shape == (4, 3072) and entry["data"].dtype.name == "uint8" and len(entry["labels"]) == 4
    assert pickle.loads((base / "test_batch").read_bytes())["data"].shape == (3, 3072)


def test_load_reads_them_through_the_cifar_reader() -> None:
    cfg = DatasetConfig(name="cifar10", generate={"users": 4, "mean_samples": 5, "test_samples": 3})
    one, two = load_dataset(cfg, 0, 4), load_dataset(cfg, 0, 4)
    assert one.x_train.shape == (20, 3, 32, 32) and one.x_test.shape == (3, 3, 32, 32) and one.num_classes == 10
    assert torch.equal(one.x_train, two.x_train) and torch.equal(one.y_train, two.y_train)
    assert not torch.equal(one.x_train, load_dataset(cfg, 1, 4).x_train)
    assert torch.allclose(one.x_train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)  # standardized as the real


@pytest.mark.parametrize("fields, message", [
    ({"name": "mnist", "generate": {}}, "generate: needs dataset.format (allowed: leaf), or dataset.name cifar10"),
    ({"name": "cifar10", "generate": {"users": 3, "mean_samples": 3}}, "users x mean_samples is 9 training images"),
    ({"name": "cifar10", "generate": {}, "root": "/data"}, "remove them, or set dataset.generate: null"),
    ({"name": "femnist", "format": "leaf", "generate": {"test_samples": 5}, "partition": {"type": "natural"}},
     "generate.test_samples: applies to cifar10"),
])
def test_mistakes_are_named(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DatasetConfig(**fields)
