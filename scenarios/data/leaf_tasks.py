"""What LEAF's FEMNIST and Shakespeare tasks are, shared by every reader and writer of them
(LEAF's JSON, :mod:`fedclock.scenarios.data.leaf`; TFF's HDF5, :mod:`fedclock.scenarios.data.tff_h5`;
FedScale's CSVs, :mod:`fedclock.scenarios.data.fedscale_csv`; the generated files,
:mod:`fedclock.scenarios.data.leaf_generate`)."""
from __future__ import annotations

import numpy as np

__all__ = ["FEMNIST_CLASSES", "LEAF_LETTERS", "WINDOW", "letter_indices"]

LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's Shakespeare vocabulary, in its order (80 characters)."""
FEMNIST_CLASSES = 62
"""Digits, upper- and lower-case letters."""
WINDOW = 80
"""Characters of a Shakespeare input."""

_TABLE = np.full(0x10000, -1, dtype=np.int64)
_TABLE[[ord(c) for c in LEAF_LETTERS]] = np.arange(len(LEAF_LETTERS))


def letter_indices(text: str) -> np.ndarray:
    """Indices of ``text``'s characters in :data:`LEAF_LETTERS` (-1 for any other)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    out = np.full(len(codes), -1, dtype=np.int64)
    small = codes < len(_TABLE)
    out[small] = _TABLE[codes[small]]
    return out
