"""Paired statistics and the verdict rule of ``fedclock reproduce``.

For a claim "A vs B" measured on n seeds, the paired differences d_i = A_i - B_i (or, for a
single cell, d_i = A_i - reference) give

* the mean difference d̄ and its standard error SE = s_d / sqrt(n) (s_d: sample standard
  deviation, ddof = 1);
* the 95 % confidence interval d̄ ± t_{0.975, n-1} SE (Student's t, :mod:`scipy.stats`);
* the detectable difference at 80 % power and two-sided alpha = 0.05,
  (t_{0.975, n-1} + t_{0.80, n-1}) SE: the smallest true difference the test would find four
  times in five at this spread and seed count (the normal approximation of the same formula is
  the usual 2.8 SE; with 3 seeds the t quantiles make it 5.4 SE).

Verdict (:func:`verdict`), with ``margin`` the claim's equivalence margin:

* directional claim (A greater / less than B): **holds** when the interval excludes 0 on the
  claimed side; **does not hold** when it excludes 0 on the other side, or lies within
  ± margin (no difference of practical size); otherwise **cannot tell at this power**;
* equality claim: **holds** when the interval lies within ± margin; **does not hold** when it
  excludes 0 and does not lie within ± margin; otherwise **cannot tell at this power**.

scipy provides the t quantiles (a maintained implementation rather than a table of our own).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
CANNOT_TELL = "cannot tell at this power"

CONFIDENCE = 0.95
POWER = 0.80


@dataclass(frozen=True)
class Paired:
    """Statistics of paired differences."""

    n: int
    mean: float
    sd: float
    se: float
    low: float
    high: float
    detectable: float
    """Detectable difference at :data:`POWER` and two-sided alpha = 1 - :data:`CONFIDENCE`."""


def paired(a: Sequence[float], b: Sequence[float] | float) -> Paired:
    """Statistics of ``a[i] - b[i]`` (``b`` a number: a single cell against a reference)."""
    x = np.asarray(a, dtype=float)
    y = np.full_like(x, float(b)) if isinstance(b, (int, float)) else np.asarray(b, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"paired statistics need at least 2 pairs of equal length (got {x.size} and {y.size})")
    d = x - y
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    t_ci = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1))
    t_power = float(stats.t.ppf(POWER, n - 1))
    return Paired(n=n, mean=mean, sd=sd, se=se, low=mean - t_ci * se, high=mean + t_ci * se,
                  detectable=(t_ci + t_power) * se)


def verdict(p: Paired, direction: str, margin: float) -> str:
    """The verdict of a claim of ``direction`` (greater, less, equal) on ``p`` (module docstring)."""
    within = -margin <= p.low and p.high <= margin
    if direction == "equal":
        if within:
            return HOLDS
        return DOES_NOT_HOLD if p.low > 0 or p.high < 0 else CANNOT_TELL
    if direction not in ("greater", "less"):
        raise ValueError(f"direction must be greater, less or equal (got {direction!r})")
    claimed, other = (p.low > 0, p.high < 0) if direction == "greater" else (p.high < 0, p.low > 0)
    if claimed:
        return HOLDS
    if other or within:
        return DOES_NOT_HOLD
    return CANNOT_TELL
