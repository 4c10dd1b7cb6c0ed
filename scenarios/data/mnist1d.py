"""MNIST-1D (Greydanus & Kobak, "Scaling down deep learning with MNIST-1D", ICML 2024),
generated locally by the ``mnist1d`` package: no download.

Each sample is a 40-long sequence: one of ten 12-point templates, padded, scaled, translated,
sheared, with correlated and i.i.d. noise (the package's ``make_dataset`` with its default
arguments), so a plain MLP stays far below 100 % (about 70 % in the paper's Table 1) and
orderings between methods can show. ``dataset.mnist1d_samples`` samples are generated with the
package's fixed generator seed (42, so the data set is the same for every scenario seed, as
MNIST's is; 5000 samples give the package's published set), and the last
``dataset.global_test_fraction`` of them (the package's own split, default 0.2) form the global
test set.

Generation is a Python loop (about 3 ms a sample), so the arrays are cached as
``<data root>/mnist1d/mnist1d_<samples>_<test fraction>.npz`` (:func:`~fedclock.scenarios.data.datasets.data_root`)
and read from there afterwards. The package seeds NumPy's and Python's global generators
(``set_seed``); this module saves and restores both around the call, so nothing else in the
process sees a changed global state.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np

GENERATOR_SEED = 42
"""The ``mnist1d`` package's default seed (its published data set)."""


def generate(samples: int, test_fraction: float) -> dict[str, np.ndarray]:
    """Generate MNIST-1D: ``x_train``/``x_test`` (N, 40) float32, ``y_train``/``y_test`` int64."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = samples
    args.train_split = 1.0 - test_fraction
    args.seed = GENERATOR_SEED
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)
    return {"x_train": data["x"].astype(np.float32), "y_train": data["y"].astype(np.int64),
            "x_test": data["x_test"].astype(np.float32), "y_test": data["y_test"].astype(np.int64)}


def load_mnist1d(samples: int, test_fraction: float, root: Path) -> dict[str, np.ndarray]:
    """MNIST-1D from the cache under ``root`` (generated and cached when missing or unreadable)."""
    path = root / "mnist1d" / f"mnist1d_{samples}_{test_fraction:g}.npz"
    if path.is_file():
        try:
            with np.load(path) as cached:
                return {k: cached[k] for k in ("x_train", "y_train", "x_test", "y_test")}
        except (OSError, ValueError, KeyError):
            pass  # a broken cache file: generate again below
    data = generate(samples, test_fraction)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")  # processes side by side
        np.savez(tmp, x_train=data["x_train"], y_train=data["y_train"], x_test=data["x_test"],
                 y_test=data["y_test"])
        tmp.replace(path)
    except OSError:
        pass  # a read-only data root: generate each time
    return data
