"""Each client's own test split, held out of its training samples (``dataset.client_test_fraction``)."""
from __future__ import annotations

import numpy as np


def client_test_split(idx: np.ndarray, fraction: float, rng: np.random.Generator,
                      n_test: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A client's (train, test) sample indices: a seeded shuffle of ``idx`` with ``fraction`` of it
    held out for test; with two or more samples and ``fraction > 0`` both sides get at least
    one; ``fraction == 0`` keeps everything for training. ``n_test``: the count
    :func:`client_test_sizes` gives for ``len(idx)``, when the caller has it for every client."""
    if n_test is None:
        n_test = int(client_test_sizes(np.array([len(idx)]), fraction)[0])
    shuffled = rng.permutation(idx)
    return np.sort(shuffled[n_test:]), np.sort(shuffled[:n_test])


def client_test_sizes(sizes: np.ndarray, fraction: float) -> np.ndarray:
    """How many samples :func:`client_test_split` holds out of clients of ``sizes`` samples
    each: ``round(fraction x n)`` (halves up), at least 1 and at most ``n - 1``; none of a
    client with fewer than two samples or at ``fraction == 0``. For every client at once, so a
    federation's flat index arrays are allocated at their final size."""
    n = np.asarray(sizes, dtype=np.int64)
    if fraction == 0:
        return np.zeros(n.shape, dtype=np.int64)
    held = np.minimum(n - 1, np.maximum(1, np.floor(fraction * n + 0.5).astype(np.int64)))
    return np.where(n < 2, 0, held)
