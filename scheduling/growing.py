"""An append-only NumPy array: O(1) amortized appends (the buffer doubles when full) and a
read-only view of what was appended, so a reader can keep a position and read only the
entries added since (:class:`~fedclock.scheduling.selection.ClientHistory`'s logs)."""
from __future__ import annotations

import numpy as np


class Growing:
    """Values appended one at a time, read as an array (module docstring)."""

    def __init__(self, dtype: type = np.int64, capacity: int = 1024) -> None:
        self._data: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, value: float) -> None:
        """Add ``value`` at the end (the buffer doubles when full)."""
        if self._n == self._data.shape[0]:
            bigger = np.empty(2 * self._data.shape[0], dtype=self._data.dtype)
            bigger[:self._n] = self._data
            self._data = bigger
        self._data[self._n] = value
        self._n += 1

    def extend(self, values: np.ndarray) -> None:
        """Add ``values`` at the end, in order."""
        need = self._n + values.shape[0]
        if need > self._data.shape[0]:
            bigger = np.empty(max(need, 2 * self._data.shape[0]), dtype=self._data.dtype)
            bigger[:self._n] = self._data[:self._n]
            self._data = bigger
        self._data[self._n:need] = values
        self._n = need

    def view(self) -> np.ndarray:
        """The values appended so far, in order, as a read-only array (it does not see later
        appends: take a new view after them)."""
        out = self._data[:self._n]
        out.flags.writeable = False
        return out
