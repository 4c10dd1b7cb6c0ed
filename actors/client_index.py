"""Every client's sample indices into a federation's shared tensors: :class:`ClientIndex` (one
flat array and offsets) and :class:`ClientRanges` (offsets only, each client's samples lying
together)."""
from __future__ import annotations

from typing import Any, Iterator, Sequence, overload

import numpy as np

__all__ = ["ClientIndex", "ClientRanges"]


class ClientIndex(Sequence[np.ndarray]):
    """Every client's sample indices as one flat int64 array and offsets (compressed rows):
    client ``k``'s indices are ``flat[offsets[k]:offsets[k + 1]]``, handed out as a view when
    asked for. A list of one NumPy array per client costs about 100 bytes of array header
    per client and per split beside the indices (200 MB at a million clients, train and test);
    this costs 8 bytes per client, and pickles (to Ray's object store) as two arrays."""

    __slots__ = ("flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.flat = flat
        self.offsets = offsets

    @classmethod
    def of(cls, arrays: Sequence[np.ndarray]) -> "ClientIndex":
        """``arrays`` (one index array per client) as a :class:`ClientIndex`; one already is one."""
        if isinstance(arrays, ClientIndex):
            return arrays
        sizes = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        flat = np.concatenate([np.asarray(a, dtype=np.int64) for a in arrays]) if len(arrays) else \
            np.zeros(0, dtype=np.int64)
        return cls(flat.astype(np.int64, copy=False), offsets)

    def sizes(self) -> np.ndarray:
        """Indices per client, shape (clients,)."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, k: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, k: slice) -> list[np.ndarray]: ...

    def __getitem__(self, k: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"client {k} of {n}")
        return self._rows(int(k) % n)

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(len(self)):
            yield self._rows(k)

    def _rows(self, k: int) -> np.ndarray:
        """Client ``k``'s indices (``0 <= k < len(self)``)."""
        return self.flat[self.offsets[k]:self.offsets[k + 1]]

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray]:
        return self.flat, self.offsets

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray]) -> None:
        self.flat, self.offsets = state


class ClientRanges(ClientIndex):
    """Every client's samples as one contiguous run of positions: client ``k``'s indices are
    ``offsets[k]..offsets[k + 1] - 1`` (``offsets[0]`` need not be 0). Files that store each
    user's samples together (:mod:`fedclock.scenarios.data.user_arrays`) need no index array
    at all: 8 bytes a client instead of 8 bytes a sample (320 MB at 4 x 10^7 samples), and with
    ``source`` (the offsets mapped read-only from that ``.npy`` file) not even those in memory:
    they are read where used, and a pickled copy (Ray's object store, every executor) is the
    file's path. The
    arrays handed out are built when asked for; :attr:`flat` is built on first use only
    (nothing in a run reads it)."""

    __slots__ = ("source",)

    def __init__(self, offsets: np.ndarray, source: str | None = None) -> None:  # no flat array to hold
        self.offsets = offsets if source is not None else np.asarray(offsets, dtype=np.int64)
        self.source = source
        """The ``.npy`` file the offsets are mapped from (None: held in memory)."""

    @property
    def flat(self) -> np.ndarray:  # type: ignore[override]
        """Every client's positions, one after another (built when read)."""
        return np.arange(self.offsets[0], self.offsets[-1], dtype=np.int64)

    def _rows(self, k: int) -> np.ndarray:
        return np.arange(self.offsets[k], self.offsets[k + 1], dtype=np.int64)

    def __getstate__(self) -> tuple[Any, ...]:
        return ("file", self.source) if self.source is not None else ("offsets", self.offsets)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        kind, value = state
        self.source = value if kind == "file" else None
        self.offsets = np.load(value, mmap_mode="r") if kind == "file" else value
