"""The federation as the runtime serves it: per-client train/test index arrays over one shared
training pool, and the global test set (built by :func:`fedclock.scenarios.data.federation.build_federation`)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence, overload

import numpy as np
import torch

from fedclock.algorithms.base import ClientData

__all__ = ["ClientIndex", "ClientRanges", "Federation", "MappedRows"]


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
        k = int(k) % n
        return self.flat[self.offsets[k]:self.offsets[k + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(len(self)):
            yield self.flat[self.offsets[k]:self.offsets[k + 1]]

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray]:
        return self.flat, self.offsets

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray]) -> None:
        self.flat, self.offsets = state


class ClientRanges(ClientIndex):
    """Every client's samples as one contiguous run of positions: client ``k``'s indices are
    ``offsets[k]..offsets[k + 1] - 1`` (``offsets[0]`` need not be 0). Files that store each
    user's samples together (:mod:`fedclock.scenarios.data.user_arrays`) need no index array
    at all: 8 bytes a client instead of 8 bytes a sample (320 MB at 4 x 10^7 samples), and with
    :meth:`mapped` not even those in memory: the offsets are read from their ``.npy`` file where
    used, and a pickled copy (Ray's object store, every executor) is the file's path. The
    arrays handed out are built when asked for; :attr:`flat` is built on first use only
    (nothing in a run reads it)."""

    __slots__ = ("source",)

    def __init__(self, offsets: np.ndarray, source: str | None = None) -> None:  # no flat array to hold
        self.offsets = offsets if source is not None else np.asarray(offsets, dtype=np.int64)
        self.source = source
        """The ``.npy`` file the offsets are mapped from (None: held in memory)."""

    @classmethod
    def mapped(cls, path: str) -> "ClientRanges":
        """The offsets of the ``.npy`` file ``path`` (int64), mapped read-only."""
        return cls(np.load(path, mmap_mode="r"), source=path)

    @property
    def flat(self) -> np.ndarray:  # type: ignore[override]
        """Every client's positions, one after another (built when read)."""
        return np.arange(self.offsets[0], self.offsets[-1], dtype=np.int64)

    def __getitem__(self, k: int | slice) -> np.ndarray | list[np.ndarray]:  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]  # type: ignore[misc]
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"client {k} of {n}")
        k = int(k) % n
        return np.arange(self.offsets[k], self.offsets[k + 1], dtype=np.int64)

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(len(self)):
            yield np.arange(self.offsets[k], self.offsets[k + 1], dtype=np.int64)

    def __getstate__(self) -> tuple[Any, ...]:
        return ("file", self.source) if self.source is not None else ("offsets", self.offsets)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        kind, value = state
        self.source = value if kind == "file" else None
        self.offsets = np.load(value, mmap_mode="r") if kind == "file" else value


@dataclass(frozen=True)
class MappedRows:
    """Rows ``start..stop - 1`` of a ``.npy`` file, mapped read-only into memory
    (:func:`numpy.load` with ``mmap_mode="r"``): the operating system reads a page of the
    file when a row on it is first touched, and every process mapping the file shares the
    pages. A federation whose samples are mapped pickles them as this (a path and two
    numbers), so no copy of the data goes through Ray's object store: every process maps
    the file itself (on a cluster the file must be at the same path on every node)."""

    path: str
    start: int
    stop: int

    def tensor(self) -> torch.Tensor:
        """The rows as a read-only tensor over the mapping (no copy)."""
        rows = np.load(self.path, mmap_mode="r")[self.start:self.stop]
        with warnings.catch_warnings():  # read-only mapping: read, never written
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(rows)


_SAMPLE_TENSORS = ("x", "y", "x_test", "y_test")
_NUMPY_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16,
                           torch.int8, torch.uint8, torch.bool})


@dataclass(frozen=True)
class _AsNumpy:
    """A pickled federation's sample tensor, as the NumPy array over its memory."""

    array: np.ndarray


