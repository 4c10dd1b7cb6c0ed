"""MNIST-1D: generated locally (no download), cached, and loaded as a scenario's dataset."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from fedclock.scenarios.data.datasets import load_dataset
from fedclock.scenarios.data.mnist1d import load_mnist1d
from fedclock.scenarios.schema import DatasetConfig


def test_generated_split_cached_and_global_state_untouched(tmp_path: Path) -> None:
    """200 samples, test fraction 0.25: 150 train / 50 test of 40 values, 10 classes; the
    second load reads the cache (same arrays) and NumPy's/Python's global generators are as
    they were."""
    np.random.seed(7)
    random.seed(7)
    before = (np.random.random(), random.random())
    np.random.seed(7)
    random.seed(7)
    first = load_mnist1d(200, 0.25, tmp_path)
    assert (np.random.random(), random.random()) == before
    assert first["x_train"].shape == (150, 40) and first["x_test"].shape == (50, 40)
    assert set(np.unique(np.concatenate([first["y_train"], first["y_test"]]))) == set(range(10))
    assert (tmp_path / "mnist1d" / "mnist1d_200_0.25.npz").is_file()
    again = load_mnist1d(200, 0.25, tmp_path)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])


def test_scenario_dataset(tmp_path: Path) -> None:
    """``dataset.name: mnist1d`` gives (N, 40) vectors; ``max_train_samples`` subsamples by seed;
    the data set itself does not depend on the scenario seed."""
    cfg = DatasetConfig(name="mnist1d", mnist1d_samples=200, root=tmp_path, max_train_samples=100)
    a, b = load_dataset(cfg, 0, 4), load_dataset(cfg, 1, 4)
    assert a.input_shape == (40,) and a.num_classes == 10 and len(a.y_train) == 100 and len(a.y_test) == 40
    assert torch.equal(a.x_test, b.x_test) and not torch.equal(a.y_train, b.y_train)
