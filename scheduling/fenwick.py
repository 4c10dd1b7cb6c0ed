"""Fenwick (binary indexed) trees of 0/1 marks over client ids: flip a mark, count the marks
before a position and find the position of the k-th mark, each in O(log n) (the idle,
available clients' indexes, :mod:`fedclock.scheduling.available_index` and
:mod:`fedclock.scheduling.diurnal_index`)."""
from __future__ import annotations

from array import array
from typing import MutableSequence, Sequence

import numpy as np

__all__ = ["Fenwick", "select_in_union"]


class Fenwick:
    """0/1 marks over positions 0..n-1: flip, count before a position, and find the
    position of the k-th mark, each in O(log n)."""

    def __init__(self, marks: Sequence[int]) -> None:
        n = len(marks)
        tree = [0] * (n + 1)
        for i, m in enumerate(marks, start=1):  # O(n) construction: push each partial sum to its parent
            tree[i] += m
            parent = i + (i & -i)
            if parent <= n:
                tree[parent] += tree[i]
        self.n = n
        self.tree: MutableSequence[int] = tree
        self.total = sum(marks)
        self.top = 1 << (n.bit_length() - 1) if n else 0
        """Largest power of two <= n: where the k-th search starts."""

    @classmethod
    def from_array(cls, marks: np.ndarray) -> "Fenwick":
        """The tree of 0/1 ``marks`` built with NumPy (node i holds the marks in
        (i - lowbit(i), i], a difference of two prefix sums) and kept in a flat
        ``array('q')``: 8 bytes a position instead of a Python int each."""
        n = len(marks)
        prefix = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(marks, out=prefix[1:])
        index = np.arange(n + 1, dtype=np.int64)
        index -= index & -index
        nodes = prefix - prefix[index]
        del index
        out = cls.__new__(cls)
        out.n = n
        out.tree = array("q", nodes.tobytes())
        out.total = int(prefix[-1])
        out.top = 1 << (n.bit_length() - 1) if n else 0
        return out

    def add(self, position: int, delta: int) -> None:
        """Add ``delta`` (+1 or -1) at ``position``."""
        tree, n = self.tree, self.n
        i = position + 1
        while i <= n:
            tree[i] += delta
            i += i & -i
        self.total += delta

    def count_before(self, position: int) -> int:
        """Marks at positions < ``position``."""
        tree, s, i = self.tree, 0, position
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s

    def count_before_many(self, positions: np.ndarray) -> np.ndarray:
        """:meth:`count_before` of each position, vectorized over them when the tree is a flat
        ``array('q')`` (:meth:`from_array`: one gather per level, ~log2 n of them; node 0
        holds 0, so a finished position adds nothing), else one call each."""
        positions = np.asarray(positions, dtype=np.int64)
        if not isinstance(self.tree, array):
            return np.fromiter((self.count_before(int(p)) for p in positions), dtype=np.int64,
                               count=positions.shape[0])
        tree = np.frombuffer(self.tree, dtype=np.int64)
        i = positions.copy()
        s = np.zeros(positions.shape[0], dtype=np.int64)
        for _ in range(self.n.bit_length()):
            s += tree.take(i)
            i &= i - 1  # i - lowbit(i); 0 stays 0
        return s

    def select(self, k: int) -> int:
        """The position of the mark of rank ``k`` (0-based; needs k < total)."""
        tree, n, pos, step = self.tree, self.n, 0, self.top
        while step:
            nxt = pos + step
            if nxt <= n and tree[nxt] <= k:
                pos = nxt
                k -= tree[nxt]
            step >>= 1
        return pos


def select_in_union(trees: Sequence[Fenwick], k: int) -> int:
    """The position of rank ``k`` among the marks of all ``trees`` (same size, disjoint
    marks) together: one descent over the summed trees."""
    if len(trees) == 1:
        return trees[0].select(k)
    arrays = [t.tree for t in trees]
    n, pos, step = trees[0].n, 0, trees[0].top
    while step:
        nxt = pos + step
        if nxt <= n:
            s = 0
            for a in arrays:
                s += a[nxt]
            if s <= k:
                pos = nxt
                k -= s
        step >>= 1
    return pos
