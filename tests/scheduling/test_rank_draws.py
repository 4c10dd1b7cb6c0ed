"""RankDraws: ranks drawn ahead in batches equal one-at-a-time ``rng.integers`` draws, and the
generator is left exactly where those draws would have left it whenever someone else uses it."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedclock.scheduling.rank_draws import RankDraws


def _state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


@pytest.mark.parametrize("bound", [1, 2, 7, 99_001, 2**32 - 1, 2**32, 10**12])
def test_a_run_of_one_bound_gives_the_scalar_draws_and_state(bound: int) -> None:
    ranks, scalar = RankDraws(np.random.default_rng(11), max_batch=64), np.random.default_rng(11)
    for _ in range(300):
        assert ranks.below(bound) == int(scalar.integers(bound))
    assert _state(ranks.generator()) == _state(scalar)


def test_mixed_bounds_and_other_draws_match_the_scalar_stream() -> None:
    """Random programs of runs of equal bounds (short and long), bound changes, and other
    draws through ``generator()`` (choice, random) in between."""
    program = np.random.default_rng(5)
    for trial in range(40):
        ranks, scalar = RankDraws(np.random.default_rng(trial), max_batch=int(program.integers(1, 50))), \
            np.random.default_rng(trial)
        for _ in range(60):
            op = int(program.integers(4))
            bound = int(program.choice([1, 3, 1_000, 99_000, 2**40]))
            if op < 2:
                for _ in range(int(program.integers(1, 120))):
                    assert ranks.below(bound) == int(scalar.integers(bound))
            elif op == 2:
                got = ranks.generator().choice(50, size=5, replace=False)
                assert got.tolist() == scalar.choice(50, size=5, replace=False).tolist()
            else:
                assert ranks.generator().random() == scalar.random()
        assert _state(ranks.generator()) == _state(scalar)


def test_batches_grow_while_the_bound_stays() -> None:
    """After a change of bound the first draws are scalar; then batches double up to the cap."""
    ranks = RankDraws(np.random.default_rng(0), max_batch=8)
    drawn = []
    for _ in range(40):
        before = ranks._run
        ranks.below(10)
        if ranks._run != before:
            drawn.append(ranks._run - before)
    assert drawn[:7] == [1, 1, 2, 4, 8, 8, 8]
    ranks.below(11)
    assert len(ranks._batch) == 0 and ranks._run == 1


def test_rejects_an_empty_bound_and_a_bad_cap() -> None:
    with pytest.raises(ValueError):
        RankDraws(np.random.default_rng(0)).below(0)
    with pytest.raises(ValueError, match="max_batch"):
        RankDraws(np.random.default_rng(0), max_batch=0)


@pytest.mark.parametrize("timeout", [None, 40.0])
def test_an_async_clock_gives_the_same_events_with_batches_as_with_scalar_draws(timeout: float | None) -> None:
    """A 2,000-client async run (slot picks draw in batches; with a task timeout, give-ups
    change the idle count mid-batch) against the same run drawing every rank alone; then
    the clock's generator is in the same state."""
    from fedclock.scheduling.modes import AsyncMode, StopConfig
    from fedclock.scheduling.clock import TaskCosts
    from fedclock.scheduling.rng import Stream, numpy_rng
    from tests.scheduling.test_clock_golden import build, lognormal_devices

    def run(max_batch: int) -> tuple[list[list[Any]], dict]:
        clock, log = build(lognormal_devices(2_000, 7), AsyncMode(type="async", concurrency=40, task_timeout_s=timeout),
                           StopConfig(versions=1_500), sizes=np.random.default_rng(2).integers(20, 200, size=2_000),
                           costs=TaskCosts(20_000, 10_000, lambda n: 10.0 * n), eval_every=100)
        clock.cohorts.ranks = RankDraws(numpy_rng(5, Stream.COHORT), max_batch=max_batch)
        clock.run()
        return log.rows, _state(clock.cohorts.rng)

    (rows, state), (scalar_rows, scalar_state) = run(4096), run(1)
    assert sum(row[0] == "start" for row in rows) > 1_500
    if timeout is not None:
        assert sum(row[0] == "ended" and row[4] == "timed_out" for row in rows) > 20
    assert rows == scalar_rows
    assert state == scalar_state
