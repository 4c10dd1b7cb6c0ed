"""Paired statistics and the verdict rule of ``fedclock reproduce`` against hand numbers."""
from __future__ import annotations

import math

import pytest

from fedclock.scenarios.claim_stats import CANNOT_TELL, DOES_NOT_HOLD, HOLDS, Paired, paired, verdict


def test_three_pairs_by_hand() -> None:
    """d = (0.02, 0.03, 0.04): mean 0.03, sd 0.01, SE 0.01/sqrt(3) = 0.0057735;
    t(0.975, 2) = 4.302653 gives the half-width 0.024841; t(0.80, 2) = 1.060660 gives the
    detectable difference (4.302653 + 1.060660) x 0.0057735 = 0.030965."""
    p = paired([0.80, 0.82, 0.84], [0.78, 0.79, 0.80])
    assert p.n == 3
    assert p.mean == pytest.approx(0.03)
    assert p.sd == pytest.approx(0.01)
    assert p.se == pytest.approx(0.0057735, abs=1e-7)
    assert p.low == pytest.approx(0.03 - 0.024841, abs=1e-6)
    assert p.high == pytest.approx(0.03 + 0.024841, abs=1e-6)
    assert p.detectable == pytest.approx(0.030965, abs=1e-6)


def test_single_cell_against_a_reference() -> None:
    """(0.9, 0.92) against 0.95: d = (-0.05, -0.03), mean -0.04, sd sqrt(2) x 0.01 = 0.014142,
    SE 0.01; t(0.975, 1) = 12.7062 gives [-0.167062, 0.087062]."""
    p = paired([0.90, 0.92], 0.95)
    assert p.mean == pytest.approx(-0.04)
    assert p.se == pytest.approx(0.01)
    assert (p.low, p.high) == (pytest.approx(-0.167062, abs=1e-6), pytest.approx(0.087062, abs=1e-6))


def test_too_few_or_unequal_pairs() -> None:
    with pytest.raises(ValueError):
        paired([0.5], [0.4])
    with pytest.raises(ValueError):
        paired([0.5, 0.6], [0.4, 0.5, 0.6])


def _ci(low: float, high: float) -> Paired:
    return Paired(n=3, mean=(low + high) / 2, sd=math.nan, se=math.nan, low=low, high=high, detectable=math.nan)


@pytest.mark.parametrize("low, high, direction, expected", [
    (0.01, 0.05, "greater", HOLDS),            # excludes 0 on the claimed side
    (-0.05, -0.01, "greater", DOES_NOT_HOLD),  # excludes 0 on the other side
    (-0.005, 0.008, "greater", DOES_NOT_HOLD),  # within ± 0.01: no gain of practical size
    (-0.02, 0.05, "greater", CANNOT_TELL),
    (-0.05, -0.01, "less", HOLDS),
    (0.01, 0.05, "less", DOES_NOT_HOLD),
    (-0.03, 0.004, "less", CANNOT_TELL),
    (-0.009, 0.009, "equal", HOLDS),
    (0.002, 0.008, "equal", HOLDS),            # a real but negligible difference
    (0.005, 0.04, "equal", DOES_NOT_HOLD),     # excludes 0, beyond the margin
    (-0.02, 0.03, "equal", CANNOT_TELL),
])
def test_verdict_rule(low: float, high: float, direction: str, expected: str) -> None:
    assert verdict(_ci(low, high), direction, margin=0.01) == expected


def test_zero_spread_identical_runs() -> None:
    """Identical runs: every difference 0, the interval [0, 0]; equal holds, greater does not."""
    p = paired([0.7, 0.8, 0.9], [0.7, 0.8, 0.9])
    assert (p.low, p.high) == (0.0, 0.0)
    assert verdict(p, "equal", 0.01) == HOLDS
    assert verdict(p, "greater", 0.01) == DOES_NOT_HOLD
