"""Each client's own test split, held out of its training samples (``dataset.client_test_fraction``)."""
from __future__ import annotations

import numpy as np


def client_test_split(idx: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A client's (train, test) sample indices: a seeded shuffle of ``idx`` with ``fraction`` of it
    held out for test; with two or more samples and ``fraction > 0`` both sides get at least
    one; ``fraction == 0`` keeps everything for training."""
    n = len(idx)
    n_test = 0 if n < 2 or fraction == 0 else min(n - 1, max(1, int(np.floor(fraction * n + 0.5))))
    shuffled = rng.permutation(idx)
    return np.sort(shuffled[n_test:]), np.sort(shuffled[:n_test])


def client_test_sizes(sizes: np.ndarray, fraction: float) -> np.ndarray:
    """How many samples :func:`client_test_split` holds out of clients of ``sizes`` samples
    each (its rule, for every client at once: the same float operations, so the same counts);
    lets a federation's flat index arrays be allocated at their final size."""
    n = np.asarray(sizes, dtype=np.int64)
    if fraction == 0:
        return np.zeros(n.shape, dtype=np.int64)
    held = np.minimum(n - 1, np.maximum(1, np.floor(fraction * n + 0.5).astype(np.int64)))
    return np.where(n < 2, 0, held)
