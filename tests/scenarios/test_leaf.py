"""LEAF's JSON client files: users, counts, shapes and per-user test sets from small files
written here in exactly LEAF's layout; reproducible user filters; a malformed file is one
line naming it (exit 2); the generated quick data run end to end."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from fedclock.scenarios.cli import main
from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.data.leaf_tasks import LEAF_LETTERS
from fedclock.scenarios.schema import DatasetConfig
from tests.scenarios.one_line import one_line_error


def _image(value: float) -> list[float]:
    return [value] * 784


def _write(folder: Path, part: str, name: str, users: dict[str, tuple[list, list]]) -> Path:
    (folder / part).mkdir(parents=True, exist_ok=True)
    path = folder / part / name
    path.write_text(json.dumps({"users": list(users), "num_samples": [len(x) for x, _ in users.values()],
                                "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}))
    return path


def _femnist_files(root: Path) -> None:
    """Writers a (3 train, 1 test) and b (2 train, 2 test) in file 0, c (4 train, 1 test) in
    file 1, and d only in a test file (LEAF's by-user split)."""
    _write(root, "train", "all_data_0_train.json", {"a": ([_image(0.1)] * 3, [0, 1, 2]),
                                                    "b": ([_image(0.2)] * 2, [3, 61])})
    _write(root, "train", "all_data_1_train.json", {"c": ([_image(0.3)] * 4, [5, 5, 5, 6])})
    _write(root, "test", "all_data_0_test.json", {"a": ([_image(0.4)], [7]), "b": ([_image(0.5)] * 2, [8, 9])})
    _write(root, "test", "all_data_1_test.json", {"c": ([_image(0.6)], [10]), "d": ([_image(0.7)], [11])})


def _cfg(root: Path, **partition: Any) -> DatasetConfig:
    return DatasetConfig(name="femnist", format="leaf", root=root, partition={"type": "natural", **partition})


def test_every_writer_is_a_client_with_its_own_test_set(tmp_path: Path) -> None:
    _femnist_files(tmp_path)
    fed = build_federation(_cfg(tmp_path), 3, seed=0)
    assert fed.num_classes == 62 and fed.input_shape == (1, 28, 28)
    assert fed.client_sizes().tolist() == [3, 2, 4]
    assert [len(t) for t in fed.client_test] == [1, 2, 1]
    for k, (train_value, test_value) in enumerate([(0.1, 0.4), (0.2, 0.5), (0.3, 0.6)]):
        data = fed.client_data(k)
        assert torch.allclose(data.x_train, torch.full_like(data.x_train, train_value))
        assert torch.allclose(data.x_test, torch.full_like(data.x_test, test_value))
    assert fed.client_data(0).y_train.tolist() == [0, 1, 2] and fed.client_data(1).y_test.tolist() == [8, 9]
    # the global test set is the union of the users' test sets, the test-only writer d included
    assert sorted(fed.y_test.tolist()) == [7, 8, 9, 10, 11]


def test_shakespeare_windows_and_next_characters(tmp_path: Path) -> None:
    text = "To be, or not to be: that is the question.\nWhether 'tis nobler in the mind to suffer}"
    x = [text[i:i + 80] for i in range(3)]
    y = [text[i + 80] for i in range(3)]
    _write(tmp_path, "train", "t.json", {"HAMLET": (x[:2], y[:2])})
    _write(tmp_path, "test", "t.json", {"HAMLET": (x[2:], y[2:])})
    cfg = DatasetConfig(name="shakespeare", format="leaf", root=tmp_path, partition={"type": "natural"})
    fed = build_federation(cfg, 1, seed=0)
    assert fed.num_classes == 80 and len(LEAF_LETTERS) == 80 and fed.input_shape == (80,)
    data = fed.client_data(0)
    assert data.x_train[0, :2].tolist() == [LEAF_LETTERS.index("T"), LEAF_LETTERS.index("o")]
    assert data.x_train[1, -1].item() == LEAF_LETTERS.index(text[80])
    assert data.y_train.tolist() == [LEAF_LETTERS.index(c) for c in y[:2]]
    assert data.y_test.tolist() == [LEAF_LETTERS.index(text[82])]


def test_min_samples_and_reproducible_client_sampling(tmp_path: Path) -> None:
    _femnist_files(tmp_path)
    assert build_federation(_cfg(tmp_path, min_samples=5), 1, seed=0).client_sizes().tolist() == [4]  # c: 4 + 1
    picks = {tuple(build_federation(_cfg(tmp_path, sample_clients=2), 2, seed=s).client_sizes()) for s in range(8)}
    assert len(picks) > 1  # the seed decides which users
    for seed in (0, 5):
        one, two = (build_federation(_cfg(tmp_path, sample_clients=2), 2, seed=seed) for _ in range(2))
        assert one.client_sizes().tolist() == two.client_sizes().tolist()
    with pytest.raises(DatasetError, match=r"population.num_clients: 5 clients, .* give 3 users"):
        build_federation(_cfg(tmp_path), 5, seed=0)
    with pytest.raises(DatasetError, match="sample_clients: 4 exceeds the 3 users"):
        build_federation(_cfg(tmp_path, sample_clients=4), 4, seed=0)


def test_a_label_partition_splits_the_pooled_users(tmp_path: Path) -> None:
    _femnist_files(tmp_path)
    cfg = DatasetConfig(name="femnist", format="leaf", root=tmp_path, partition={"type": "iid"})
    fed = build_federation(cfg, 3, seed=0)
    assert sum(fed.client_sizes()) + sum(len(t) for t in fed.client_test) == 9
    assert sorted(fed.y_test.tolist()) == [7, 8, 9, 10, 11]


def _damage(root: Path, how: str) -> tuple[Path, str]:
    train = root / "train" / "all_data_0_train.json"
    data = json.loads(train.read_text())
    if how == "not_json":
        train.write_text(train.read_text()[:-40])
        return train, "not valid JSON"
    if how == "missing_key":
        del data["num_samples"]
        message = "no num_samples"
    elif how == "count":
        data["num_samples"][0] = 9
        message = "user 'a' has 3 x and 3 y but num_samples says 9"
    elif how == "pixels":
        data["user_data"]["b"]["x"][1] = [0.5] * 783
        message = "user 'b': x must be lists of 784 numbers"
    elif how == "label":
        data["user_data"]["b"]["y"][1] = 62
        message = "user 'b': y holds label 62, outside 0..61"
    elif how == "no_test":
        for f in (root / "test").iterdir():
            f.unlink()
        (root / "test").rmdir()
        return root, "has no test/ folder"
    else:
        raise AssertionError(how)
    train.write_text(json.dumps(data))
    return train, message


@pytest.mark.parametrize("how", ["not_json", "missing_key", "count", "pixels", "label", "no_test"])
def test_a_malformed_file_is_one_line_naming_it(tmp_path: Path, how: str) -> None:
    root = tmp_path / "leaf"
    _femnist_files(root)
    path, message = _damage(root, how)
    scenario = {"name": "broken", "dataset": {"name": "femnist", "format": "leaf", "root": str(root),
                                              "partition": {"type": "natural"}},
                "model": {"name": "logistic"}, "population": {"num_clients": 3}, "algorithm": {"name": "fedavg"},
                "stop": {"rounds": 1}, "runtime": {"backend": "inline"}}
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump(scenario))
    one_line_error(["run", str(file), "--quiet", "--out", str(tmp_path / "out")], str(path), message)


