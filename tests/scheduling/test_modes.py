"""Each mode carries its behaviour (issue 44): it makes its protocol and answers what the run
asks of it, by hand."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fedclock.scheduling.modes import AsyncMode, SyncMode, WindowAggregation
from fedclock.scheduling.protocols import AsyncSlots


def test_the_sync_cohort_rule_by_hand() -> None:
    assert SyncMode().cohort_rule(7) == (7, None)
    assert SyncMode(cohort_size=3).cohort_rule(7) == (3, None)
    assert SyncMode(cohort_fraction=0.25).cohort_rule(10) == (3, None)  # ceil(2.5)
    assert SyncMode(cohort_fraction=0.01).cohort_rule(10) == (1, None)  # at least one
    assert SyncMode(cohort_size=10, overcommit=1.3).cohort_rule(50) == (13, 10)  # 1.3 x 10 is 13 (rounded first)


def test_what_each_mode_answers() -> None:
    drop = SyncMode(deadline_s=5.0)
    include = SyncMode(deadline_s=5.0, late_results="include")
    plain, windows = AsyncMode(type="async"), AsyncMode(type="async", aggregation=WindowAggregation(window_s=2.0))
    assert [m.round_deadline_s for m in (drop, include, SyncMode(), plain, windows)] == [5.0, 5.0, None, None, None]
    assert [m.drops_late for m in (drop, include, SyncMode(), plain, windows)] == [True, False, False, False, False]
    assert [m.counts_rounds for m in (drop, plain, windows)] == [True, False, True]


def test_with_limits_changes_only_what_it_is_given() -> None:
    mode = SyncMode(cohort_size=4, deadline_s=3.0)
    assert mode.with_limits(cohort_fraction=0.5) == SyncMode(cohort_fraction=0.5, deadline_s=3.0)
    assert mode.with_limits() == mode
    assert AsyncMode(type="async").with_limits(concurrency=9).concurrency == 9


def test_each_mode_makes_its_protocol() -> None:
    clock: Any = SimpleNamespace(kernel=SimpleNamespace(env=None))
    protocols = [SyncMode().protocol(clock), AsyncMode(type="async").protocol(clock),
                 AsyncMode(type="async", aggregation=WindowAggregation(window_s=2.0)).protocol(clock)]
    assert [p.__name__ for p in protocols] == ["sync_rounds", "run", "windowed_rounds"]
    assert protocols[1].gi_frame.f_locals["self"].__class__ is AsyncSlots
