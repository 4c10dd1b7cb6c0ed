"""``dataset.format: user_arrays``: every user's samples in array files, mapped and read when the
user trains (:mod:`fedclock.scenarios.data.user_arrays`); tests write their own small files."""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from fedclock.actors.federation import ClientRanges, Federation
from fedclock.actors.runtime import Runtime
from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.data.leaf import SyntheticLeaf
from fedclock.scenarios.data.user_arrays import (generated_folder, read_user_arrays, user_sizes,
                                                 write_user_arrays)
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.schema import DatasetConfig, GeneratedFiles
from tests.conftest import scenario
from tests.scenarios.one_line import one_line_error


def _users() -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Three users of 2-feature samples whose values say whose and which they are."""
    def rows(user: int, part: int, n: int) -> np.ndarray:
        return np.array([[100 * user + 10 * part + i, -1.0] for i in range(n)], dtype=np.float32)
    return [(rows(0, 0, 2), np.array([0, 1]), rows(0, 1, 1), np.array([1])),
            (rows(1, 0, 3), np.array([2, 2, 0]), rows(1, 1, 2), np.array([0, 2])),
            (rows(2, 0, 1), np.array([1]), rows(2, 1, 1), np.array([2]))]


def test_a_user_is_a_client_with_its_own_rows_and_the_test_rows_are_the_global_test_set(tmp_path: Path) -> None:
    write_user_arrays(tmp_path, "synthetic", 3, _users())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["users"], manifest["train_samples"], manifest["test_samples"]) == (3, 6, 4)
    assert np.load(tmp_path / "train_offsets.npy").tolist() == [0, 2, 5, 6]
    assert np.load(tmp_path / "test_offsets.npy").tolist() == [6, 7, 9, 10]
    fed = read_user_arrays(tmp_path, "synthetic", 3)
    assert isinstance(fed.client_train, ClientRanges) and isinstance(fed.client_test, ClientRanges)
    assert fed.num_clients == 3 and fed.client_sizes().tolist() == [2, 3, 1] and fed.num_classes == 3
    for k, (x_tr, y_tr, x_te, y_te) in enumerate(_users()):
        data = fed.client_data(k)
        assert data.x_train.tolist() == x_tr.tolist() and data.y_train.tolist() == y_tr.tolist()
        assert data.x_test.tolist() == x_te.tolist() and data.y_test.tolist() == y_te.tolist()
    assert fed.x_test[:, 0].tolist() == [10, 110, 111, 210] and fed.y_test.tolist() == [1, 0, 2, 2]


def test_the_samples_are_read_from_the_files_when_used_and_never_pickled(tmp_path: Path) -> None:
    write_user_arrays(tmp_path, "synthetic", 3, _users())
    fed = read_user_arrays(tmp_path, "synthetic", 3)
    # a value written into the file after mapping is what the client's task reads: no copy was made
    on_disk = np.load(tmp_path / "x.npy", mmap_mode="r+")
    on_disk[3, 1] = 7.0
    on_disk.flush()
    assert fed.client_data(1).x_train[1].tolist() == [101.0, 7.0]
    # pickled (Ray's object store) as paths and offsets: the same size for 10 rows or 10,000
    many = tmp_path / "many"
    big = [(np.zeros((5000, 2)), np.zeros(5000), np.zeros((1, 2)), np.zeros(1)) for _ in range(2)]
    write_user_arrays(many, "synthetic", 3, big)
    sizes = [len(pickle.dumps(read_user_arrays(folder, "synthetic", 2 if folder == many else 3)))
             for folder in (tmp_path, many)]
    assert abs(sizes[0] - sizes[1]) < 64 and sizes[1] < 4096
    again: Federation = pickle.loads(pickle.dumps(fed))
    assert again.client_data(1).x_train.tolist() == fed.client_data(1).x_train.tolist()
    assert again.x_test.tolist() == fed.x_test.tolist() and set(again.mapped) == {"x", "y", "x_test", "y_test"}
    # the offsets too are mapped, and pickled as their files
    train = again.client_train
    assert isinstance(train, ClientRanges) and train.source == str(tmp_path / "train_offsets.npy")
    assert isinstance(train.offsets, np.memmap) and again.client_sizes().tolist() == [2, 3, 1]
    held = ClientRanges(np.array([4, 6, 9]))
    assert pickle.loads(pickle.dumps(held)).offsets.tolist() == [4, 6, 9] and held.source is None


def test_each_users_size_and_test_count_follow_the_rule() -> None:
    class Draws:
        """lognormal returns set values: 8 x (0.2, 1.0, 2.26, 0.7) = 1.6, 8, 18.08, 5.6."""

        def lognormal(self, mean: float, sigma: float, n: int) -> np.ndarray:
            assert (mean, sigma, n) == (0.0, 0.8, 4)
            return np.array([0.2, 1.0, 2.26, 0.7])

    sizes, tests = user_sizes(Draws(), GeneratedFiles(users=4, mean_samples=8, test_fraction=0.3))  # type: ignore[arg-type]
    # max(4, round(.)) = 4, 8, 18, 6; tests max(1, round(0.3 n)): round(1.2) 1, round(2.4) 2, round(5.4) 5, round(1.8) 2
    assert sizes.tolist() == [4, 8, 18, 6] and tests.tolist() == [1, 2, 5, 2]
    _, most = user_sizes(Draws(), GeneratedFiles(users=4, mean_samples=8, test_fraction=0.95))  # type: ignore[arg-type]
    assert most.tolist() == [3, 7, 17, 5]  # at most n - 1: a user keeps a training sample


def _generated(tmp_path: Path, **extra: Any) -> DatasetConfig:
    return DatasetConfig(name="synthetic", format="user_arrays", root=tmp_path, synthetic_features=3,
                         generate={"users": 50, "mean_samples": 6, "test_fraction": 0.2},
                         partition={"type": "natural"}, **extra)


def test_generated_users_are_drawn_once_and_mapped_by_later_runs(tmp_path: Path) -> None:
    cfg = _generated(tmp_path)
    fed = build_federation(cfg, 50, seed=4)
    folder = generated_folder(cfg, 4)
    assert folder.parent == tmp_path / "generated" and (folder / "manifest.json").exists()
    stamp = (folder / "x.npy").stat().st_mtime_ns
    again = build_federation(cfg, 50, seed=4)
    assert (folder / "x.npy").stat().st_mtime_ns == stamp  # not drawn again
    assert torch.equal(again.x, fed.x) and torch.equal(again.y, fed.y)
    other = build_federation(cfg, 50, seed=5)
    assert generated_folder(cfg, 5) != folder and not torch.equal(other.x[:10], fed.x[:10])
    assert generated_folder(_generated(tmp_path, synthetic_alpha=0.5), 4) != folder
    # the users' sizes are the rule's for the generator stream, and every user has a test row
    sizes = fed.client_sizes() + np.diff(fed.client_test.offsets)
    assert len(sizes) == 50 and sizes.min() >= 4 and np.diff(fed.client_test.offsets).min() >= 1
    assert 0 <= int(fed.y.min()) and int(fed.y.max()) < 10 and fed.x.shape[1] == 3
    # a half-written folder (no manifest) is drawn again, not read
    (folder / "manifest.json").unlink()
    assert torch.equal(build_federation(cfg, 50, seed=4).x, fed.x)


def _tables(runtime: Runtime, out: Path, dataset: dict[str, Any]) -> list[pd.DataFrame]:
    s = scenario(dataset=dataset, population={"num_clients": 30}, model={"name": "mlp", "hidden": [8]},
                 algorithm={"name": "fedavg", "lr": 0.1, "batch_size": 5}, mode={"type": "sync", "cohort_size": 6},
                 stop={"rounds": 3}, evaluation={"every": 1}, seed=2,
                 runtime={"backend": runtime.backend, **({"num_actors": 1, "placement": "pooled", "num_cpus": 0.4}
                                                         if runtime.backend == "ray" else {})})
    run_scenario(s, runtime, out)
    return [pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(out / "events.parquet"), pd.read_parquet(out / "clients.parquet")]


def test_a_run_on_user_arrays_on_ray_equals_the_run_on_the_same_users_leaf_files(ray_runtime: Runtime,
                                                                                 tmp_path: Path) -> None:
    """The same users as LEAF JSON read whole (inline) and as mapped user arrays (on Ray, where
    every process maps the files): every table equal, personalized evaluation included."""
    reader = SyntheticLeaf()
    reader.write(tmp_path / "leaf", GeneratedFiles(users=30, mean_samples=12, test_fraction=0.25), 1)
    users, classes = reader.users(tmp_path / "leaf")
    write_user_arrays(tmp_path / "arrays", "synthetic", classes,
                      [(u.x_train, u.y_train, u.x_test, u.y_test) for u in users])
    leaf = _tables(Runtime("inline"), tmp_path / "run_leaf", {"name": "synthetic_leaf", "format": "leaf",
                                                                "root": str(tmp_path / "leaf"),
                                                                "partition": {"type": "natural"}})
    mapped = _tables(ray_runtime, tmp_path / "run_arrays", {"name": "synthetic", "format": "user_arrays",
                                                            "root": str(tmp_path / "arrays"),
                                                            "partition": {"type": "natural"}})
    assert leaf[0]["personal_accuracy_mean"].notna().all() and leaf[1].client.nunique() > 6
    for a, b in zip(leaf, mapped):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def _scenario(tmp_path: Path, dataset: dict[str, Any], clients: int = 3) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "dataset": dataset, "population": {"num_clients": clients},
                                    "algorithm": {"name": "fedavg"},
                                    "stop": {"rounds": 1}, "runtime": {"backend": "inline"}}))
    return path


def test_mistakes_are_one_line_errors_naming_the_field(tmp_path: Path) -> None:
    files = tmp_path / "files"
    write_user_arrays(files, "synthetic", 3, _users())
    base = {"name": "synthetic", "format": "user_arrays", "root": str(files), "partition": {"type": "natural"}}
    out = ["--out", str(tmp_path / "out"), "--overwrite"]
    one_line_error(["run", str(_scenario(tmp_path, base, clients=4)), *out], "population.num_clients", "3 users")
    one_line_error(["run", str(_scenario(tmp_path, {**base, "root": str(tmp_path / "none")})), *out],
                   "dataset.root", "manifest.json")
    one_line_error(["run", str(_scenario(tmp_path, {**base, "partition": {"type": "iid"}})), *out],
                   "partition.type", "natural")
    one_line_error(["run", str(_scenario(tmp_path, {**base, "partition": {"type": "natural", "sample_clients": 2}})),
                    *out], "partition", "sample_clients")
    one_line_error(["run", str(_scenario(tmp_path, {**base, "name": "femnist"})), *out], "format", "synthetic")
    leaf = {"name": "synthetic_leaf", "format": "leaf", "generate": {"users": 200_000},
            "partition": {"type": "natural"}}
    one_line_error(["run", str(_scenario(tmp_path, leaf)), *out], "generate.users", "100,000", "user_arrays")
    np.save(files / "train_offsets.npy", np.array([0, 3, 2, 6]))  # not rising
    one_line_error(["run", str(_scenario(tmp_path, base)), *out], "dataset.root", "train_offsets.npy")
    manifest = json.loads((files / "manifest.json").read_text())
    (files / "manifest.json").write_text(json.dumps({**manifest, "dataset": "synthetic_leaf"}))
    one_line_error(["run", str(_scenario(tmp_path, base)), *out], "dataset.name", "synthetic_leaf")


def test_a_disk_too_small_for_the_draw_is_named_before_writing(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6, 1000))  # type: ignore[attr-defined]
    with pytest.raises(DatasetError, match=r"dataset.generate.users: 50 users need about .* GiB of files"):
        build_federation(_generated(tmp_path), 50, seed=0)
    assert not list((tmp_path / "generated").glob("*/x.npy"))
