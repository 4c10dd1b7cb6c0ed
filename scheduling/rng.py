"""Seeded random streams.

Every random draw in a run comes from a generator seeded by (scenario seed, stream, keys…),
e.g. (seed, TASK, client, task index). Nothing depends on global RNG state, the number of
actors or the order in which Ray happens to run things. This module is the only home of
seeding: every layer that may import it draws through :func:`numpy_rng` or :func:`torch_rng`
(``algorithms/`` may not import it and gets its generators from the caller).

Loading and splitting data draws from ``Stream.DATA`` keyed first by a :class:`DataStream`
(the random use: a partition, a subsample, a test split...) and then by that use's own keys
(e.g. a domain index): ``numpy_rng(seed, Stream.DATA, DataStream.PARTITION)``.
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
    ADAPT = 13
    """``evaluation.adapted``'s batch order, keyed by (client, server version): its own
    stream, so scoring never consumes training randomness and two algorithms run with one
    seed adapt each client on the same batches (:mod:`fedclock.algorithms.adapted`)."""


class DataStream(IntEnum):
    """The first key of ``Stream.DATA``: one per random use in loading and splitting data
    (``scenarios/``). The values are those the data modules used before they shared this
    scheme, so every split drawn from them is unchanged."""

    DIGITS_SPLIT = 0x44494701
    """digits' stratified global test split (:mod:`fedclock.scenarios.data.datasets`)."""
    SYNTHETIC = 0x53594E01
    """FedProx Synthetic(alpha, beta) generation."""
    SUBSAMPLE = 0x53554201
    """``dataset.max_train_samples`` of a single dataset."""
    PARTITION = 0x50415201
    """The partition of the training pool among clients (:mod:`fedclock.scenarios.data.federation`)."""
    CLIENT_SPLIT = 0x53504C01
    """Every client's own test split."""
    SAMPLE_CLIENTS = 0x4C454601
    """Client files: ``partition.sample_clients`` (:mod:`fedclock.scenarios.data.client_files`)."""
    GENERATE = 0x47454E01
    """``dataset.generate``'s LEAF files (:mod:`fedclock.scenarios.data.leaf_generate`)."""
    STACKOVERFLOW_GENERATE = 0x534F4701
    """``dataset.generate``'s Stack Overflow TFF files (:mod:`fedclock.scenarios.data.stackoverflow_generate`)."""
    CIFAR_GENERATE = 0x43494601
    """``dataset.generate``'s CIFAR-10 pickles (:mod:`fedclock.scenarios.data.cifar_generate`)."""
    DOMAIN_DEAL = 0x444F4D01
    """Multi-domain sources (:mod:`fedclock.scenarios.data.domains`): dealing clients to domains."""
    DOMAIN_SUBSAMPLE = 0x444F4D02
    """Each domain's training pool size (keyed by the domain)."""
    DOMAIN_PARTITION = 0x444F4D03
    """The partition of each domain among its clients (keyed by the domain)."""
    DOMAIN_CLIENT_SPLIT = 0x444F4D04
    """The clients' own test splits of a multi-domain federation."""
    DOMAIN_TEST_SPLIT = 0x444F4D05
    """Each domain's global test split (keyed by the domain)."""


def _entropy(seed: int, stream: Stream, keys: tuple[int, ...]) -> list[int]:
    """SeedSequence entropy for (seed, stream, keys), one-to-one: the number of keys first,
    then every value as two 32-bit words. (SeedSequence pads short entropy with zeros and
    splits big integers into as many words as they need, so passing the values as they are
    would make e.g. (s, stream) and (s, stream, 0), or seeds 2**32 + a and a, collide.)

    ``Stream.DATA`` keyed first by a :class:`DataStream` keeps the entropy the data modules
    used before they shared this scheme, ``[seed, data stream, *keys]`` as SeedSequence reads
    it, so no partition or split a user has run changes. Each data stream always takes the
    same number of keys, so these lists (at most four words) do not collide with each other
    for seeds below 2**32, nor with the one-to-one lists (at least six words)."""
    if stream is Stream.DATA and keys and isinstance(keys[0], DataStream):
        for value in (seed, *keys):
            if not 0 <= int(value) < 1 << 64:
                raise ValueError(f"seeds and keys must be in [0, 2**64) (got {value})")
        return [int(seed), *(int(k) for k in keys)]
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
