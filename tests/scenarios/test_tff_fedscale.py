"""TFF's HDF5 client files and FedScale's client_data_mapping CSVs, from small files written
here in exactly their layouts: users, counts, shapes, per-user test sets; a malformed file
is one line naming it (exit 2)."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import yaml
from PIL import Image

from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.data.leaf_tasks import LEAF_LETTERS
from fedclock.scenarios.schema import DatasetConfig
from tests.scenarios.one_line import one_line_error


def _h5(path: Path, clients: dict[str, dict[str, Any]]) -> None:
    with h5py.File(path, "w") as f:
        for cid, features in clients.items():
            for key, value in features.items():
                f.create_dataset(f"examples/{cid}/{key}", data=value)


def _emnist(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    px = np.linspace(0, 1, 784, dtype=np.float32).reshape(28, 28)
    _h5(root / "fed_emnist_train.h5", {"f0000_14": {"pixels": np.stack([px] * 3), "label": np.array([1, 2, 61])},
                                       "f0001_41": {"pixels": np.stack([px] * 2), "label": np.array([4, 5])}})
    _h5(root / "fed_emnist_test.h5", {"f0000_14": {"pixels": np.stack([px]), "label": np.array([7])},
                                      "f0001_41": {"pixels": np.stack([px] * 2), "label": np.array([8, 9])}})


def _run(tmp_path: Path, dataset: dict, clients: int) -> str:
    scenario = {"name": "bad", "dataset": {**dataset, "partition": {"type": "natural"}},
                "model": {"name": "logistic"}, "population": {"num_clients": clients},
                "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1}, "runtime": {"backend": "inline"}}
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump(scenario))
    return one_line_error(["run", str(file), "--quiet", "--out", str(tmp_path / "out")])


def test_tff_emnist_writers_with_their_test_sets(tmp_path: Path) -> None:
    _emnist(tmp_path)
    cfg = DatasetConfig(name="femnist", format="tff_h5", root=tmp_path, partition={"type": "natural"})
    fed = build_federation(cfg, 2, seed=0)
    assert fed.num_classes == 62 and fed.input_shape == (1, 28, 28)
    assert fed.client_sizes().tolist() == [3, 2] and [len(t) for t in fed.client_test] == [1, 2]
    assert fed.client_data(0).y_train.tolist() == [1, 2, 61] and fed.client_data(1).y_test.tolist() == [8, 9]
    assert abs(float(fed.client_data(0).x_train[0, 0, 27, 27]) - 1.0) < 1e-6
    assert sorted(fed.y_test.tolist()) == [7, 8, 9]


def test_tff_shakespeare_snippets_become_leaf_windows(tmp_path: Path) -> None:
    line = "ROMEO. But soft, what light through yonder window breaks? It is the east, and Juliet is the sun."
    snippets = np.array([line.encode(), b"too short"], dtype=object)
    _h5(tmp_path / "shakespeare_train.h5", {"ROMEO": {"snippets": snippets}})
    _h5(tmp_path / "shakespeare_test.h5", {"ROMEO": {"snippets": np.array([(line + "~").encode()], dtype=object)}})
    cfg = DatasetConfig(name="shakespeare", format="tff_h5", root=tmp_path, partition={"type": "natural"})
    fed = build_federation(cfg, 1, seed=0)
    data = fed.client_data(0)
    assert len(data.y_train) == len(line) - 80 and fed.input_shape == (80,)
    assert data.x_train[0, 0].item() == LEAF_LETTERS.index("R") and data.y_train[0].item() == LEAF_LETTERS.index(
        line[80])
    assert len(data.y_test) == len(line) - 80  # the window whose target is '~' (not a LEAF letter) is left out


def test_tff_cifar100_test_clients_join_the_global_test_set(tmp_path: Path) -> None:
    img = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    img[:, 0, 0, 1] = 255
    _h5(tmp_path / "fed_cifar100_train.h5", {"0": {"image": img, "label": np.array([3, 99])}})
    _h5(tmp_path / "fed_cifar100_test.h5", {"100": {"image": img[:1], "label": np.array([5])}})
    cfg = DatasetConfig(name="cifar100", format="tff_h5", root=tmp_path, partition={"type": "natural"})
    fed = build_federation(cfg, 1, seed=0)
    assert fed.input_shape == (3, 32, 32) and fed.num_classes == 100
    assert float(fed.client_data(0).x_train[0, 1, 0, 0]) == 1.0 and len(fed.client_test[0]) == 0
    assert fed.y_test.tolist() == [5]


@pytest.mark.parametrize("how", ["not_h5", "no_examples", "no_label", "shape"])
def test_a_malformed_h5_file_is_one_line(tmp_path: Path, how: str) -> None:
    root = tmp_path / "tff"
    _emnist(root)
    path = root / "fed_emnist_train.h5"
    if how == "not_h5":
        path.write_bytes(b"not hdf5 at all")
        message = "not a readable HDF5 file"
    elif how == "no_examples":
        with h5py.File(path, "w") as f:
            f.create_dataset("clients/a/pixels", data=np.zeros((1, 28, 28)))
        message = "no examples group"
    elif how == "no_label":
        _h5(path, {"w": {"pixels": np.zeros((2, 28, 28), dtype=np.float32)}})
        message = "client 'w' has no 'label' dataset"
    else:
        _h5(path, {"w": {"pixels": np.zeros((2, 14, 14), dtype=np.float32), "label": np.array([1, 2])}})
        message = "client 'w' pixels must be 28x28 images"
    err = _run(tmp_path, {"name": "femnist", "format": "tff_h5", "root": str(root)}, 2)
    assert str(path) in err and message in err, err


def _fedscale(root: Path) -> None:
    (root / "data" / "train").mkdir(parents=True)
    (root / "client_data_mapping").mkdir()
    for i, value in enumerate((0, 128, 255, 64, 32)):
        Image.fromarray(np.full((28, 28), value, dtype=np.uint8)).save(root / "data" / "train" / f"{i}.png")
    Image.fromarray(np.full((56, 56), 255, dtype=np.uint8)).save(root / "big.png")
    rows = {"train": [("w1", "train/0.png", "a", 36), ("w2", "train/1.png", "b", 37), ("w1", "train/2.png", "c", 38)],
            "test": [("w1", "train/3.png", "d", 39), ("w3", "big.png", "e", 40)]}
    for part, lines in rows.items():
        with open(root / "client_data_mapping" / f"{part}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["client_id", "sample_path", "label_name", "label_id"])
            w.writerows(lines)


def test_fedscale_clients_and_their_sample_files(tmp_path: Path) -> None:
    _fedscale(tmp_path)
    cfg = DatasetConfig(name="femnist", format="fedscale_csv", root=tmp_path, partition={"type": "natural"})
    fed = build_federation(cfg, 2, seed=0)
    assert fed.client_sizes().tolist() == [2, 1] and [len(t) for t in fed.client_test] == [1, 0]
    w1 = fed.client_data(0)
    assert w1.y_train.tolist() == [36, 38] and w1.y_test.tolist() == [39]
    assert w1.x_train[:, 0, 0, 0].tolist() == [0.0, 1.0] and abs(float(w1.x_test[0, 0, 5, 5]) - 64 / 255) < 1e-6
    assert sorted(fed.y_test.tolist()) == [39, 40] and fed.x_test.shape[1:] == (1, 28, 28)  # w3's 56x56 resized


@pytest.mark.parametrize("how", ["column", "label", "missing_file", "not_image"])
def test_a_malformed_fedscale_file_is_one_line(tmp_path: Path, how: str) -> None:
    root = tmp_path / "fs"
    _fedscale(root)
    csv_path = root / "client_data_mapping" / "train.csv"
    text = csv_path.read_text()
    named = csv_path
    if how == "column":
        csv_path.write_text(text.replace("label_id", "label"))
        message = "no label_id column"
    elif how == "label":
        csv_path.write_text(text.replace(",37", ",x7"))
        message = "line 3: label_id 'x7' is not an integer"
    elif how == "missing_file":
        (root / "data" / "train" / "1.png").unlink()
        message = "line 3: sample file train/1.png is neither under"
    else:
        named = root / "data" / "train" / "2.png"
        named.write_bytes(b"garbage")
        message = "not a readable image"
    err = _run(tmp_path, {"name": "femnist", "format": "fedscale_csv", "root": str(root)}, 2)
    assert str(named) in err and message in err, err
