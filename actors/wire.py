"""Tensors on the wire between Ray processes: one copy each way.

Ray pickles a ``torch.Tensor`` through torch's own reducer, which writes the storage with
``torch.save`` into a byte string (two or three copies of the data before it reaches the
object store) and reads it back with ``torch.load``. A NumPy array instead goes to the
object store as an out-of-band buffer (one copy) and comes back as a read-only view of it.
:func:`to_wire` wraps every plain CPU tensor of an upload, payload or state in a
:class:`WireTensor`, whose unpickling returns an ordinary, writable, owned ``torch.Tensor``
(one copy out of the object store): the receiver never sees the wrapper, and the values,
dtype, shape and strides are exactly the sender's. Only the Ray actor classes use it; the
inline backend passes objects as they are.

A group's uploads travel in one list (:func:`fedclock.actors.task_io.grouped`), of which a
receiver may use only some (an asynchronous server applies the arrivals of a group at
different times): there :func:`to_held` wraps each tensor in a :class:`HeldTensor`, which
unpickles to a read-only view of the object store (no copy), and the receiver copies out only
the tensors it uses (:func:`from_held`; the same owned, writable tensor as a
:class:`WireTensor` gives).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import torch

_NUMPY_DTYPES = frozenset({torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
                           torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128})


def _tensor(array: np.ndarray) -> torch.Tensor:
    """The unpickled side: an owned, writable tensor with the array's values and layout."""
    return torch.from_numpy(np.array(array, copy=True, order="K"))


class WireTensor:
    """A tensor travelling as a NumPy array; unpickles to a ``torch.Tensor``."""

    __slots__ = ("array",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.array = tensor.numpy()

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        return _tensor, (self.array,)


def _travels(value: torch.Tensor) -> bool:
    return (type(value) is torch.Tensor and value.device.type == "cpu" and value.layout == torch.strided
            and not value.requires_grad and value.dtype in _NUMPY_DTYPES and not value.is_conj()
            and not value.is_neg())


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with ``fn`` applied to every tensor in it: in dicts, lists, tuples (not named
    tuples), and the ``tensors`` of a dataclass such as ``ServerState``; anything else as is."""
    return _map_leaves(value, torch.Tensor, fn)


def _map_leaves(value: Any, leaf: type, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to every instance of ``leaf`` in it (where :func:`map_tensors` looks)."""
    if isinstance(value, leaf):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_leaves(v, leaf, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_map_leaves(v, leaf, fn) for v in value)
    tensors = getattr(value, "tensors", None)
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and isinstance(tensors, dict):
        return dataclasses.replace(value, tensors=_map_leaves(tensors, leaf, fn))
    return value


def _wrapped(value: torch.Tensor) -> Any:
    return WireTensor(value) if _travels(value) else value


def to_wire(value: Any) -> Any:
    """``value`` with every plain CPU tensor in it (see :func:`map_tensors`) wrapped as a
    :class:`WireTensor`; anything else (GPU tensors, parameters, tensors needing grad) is left
    to Ray's pickling."""
    return map_tensors(value, _wrapped)


class HeldTensor:
    """A tensor travelling as a NumPy array that unpickles to itself, holding a view of the
    received buffer (read-only in Ray's object store); :meth:`tensor` copies it out."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        return HeldTensor, (self.array,)

    def tensor(self) -> torch.Tensor:
        """An owned, writable tensor with the array's values and layout (as :class:`WireTensor` unpickles)."""
        return _tensor(self.array)


def _held(value: torch.Tensor) -> Any:
    return HeldTensor(value.numpy()) if _travels(value) else value


def to_held(value: Any) -> Any:
    """``value`` with every plain CPU tensor in it (as :func:`to_wire` takes them) wrapped as a
    :class:`HeldTensor`; :func:`from_held` on the receiving side gives the tensors back."""
    return map_tensors(value, _held)


def from_held(value: Any) -> Any:
    """``value`` (as :func:`to_held` sent it) with every :class:`HeldTensor` copied out into an
    owned tensor; anything else as it is."""
    return _map_leaves(value, HeldTensor, HeldTensor.tensor)
