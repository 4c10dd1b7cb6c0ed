"""Broken data files reach the user as one line naming the file; CIFAR pickles cannot run code."""
from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedclock.scenarios.data.datasets import DatasetError, load_dataset
from fedclock.scenarios.schema import DatasetConfig
from tests.scenarios.test_datasets import MNIST_NAMES, _write_cifar, _write_mnist_like
from tests.scenarios.one_line import one_line_error


def _run_cli(tmp_path: Path, dataset: dict[str, Any]) -> str:
    scenario = {"name": "broken", "dataset": dataset, "population": {"num_clients": 2},
                "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1}, "runtime": {"backend": "inline"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return one_line_error(["run", str(path), "--quiet", "--out", str(tmp_path / "out")])


@pytest.mark.parametrize("damage", ["truncated", "bad_gzip", "garbage"])
def test_cli_names_the_broken_mnist_file(tmp_path: Path, damage: str) -> None:
    raw = tmp_path / "data" / "MNIST" / "raw"
    _write_mnist_like(raw, MNIST_NAMES, 12, 6, 10)
    gz = raw / "train-labels-idx1-ubyte.gz"
    if damage == "truncated":  # a valid gzip whose IDX content is cut short
        gz.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes())[:-3]))
        named = str(raw / "train-labels-idx1-ubyte")
    elif damage == "bad_gzip":
        gz.write_bytes(gz.read_bytes()[:20])
        named = str(gz)
    else:
        gz.unlink()
        (raw / "train-labels-idx1-ubyte").write_bytes(b"this is not an IDX file")
        named = str(raw / "train-labels-idx1-ubyte")
    err = _run_cli(tmp_path, {"name": "mnist", "root": str(tmp_path / "data")})
    assert f"{named} is truncated or corrupt" in err


def test_cli_names_the_broken_cifar_file(tmp_path: Path) -> None:
    base = tmp_path / "data" / "cifar-100-python"
    _write_cifar(base, {"train": 8, "test": 4}, "fine_labels", 100)
    (base / "train").write_bytes((base / "train").read_bytes()[:-50])
    err = _run_cli(tmp_path, {"name": "cifar100", "root": str(tmp_path / "data")})
    assert f"{base / 'train'} is truncated or corrupt" in err


def test_cifar_protocol2_pickles_load(tmp_path: Path) -> None:
    """The published batches are Python-2 era protocol-2 pickles; those still load."""
    base = tmp_path / "cifar-100-python"
    base.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", 6), ("test", 3)):
        entry = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "fine_labels": list(range(n))}
        (base / name).write_bytes(pickle.dumps(entry, protocol=2))
    ds = load_dataset(DatasetConfig(name="cifar100", root=tmp_path), seed=0, num_clients=2)
    assert ds.x_train.shape == (6, 3, 32, 32) and ds.y_test.tolist() == [0, 1, 2]


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_cifar_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "cifar-10-batches-py"
    _write_cifar(base, {f"data_batch_{i}": 4 for i in range(1, 6)} | {"test_batch": 4}, "labels", 10)
    marker = tmp_path / "pwned"
    (base / "data_batch_3").write_bytes(pickle.dumps({"data": _Payload(marker), "labels": [0]}))
    with pytest.raises(DatasetError) as err:
        load_dataset(DatasetConfig(name="cifar10", root=tmp_path), seed=0, num_clients=1)
    assert not marker.exists()
    msg = str(err.value)
    assert f"{base / 'data_batch_3'} is truncated or corrupt" in msg and "refusing to load" in msg and "\n" not in msg
