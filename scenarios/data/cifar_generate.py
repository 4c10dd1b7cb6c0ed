"""CIFAR-10-shaped images written in CIFAR-10's own python pickles from a seed
(``dataset.generate`` with ``dataset.name: cifar10``), so the reader of the real files
(:func:`fedclock.scenarios.data.datasets.load_cifar`) runs on them as on the published data.

The layout is the published one: ``<folder>/cifar-10-batches-py/data_batch_1..5`` and
``test_batch``, each a protocol-2 pickle of a dict with ``data`` (uint8, one row of 3,072
values per image: the red, green then blue 32x32 planes), ``labels`` (a list of ints 0..9),
``batch_label`` and ``filenames``, and ``batches.meta``. The contents are generated, not real:
ten class prototypes of uniform random pixels; an image is half its class's prototype plus half
uniform noise (``p // 2 + u // 2``, so a model can learn the classes); labels uniform over the
ten classes. ``users * mean_samples`` training images (a multiple of five, split evenly over the
five batches) and ``test_samples`` test images (default: ``test_fraction`` of all images).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fedclock.scenarios.schema import GeneratedFiles
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["CIFAR10_CLASSES", "cifar_sizes", "write_cifar10"]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
FOLDER = "cifar-10-batches-py"


def cifar_sizes(cfg: GeneratedFiles) -> tuple[int, int]:
    """(training images, test images) of a generated CIFAR-10 set."""
    train = cfg.users * cfg.mean_samples
    test = cfg.test_samples if cfg.test_samples is not None \
        else max(1, round(train * cfg.test_fraction / (1 - cfg.test_fraction)))
    return train, test


def write_cifar10(folder: Path, cfg: GeneratedFiles, seed: int) -> None:
    """Write the six batch files and ``batches.meta`` under ``folder/cifar-10-batches-py``."""
    train, test = cifar_sizes(cfg)
    base = folder / FOLDER
    base.mkdir(parents=True, exist_ok=True)
    rng = numpy_rng(seed, Stream.DATA, DataStream.CIFAR_GENERATE)
    prototypes = rng.integers(0, 256, (len(CIFAR10_CLASSES), 3072), dtype=np.uint8) // 2
    files = [(f"data_batch_{i}", train // 5, f"training batch {i} of 5") for i in range(1, 6)]
    for name, n, label in [*files, ("test_batch", test, "testing batch 1 of 1")]:
        labels = rng.integers(0, len(CIFAR10_CLASSES), n)
        data = prototypes[labels] + rng.integers(0, 256, (n, 3072), dtype=np.uint8) // 2
        entry = {"batch_label": label, "labels": [int(v) for v in labels], "data": data,
                 "filenames": [f"generated_{name}_{i}.png" for i in range(n)]}
        (base / name).write_bytes(pickle.dumps(entry, protocol=2))
    meta = {"num_cases_per_batch": train // 5, "num_vis": 3072, "label_names": list(CIFAR10_CLASSES)}
    (base / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
