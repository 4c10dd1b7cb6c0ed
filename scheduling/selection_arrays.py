"""Partial orderings over per-client arrays, for selectors that must stay fast at a million
clients: the ``m`` smallest (or largest) entries by a key with ties broken by client id,
in that order, without sorting the whole array (:func:`numpy.partition` finds the cut in
linear time, then only the entries at or beyond it are sorted), and the value of one rank.

NumPy has no partial *ordered* top-m with a secondary key, so these few lines are written
here; every result equals the first ``m`` of the full ``np.lexsort((ids, keys))``.
"""
from __future__ import annotations

import numpy as np


def smallest(keys: np.ndarray, ids: np.ndarray, m: int) -> np.ndarray:
    """Positions of the ``m`` smallest entries of ``keys`` by (key ascending, id ascending),
    in that order (NaN keys last, as in a sort)."""
    n = keys.shape[0]
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    if m >= n:
        return np.lexsort((ids, keys))
    cut = np.partition(keys, m - 1)[m - 1]  # the m-th smallest key (NaN sorts last)
    if np.isnan(cut):
        return np.lexsort((ids, keys))[:m]
    inside = np.flatnonzero(keys <= cut)  # every entry at least as small (ties included)
    return inside[np.lexsort((ids[inside], keys[inside]))][:m]


def largest(keys: np.ndarray, ids: np.ndarray, m: int) -> np.ndarray:
    """Positions of the ``m`` largest entries of ``keys`` (no NaN) by (key descending, id
    ascending), in that order."""
    n = keys.shape[0]
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    if m >= n:
        return np.lexsort((ids, -keys))
    if n >= 64 * m:  # the m-th largest of every 8th key is a lower bound of the m-th largest of all
        sample = keys[::8]
        cut = np.partition(sample, sample.shape[0] - m)[sample.shape[0] - m]
    else:
        cut = np.partition(keys, n - m)[n - m]  # the m-th largest key
    inside = np.flatnonzero(keys >= cut)  # every entry at least as large as the m-th largest (ties included)
    return inside[np.lexsort((ids[inside], -keys[inside]))][:m]


def rank_value(values: np.ndarray, rank: int) -> float:
    """The value of ``rank`` (0-based) in ascending order, in linear time (NaN sorts last)."""
    return float(np.partition(values, rank)[rank])


def first_cdf(p: np.ndarray) -> np.ndarray:
    """The cumulative distribution :func:`weighted_draw` starts from for probabilities ``p``
    (computed as NumPy's ``Generator.choice`` computes it); a caller whose ``p`` does not
    change between draws may keep it."""
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return cdf


def weighted_draw(rng: np.random.Generator, p: np.ndarray, size: int, cdf: np.ndarray | None = None) -> np.ndarray:
    """``size`` distinct positions drawn without replacement with probabilities ``p`` (a
    float64 array summing to 1 with at least ``size`` positive entries): the same positions,
    from the same random numbers, as ``rng.choice(len(p), size, replace=False, p=p)``.

    NumPy's ``Generator.choice`` draws ``size`` uniforms, maps them through the cumulative
    distribution, keeps the distinct positions in the order first drawn, and repeats for the
    missing ones with the kept positions' probabilities set to 0. This is that procedure
    without the argument checks and copies that make ``choice`` several passes over ``p``
    per call (``p`` is the selector's own, valid by construction), and with ``cdf`` (from
    :func:`first_cdf`) reused when the caller already has it. Its equality with
    ``rng.choice`` is tested (``tests/scheduling/test_selection_arrays.py``)."""
    found = np.zeros(size, dtype=np.int64)
    n_uniq = 0
    zeroed: np.ndarray | None = None
    while n_uniq < size:
        x = rng.random((size - n_uniq,))
        if n_uniq > 0:
            if zeroed is None:
                zeroed = p.copy()
            zeroed[found[:n_uniq]] = 0
            cdf = first_cdf(zeroed)
        elif cdf is None:
            cdf = first_cdf(p)
        new = cdf.searchsorted(x, side="right")
        _, unique_indices = np.unique(new, return_index=True)
        unique_indices.sort()
        new = new.take(unique_indices)
        found[n_uniq:n_uniq + new.size] = new
        n_uniq += new.size
    return found
