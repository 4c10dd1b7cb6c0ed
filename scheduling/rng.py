"""Seeded random streams.

Every random draw in a run comes from a generator seeded by (scenario seed, stream, keys…),
e.g. (seed, TASK, client, task index). Nothing depends on global RNG state, the number of
actors or the order in which Ray happens to run things.
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np
import torch


class Stream(IntEnum):
    """Independent random streams of a run."""

    TASK = 1
    DEVICES = 2
    AVAILABILITY = 3
    COHORT = 4
    SERVER = 5
    INIT = 6
    DATA = 7
    TIMELINE = 8
    COMPLETENESS = 10
    CONNECTIVITY = 11
    SELECTION = 12


def _entropy(seed: int, stream: Stream, keys: tuple[int, ...]) -> list[int]:
    """SeedSequence entropy for (seed, stream, keys), one-to-one: the number of keys first,
    then every value as two 32-bit words. (SeedSequence pads short entropy with zeros and
    splits big integers into as many words as they need, so passing the values as they are
    would make e.g. (s, stream) and (s, stream, 0), or seeds 2**32 + a and a, collide.)"""
    words = []
    for value in (len(keys), int(seed), int(stream), *(int(k) for k in keys)):
        if not 0 <= value < 1 << 64:
            raise ValueError(f"seeds and keys must be in [0, 2**64) (got {value})")
        words += [value & 0xFFFFFFFF, value >> 32]
    return words


def seed_for(seed: int, stream: Stream, *keys: int) -> int:
    """A 63-bit seed derived from the scenario seed, a stream and integer keys."""
    state = np.random.SeedSequence(_entropy(seed, stream, keys)).generate_state(2, np.uint64)
    return int((int(state[0]) << 1 ^ int(state[1])) & ((1 << 63) - 1))


def numpy_rng(seed: int, stream: Stream, *keys: int) -> np.random.Generator:
    """A NumPy generator for (seed, stream, keys)."""
    return np.random.default_rng(np.random.SeedSequence(_entropy(seed, stream, keys)))


def torch_rng(seed: int, stream: Stream, *keys: int) -> torch.Generator:
    """A CPU torch generator for (seed, stream, keys)."""
    gen = torch.Generator()
    gen.manual_seed(seed_for(seed, stream, *keys))
    return gen