def test_an_unknown_character_names_the_file(tmp_path: Path) -> None:
    _write(tmp_path, "train", "t.json", {"ROLE": (["é" * 80], ["a"])})
    _write(tmp_path, "test", "t.json", {"ROLE": (["a" * 80], ["a"])})
    cfg = DatasetConfig(name="shakespeare", format="leaf", root=tmp_path, partition={"type": "natural"})
    with pytest.raises(DatasetError, match=r"t.json: user 'ROLE': character 'é' is not in LEAF's 80-letter"):
        build_federation(cfg, 1, seed=0)


def test_schema_names_what_client_files_need() -> None:
    with pytest.raises(ValueError, match="format: femnist is read from client files"):
        DatasetConfig(name="femnist")
    with pytest.raises(ValueError, match="format: fedscale_csv is read for femnist, not shakespeare"):
        DatasetConfig(name="shakespeare", format="fedscale_csv")
    with pytest.raises(ValueError, match="min_samples and sample_clients apply to client files"):
        DatasetConfig(name="synthetic", partition={"type": "natural", "min_samples": 3})


def test_generated_files_run_end_to_end_with_natural_stragglers(tmp_path: Path) -> None:
    """A generated LEAF FEMNIST set through ``fedclock run``: writers' sizes differ, so with
    equal devices and one local epoch the largest writer's task takes longest (the clock
    charges each client's own sample count)."""
    scenario = {"name": "gen", "seed": 3,
                "dataset": {"name": "femnist", "format": "leaf", "generate": {"users": 6, "mean_samples": 30},
                            "partition": {"type": "natural"}},
                "model": {"name": "logistic"}, "population": {"num_clients": 6, "devices": {"compute": 100}},
                "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8, "local_epochs": 1},
                "stop": {"rounds": 2}, "evaluation": {"personalized": True}, "runtime": {"backend": "inline"},
                "output": {"progress": False}}
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump(scenario))
    assert main(["run", str(file), "--quiet", "--out", str(tmp_path / "out")]) == 0
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    fed = build_federation(DatasetConfig(**scenario["dataset"]), 6, seed=3)
    sizes = fed.client_sizes()
    first = events[events["round"] == events["round"].min()]
    duration = (first.finished_at - first.dispatched_at).to_numpy()
    by_client = dict(zip(first.client.to_numpy(), duration))
    slowest = max(by_client, key=by_client.__getitem__)
    assert sizes[slowest] == sizes.max() and len(set(sizes.tolist())) > 2
    assert np.corrcoef([sizes[c] for c in by_client], list(by_client.values()))[0, 1] > 0.9
