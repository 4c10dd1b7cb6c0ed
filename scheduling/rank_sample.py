"""Distinct uniform ranks that skip given ones, drawn without listing the ranks.

A selector that draws ``n`` of ``count`` candidates uniformly without replacement, leaving
out some of them (say the explored ones), need not list the others: with the left-out
candidates' ranks it draws ranks directly. :func:`distinct_ranks` defines the draw:

* ``A = count - len(excluded)`` ranks are open; one generator call draws
  ``j = rng.integers(0, A - arange(n))``, so ``j_i`` is uniform in ``[0, A - i)``;
* the ``i``-th rank drawn is the ``j_i``-th (0-based, ascending) of the ranks in
  ``[0, count)`` that are neither excluded nor among the ``i`` drawn before it.

Each rank is thus drawn uniformly among those still open, so the ``n`` ranks are a uniform
draw without replacement from the open ones, in draw order, whatever ``count`` is. The
``j``-th integer outside a sorted set ``b_0 < b_1 < ...`` is ``j`` plus the number of ``t``
with ``b_t - t <= j`` (``b_t - t`` integers outside the set precede ``b_t``: :func:`open_rank`);
the excluded ranks and the ones drawn are kept apart (the drawn ones as positions among the
ranks not excluded), so a draw costs one sort of the ``e`` excluded ranks and ``O(n (log n +
log e))`` after it.
"""
from __future__ import annotations

from bisect import insort
from typing import Sequence

import numpy as np


def open_rank(closed: Sequence[int], j: int, lo: int = 0) -> int:
    """The ``j``-th (0-based) non-negative integer not in ``closed`` (sorted, distinct): ``j``
    plus how many ``closed[i]`` have ``closed[i] - i <= j``, found by binary search from ``lo``
    (a count of them the caller already knows, else 0)."""
    hi = len(closed)
    while lo < hi:
        mid = (lo + hi) // 2
        if closed[mid] - mid <= j:
            lo = mid + 1
        else:
            hi = mid
    return j + lo


def distinct_ranks(rng: np.random.Generator, count: int, excluded: np.ndarray, n: int) -> np.ndarray:
    """``n`` distinct ranks of ``[0, count)`` outside ``excluded`` (distinct ranks in that range),
    drawn uniformly without replacement as the module defines it, in draw order; needs ``n
    <= count - len(excluded)``."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    base = np.array(excluded, dtype=np.int64)
    if base.shape[0] > 1 and not (base[1:] > base[:-1]).all():  # (a check is cheaper than sorting sorted ranks)
        base.sort()
    open_n = count - base.shape[0]
    if n > open_n:
        raise ValueError(f"{n} ranks asked of {open_n} open ones")
    picks = rng.integers(0, open_n - np.arange(n))
    drawn: list[int] = []  # positions among the ranks not excluded, sorted
    at = np.empty(n, dtype=np.int64)
    for i, j in enumerate(picks.tolist()):
        position = open_rank(drawn, j)
        insort(drawn, position)
        at[i] = position
    base -= np.arange(base.shape[0])  # b_t - t, non-decreasing
    return at + np.searchsorted(base, at, side="right")