@dataclass(eq=False)
class Federation:
    """Per-client train/test index arrays over shared tensors."""

    x: torch.Tensor
    y: torch.Tensor
    client_train: Sequence[np.ndarray]
    """Every client's training-sample indices (kept as a :class:`ClientIndex`)."""
    client_test: Sequence[np.ndarray]
    """Every client's own test-sample indices (kept as a :class:`ClientIndex`)."""
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    dataset_name: str
    domain_names: tuple[str, ...] = ()
    """Multi-domain sources only (:mod:`fedclock.scenarios.data.domains`): the domains, the
    domain of every client, of every training-pool sample and of every global test sample."""
    client_domain: np.ndarray | None = None
    train_domain: np.ndarray | None = None
    test_domain: np.ndarray | None = None
    mapped: dict[str, MappedRows] = field(default_factory=dict)
    """The sample tensors (``x``, ``y``, ``x_test``, ``y_test``) that are mapped from files,
    by name, with where from (:class:`MappedRows`): pickled as that, not as their bytes."""

    def __post_init__(self) -> None:
        self.client_train = ClientIndex.of(self.client_train)
        self.client_test = ClientIndex.of(self.client_test)

    def read_from(self, stored: "Federation") -> None:
        """Read the samples and index arrays from ``stored``, the object store's copy of this
        federation (mapped without copying, :meth:`__getstate__`): the driver keeps no second copy
        beside the store's once its own arrays are let go (at ten million clients 1.1 GiB of
        samples and 0.4 GiB of indices: ``benchmarks/RESULTS.md``, "Ten million clients"). The
        values are the same; the arrays are read-only, and nothing writes them."""
        for name in ("x", "y", "x_test", "y_test", "client_train", "client_test"):
            setattr(self, name, getattr(stored, name))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its sample tensors as NumPy arrays (those NumPy can hold: CPU, contiguous).
        Ray's object store hands a NumPy array to every process that gets the federation without
        copying it (pickle protocol 5's out-of-band buffers, mapped read-only from shared memory),
        a tensor as a copy in each: on the Ray backend every executor held its own copy of the
        data (``benchmarks/RESULTS.md``, "Idle clients, third pass"). Nothing writes a federation's
        tensors: a client's data are copies (:meth:`client_data`), the global test set is read."""
        state = dict(self.__dict__)
        for name in _SAMPLE_TENSORS:
            if name in self.mapped:
                state[name] = self.mapped[name]
                continue
            tensor = state[name]
            if tensor.device.type == "cpu" and tensor.is_contiguous() and not tensor.requires_grad \
                    and tensor.dtype in _NUMPY_DTYPES:
                state[name] = _AsNumpy(tensor.numpy())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _SAMPLE_TENSORS:
            if isinstance(state[name], MappedRows):
                state[name] = state[name].tensor()
            elif isinstance(state[name], _AsNumpy):
                with warnings.catch_warnings():  # a read-only array from the object store: read, never written
                    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                    state[name] = torch.from_numpy(state[name].array)
        self.__dict__.update(state)

    @property
    def num_clients(self) -> int:
        """Number of clients."""
        return len(self.client_train)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input sample."""
        return tuple(self.x.shape[1:])

    def client_sizes(self) -> np.ndarray:
        """Training samples per client, shape (num_clients,)."""
        return ClientIndex.of(self.client_train).sizes()

    def client_data(self, client: int, device: torch.device | str = "cpu") -> ClientData:
        """Client ``client``'s train and test tensors, copied onto ``device``."""
        train = torch.from_numpy(np.array(self.client_train[client], dtype=np.int64))  # a writable copy
        test = torch.from_numpy(np.array(self.client_test[client], dtype=np.int64))
        return ClientData(client=client,
                          x_train=self.x[train].to(device), y_train=self.y[train].to(device),
                          x_test=self.x[test].to(device), y_test=self.y[test].to(device))

    def label_histogram(self) -> np.ndarray:
        """Training label counts, shape (num_clients, num_classes); with a target per token
        the counts of the target tokens, padding left out."""
        labels = self.y.numpy()
        hist = np.zeros((self.num_clients, self.num_classes), dtype=np.int64)
        for k, idx in enumerate(self.client_train):
            targets = labels[idx].reshape(-1)
            hist[k] = np.bincount(targets[targets >= 0], minlength=self.num_classes)
        return hist
