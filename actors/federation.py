"""The federation as the runtime serves it: per-client train/test index arrays over one shared
training pool, and the global test set (built by :func:`fedclock.scenarios.data.federation.build_federation`)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from fedclock.actors.client_index import ClientIndex, ClientRanges
from fedclock.algorithms.base import ClientData

__all__ = ["ClientIndex", "ClientRanges", "Federation", "MappedRows"]


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
