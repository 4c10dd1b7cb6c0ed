"""Seeded random streams: distinct per (seed, stream, keys), identical for identical inputs."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import torch

from fedclock.scheduling.rng import DataStream, Stream, numpy_rng, seed_for, torch_rng


def test_seed_for_is_a_pure_function_of_its_inputs() -> None:
    assert seed_for(0, Stream.TASK, 3, 4) == seed_for(0, Stream.TASK, 3, 4)
    assert seed_for(123, Stream.DEVICES) == seed_for(123, Stream.DEVICES)
    s = seed_for(2**62, Stream.DATA, 10**9)
    assert 0 <= s < 2**63


def test_seed_for_differs_across_seeds_streams_and_keys() -> None:
    seeds = {}
    for seed, stream, keys in itertools.product((0, 1, 7), list(Stream), ((), (0,), (1,), (0, 0), (0, 1), (1, 0))):
        seeds[(seed, stream, keys)] = seed_for(seed, stream, *keys)
    assert len(set(seeds.values())) == len(seeds)


def test_seed_for_is_not_shifted_by_key_order() -> None:
    assert seed_for(0, Stream.TASK, 1, 2) != seed_for(0, Stream.TASK, 2, 1)
    assert seed_for(0, Stream.TASK, 5) != seed_for(5, Stream.TASK, 0)


def test_numpy_rng_reproducible_and_independent() -> None:
    a = numpy_rng(42, Stream.COHORT, 3).random(16)
    b = numpy_rng(42, Stream.COHORT, 3).random(16)
    np.testing.assert_array_equal(a, b)
    for other in (numpy_rng(43, Stream.COHORT, 3), numpy_rng(42, Stream.SERVER, 3), numpy_rng(42, Stream.COHORT, 4),
                  numpy_rng(42, Stream.COHORT, 3, 0)):
        assert not np.array_equal(a, other.random(16))


def test_numpy_rng_ignores_global_state() -> None:
    np.random.seed(1)
    a = numpy_rng(0, Stream.TASK, 1).integers(0, 1 << 30, 8)
    np.random.seed(2)
    np.random.random(100)
    b = numpy_rng(0, Stream.TASK, 1).integers(0, 1 << 30, 8)
    np.testing.assert_array_equal(a, b)


def test_torch_rng_reproducible_and_independent() -> None:
    a = torch.rand(16, generator=torch_rng(42, Stream.INIT, 3))
    b = torch.rand(16, generator=torch_rng(42, Stream.INIT, 3))
    assert torch.equal(a, b)
    assert torch_rng(42, Stream.INIT, 3).initial_seed() == seed_for(42, Stream.INIT, 3)
    for gen in (torch_rng(43, Stream.INIT, 3), torch_rng(42, Stream.DATA, 3), torch_rng(42, Stream.INIT, 4)):
        assert not torch.equal(a, torch.rand(16, generator=gen))


def test_torch_rng_ignores_global_state() -> None:
    torch.manual_seed(1)
    a = torch.randn(8, generator=torch_rng(5, Stream.TASK, 0, 1))
    torch.manual_seed(99)
    torch.rand(50)
    b = torch.randn(8, generator=torch_rng(5, Stream.TASK, 0, 1))
    assert torch.equal(a, b)
    assert torch_rng(5, Stream.TASK).device.type == "cpu"


def test_no_aliasing_from_trailing_zero_keys_or_big_integers() -> None:
    # Regressions: SeedSequence pads short entropy with zeros and splits ints >= 2**32 into
    # several words, so naive entropy lists made these pairs identical.
    pairs = [
        ((0, Stream.TASK), (0, Stream.TASK, 0)),
        ((0, Stream.TASK, 0), (0, Stream.TASK, 0, 0)),
        ((2**32, Stream.INIT), (0, Stream.TASK, 6, 0)),
        ((7, Stream.TASK, 2**32), (7, Stream.TASK, 0, 1)),
        ((2**62 + 3, Stream.COHORT), (3, Stream.COHORT)),
    ]
    for a, b in pairs:
        assert seed_for(*a) != seed_for(*b), (a, b)
        assert not np.array_equal(numpy_rng(*a).random(4), numpy_rng(*b).random(4)), (a, b)


def test_data_streams_keep_the_entropy_the_data_modules_used() -> None:
    # Before the data modules shared Stream.DATA each seeded SeedSequence([seed, stream id, *keys]);
    # every partition and split a user ran depends on these exact generators.
    for seed, data, keys in itertools.product((0, 5, 2**40), list(DataStream), ((), (2,))):
        old = np.random.default_rng(np.random.SeedSequence([seed, int(data), *keys])).random(4)
        np.testing.assert_array_equal(numpy_rng(seed, Stream.DATA, data, *keys).random(4), old)
    assert not np.array_equal(numpy_rng(0, Stream.DATA, DataStream.PARTITION).random(4),
                              numpy_rng(0, Stream.DATA, int(DataStream.PARTITION)).random(4))


def test_rng_is_the_only_home_of_numpy_seeding() -> None:
    root = Path(__file__).resolve().parents[2]
    found = [f"{path.relative_to(root)}:{n}" for layer in ("actors", "algorithms", "scheduling", "scenarios")
             for path in sorted((root / layer).rglob("*.py")) if path.name != "rng.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"SeedSequence\(|default_rng\(", line)]
    assert not found, found
