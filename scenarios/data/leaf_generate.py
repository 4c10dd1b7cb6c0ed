"""Small data sets written in LEAF's JSON layout from a seed (``dataset.generate``).

What the quick library files and the tests run on when the real files are not at hand: the
files are exactly LEAF's layout (:mod:`fedclock.scenarios.data.leaf`), one ``train`` and one
``test`` file split by sample as LEAF's ``-t sample`` does, so the reader runs as it does on
the published data. The contents are generated, not real:

* every user's size is ``max(4, round(mean * lognormal(0, 0.8)))`` samples (natural size
  heterogeneity, as the real writers' and roles' sizes), ``test_fraction`` of them (at least
  one) in the test file;
* ``femnist``: 62 class prototypes, each a sum of three random strokes (Gaussian blobs along
  a segment) on a 28x28 canvas; a writer uses 12 classes drawn at random with Dirichlet(1)
  proportions, and draws each sample as its class prototype shifted by the writer's own
  offset (up to 2 pixels) plus pixel noise, clipped to 0..1 and written with 2 decimals;
* ``shakespeare``: a vocabulary of 300 made-up words of LEAF's letters; a speaking role
  prefers 40 of them; its text is a sequence of lines of 4-9 words (Zipf-like choice within
  its preferred words), and every 80-character window of the text with the next character
  is a sample;
* ``synthetic_leaf``: 60-dimensional vectors ``x ~ N(v_u, 1)`` around the user's centre
  ``v_u ~ N(0, 1)`` with 10 classes ``y = argmax(W_u x)``, ``W_u ~ N(W, 0.5)`` around a
  shared model ``W`` (LEAF's Synthetic data set is of this kind; its parameters differ).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from fedclock.scenarios.data.leaf_tasks import FEMNIST_CLASSES, LEAF_LETTERS, WINDOW
from fedclock.scenarios.schema import GeneratedFiles
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["Samples", "femnist_samples", "shakespeare_samples", "synthetic_samples", "write_leaf"]

Samples = Callable[[np.random.Generator, np.ndarray], list[tuple[list, list]]]
"""Every user's ``x`` and ``y`` lists, given the generator and the users' sizes."""


def write_leaf(folder: Path, make: Samples, cfg: GeneratedFiles, seed: int) -> None:
    """Write ``folder/train/all_data_train.json`` and ``folder/test/all_data_test.json`` of the
    users ``make`` draws (each dataset's reader passes its own, ``LeafReader.write``)."""
    rng = numpy_rng(seed, Stream.DATA, DataStream.GENERATE)
    sizes = np.maximum(4, np.round(cfg.mean_samples * rng.lognormal(0.0, 0.8, cfg.users))).astype(int)
    parts: dict[str, dict] = {p: {"users": [], "num_samples": [], "user_data": {}} for p in ("train", "test")}
    for u, (x, y) in enumerate(make(rng, sizes)):
        user = f"u{u:05d}"
        n_test = max(1, int(round(cfg.test_fraction * len(y))))
        order = rng.permutation(len(y))
        for part, idx in (("train", order[n_test:]), ("test", order[:n_test])):
            parts[part]["users"].append(user)
            parts[part]["num_samples"].append(len(idx))
            parts[part]["user_data"][user] = {"x": [x[i] for i in idx], "y": [y[i] for i in idx]}
    for part, data in parts.items():
        (folder / part).mkdir(parents=True, exist_ok=True)
        with open(folder / part / f"all_data_{part}.json", "w", encoding="utf-8") as f:
            json.dump(data, f)


def femnist_samples(rng: np.random.Generator, sizes: np.ndarray) -> list[tuple[list, list]]:
    """FEMNIST writers: strokes around 62 class prototypes (module docstring)."""
    grid = np.stack(np.meshgrid(np.arange(28), np.arange(28), indexing="ij"), -1).astype(np.float64)
    protos = np.zeros((FEMNIST_CLASSES, 28, 28))
    for c in range(FEMNIST_CLASSES):
        for _ in range(3):
            a, b = rng.uniform(6, 22, 2), rng.uniform(6, 22, 2)
            for t in np.linspace(0, 1, 12):
                p = a + t * (b - a)
                protos[c] += np.exp(-((grid - p) ** 2).sum(-1) / 3.0)
    protos = np.clip(protos, 0, 1)
    users = []
    for n in sizes:
        classes = rng.choice(FEMNIST_CLASSES, 12, replace=False)
        labels = rng.choice(classes, int(n), p=rng.dirichlet(np.ones(12)))
        dx, dy = rng.integers(-2, 3, 2)
        images = np.roll(protos[labels], (int(dx), int(dy)), axis=(1, 2))
        images = np.clip(images + rng.normal(0, 0.15, images.shape), 0, 1).round(2)
        users.append(([img.reshape(-1).tolist() for img in images], [int(v) for v in labels]))
    return users


def shakespeare_samples(rng: np.random.Generator, sizes: np.ndarray) -> list[tuple[list, list]]:
    """Shakespeare roles: 80-character windows of made-up lines (module docstring)."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, int(rng.integers(2, 8)))) for _ in range(300)]
    users = []
    for n in sizes:
        words = rng.choice(len(vocab), 40, replace=False)
        weights = 1.0 / np.arange(1, 41)
        text = ""
        while len(text) < int(n) + WINDOW:
            line = [vocab[int(w)] for w in rng.choice(words, int(rng.integers(4, 10)), p=weights / weights.sum())]
            text += " ".join(line).capitalize() + rng.choice([".", ",", "!", "?", ";"]) + "\n"
        assert set(text) <= set(LEAF_LETTERS)
        xs = [text[i:i + WINDOW] for i in range(int(n))]
        ys = [text[i + WINDOW] for i in range(int(n))]
        users.append((xs, ys))
    return users


def synthetic_samples(rng: np.random.Generator, sizes: np.ndarray) -> list[tuple[list, list]]:
    """Synthetic users: vectors around a user's centre, labels of a user's model (module docstring)."""
    shared = rng.normal(0, 1, (10, 60))
    users = []
    for n in sizes:
        w = shared + rng.normal(0, 0.5, shared.shape)
        x = rng.normal(rng.normal(0, 1, 60), 1, (int(n), 60)).round(4)
        y = np.argmax(x @ w.T, axis=1)
        users.append((x.tolist(), [int(v) for v in y]))
    return users
