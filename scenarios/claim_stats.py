"""Statistics and the verdict rule of ``fedclock reproduce``.

For a claim "A vs B" measured on n seeds:

* **paired** (the default: A and B of one seed share the partition and the initial model),
  the differences d_i = A_i - B_i (or, for a single cell, d_i = A_i - reference) give the
  mean difference d̄, its standard error SE = s_d / sqrt(n) (s_d: sample standard deviation,
  ddof = 1) and the 95 % interval d̄ ± t_{0.975, n-1} SE (:func:`paired`);
* **unpaired (Welch)** (``pairing: unpaired``: A and B see different data, so a seed pairs
  nothing), the difference of the means with SE = sqrt(s_A²/n_A + s_B²/n_B) and the
  Welch–Satterthwaite degrees of freedom
  df = (s_A²/n_A + s_B²/n_B)² / ((s_A²/n_A)²/(n_A-1) + (s_B²/n_B)²/(n_B-1)) (:func:`welch`);
* the detectable difference at 80 % power and two-sided alpha = 0.05,
  (t_{0.975, df} + t_{0.80, df}) SE: the smallest true difference the test would find four
  times in five at this spread and seed count (the normal approximation is the usual
  2.8 SE; with 3 paired seeds the t quantiles make it 5.4 SE).

Verdict (:func:`verdict`), with ``margin`` the claim's margin m
(:meth:`fedclock.scenarios.claims.Claim.margin_for`) and e the paper's effect when known:

* directional claim (A greater than B; "less" is the mirror): **holds** when the interval
  excludes 0 on the claimed side; **does not hold** when it excludes 0 on the other side, or
  lies wholly inside ± m *and* excludes e (without e: lies wholly inside ± m); otherwise
  **cannot tell at this power**;
* equality claim: **holds** when the interval lies wholly inside ± m; **does not hold** only
  when it lies wholly outside (low > m or high < -m); otherwise **cannot tell at this power**.

Both tests run at one-sided level 0.025 (:data:`ALPHA`): the interval excluding 0 on the
claimed side is the one-sided t test at 0.025 (:func:`p_directional`), and an interval inside
± m is the two one-sided tests (TOST) at 0.025 each (:func:`p_equivalence`).

**Size** (:func:`size`): with the paper's effect e, whether e lies inside our interval and,
for a directional claim, the ratio ours / paper = d̄ / e, in words. "A wide factor" is
:data:`WIDE_FACTOR`: a ratio of at least 3, or at most 1/3, with e outside the interval.

**Censoring** (:func:`censored`): a to-target metric of a seed that never reaches the target
is +inf, never a value. With no censored seed the t rule above applies. Otherwise, for
"A less" (A gets there sooner): A reaches on every seed and B on none → holds; B on every seed
and A on none → does not hold; else the paired sign rule: per seed, A reached and B not is a
win, B reached and A not a loss, both reached compares the values (equal values are a tie),
neither reached is a tie; ties are dropped and the exact binomial one-sided p of at least
that many wins out of wins + losses at probability 1/2 is compared with :data:`ALPHA` (wins
→ holds, losses → does not hold). "A greater" is the mirror. An equality claim with censored
seeds never holds (an infinite difference has no bound); it does not hold when the sign rule
finds a difference either way at :data:`ALPHA`, else cannot tell.

**Identical runs** (:func:`assess`): A and B equal on every seed (exactly) get no interval and
no verdict (:data:`IDENTICAL`): the setting the claim varies did nothing here.

**Multiplicity**: with R tested rows at one-sided level 0.025, chance alone gives 0.025 R
false "holds" on average (:func:`expected_false_holds`); :func:`holm` adjusts the rows'
p-values (Holm's step-down: the i-th smallest of R p-values times R - i + 1, made
non-decreasing, capped at 1).

scipy provides the t and binomial distributions (:mod:`scipy.stats`).
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
IDENTICAL = "identical on every seed (inert, or masked by another setting)"

CONFIDENCE = 0.95
POWER = 0.80
ALPHA = 0.025
"""The one-sided level of every test (the 95 % interval's one side)."""
WIDE_FACTOR = 3.0
"""Ours at least this many times the paper's effect, or at most its inverse, with the paper's
effect outside our interval, is "a wide factor" (:func:`size`)."""

PAIRED = "paired"
UNPAIRED = "unpaired (Welch)"
CENSORED = "paired sign rule (censored)"


@dataclass(frozen=True)
class Paired:
    """Statistics of a difference A - B: paired (:func:`paired`) or Welch's (:func:`welch`)."""

    n: int
    mean: float
    sd: float
    se: float
    low: float
    high: float
    detectable: float
    """Detectable difference at :data:`POWER` and two-sided alpha = 1 - :data:`CONFIDENCE`."""
    df: float = math.nan
    """Degrees of freedom of the t distribution (n - 1 paired; Welch–Satterthwaite unpaired)."""


def _interval(n: int, mean: float, sd: float, se: float, df: float) -> Paired:
    t_ci = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))
    t_power = float(stats.t.ppf(POWER, df))
    return Paired(n=n, mean=mean, sd=sd, se=se, low=mean - t_ci * se, high=mean + t_ci * se,
                  detectable=(t_ci + t_power) * se, df=df)


def paired(a: Sequence[float], b: Sequence[float] | float) -> Paired:
    """Statistics of ``a[i] - b[i]`` (``b`` a number: a single cell against a reference)."""
    x = np.asarray(a, dtype=float)
    y = np.full_like(x, float(b)) if isinstance(b, (int, float)) else np.asarray(b, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"paired statistics need at least 2 pairs of equal length (got {x.size} and {y.size})")
    d = x - y
    n = d.size
    sd = float(d.std(ddof=1))
    return _interval(n, float(d.mean()), sd, sd / math.sqrt(n), n - 1)


def welch(a: Sequence[float], b: Sequence[float]) -> Paired:
    """Statistics of mean(a) - mean(b) for unpaired samples (Welch's interval; module docstring).
    ``n`` is the smaller sample's size; ``sd`` is nan (two spreads, no single one)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        raise ValueError(f"Welch's interval needs at least 2 values per side (got {x.size} and {y.size})")
    va, vb = float(x.var(ddof=1)) / x.size, float(y.var(ddof=1)) / y.size
    se = math.sqrt(va + vb)
    denominator = va ** 2 / (x.size - 1) + vb ** 2 / (y.size - 1)
    df = (va + vb) ** 2 / denominator if denominator > 0 else float(x.size + y.size - 2)
    return _interval(min(x.size, y.size), float(x.mean() - y.mean()), math.nan, se, df)


def verdict(p: Paired, direction: str, margin: float, paper_effect: float | None = None) -> str:
    """The verdict of a claim of ``direction`` (greater, less, equal) on ``p`` (module docstring)."""
    within = -margin <= p.low and p.high <= margin
    if direction == "equal":
        if within:
            return HOLDS
        return DOES_NOT_HOLD if p.low > margin or p.high < -margin else CANNOT_TELL
    if direction not in ("greater", "less"):
        raise ValueError(f"direction must be greater, less or equal (got {direction!r})")
    claimed, other = (p.low > 0, p.high < 0) if direction == "greater" else (p.high < 0, p.low > 0)
    if claimed:
        return HOLDS
    if other:
        return DOES_NOT_HOLD
    excludes_paper = paper_effect is None or not p.low <= paper_effect <= p.high
    return DOES_NOT_HOLD if within and excludes_paper else CANNOT_TELL


def p_directional(p: Paired, direction: str) -> float:
    """One-sided t p-value of "A - B is on the claimed side" (greater or less) at ``p.df``."""
    if p.se == 0:
        return 0.0 if (p.mean > 0 if direction == "greater" else p.mean < 0) else 1.0
    t = p.mean / p.se
    return float(stats.t.sf(t, p.df) if direction == "greater" else stats.t.cdf(t, p.df))


def p_equivalence(p: Paired, margin: float) -> float:
    """TOST p-value of "|A - B| < margin": the larger of the two one-sided t p-values."""
    if p.se == 0:
        return 0.0 if -margin < p.mean < margin else 1.0
    p_low = float(stats.t.sf((p.mean + margin) / p.se, p.df))
    p_high = float(stats.t.cdf((p.mean - margin) / p.se, p.df))
    return max(p_low, p_high)


@dataclass(frozen=True)
class Size:
    """The size axis of a row: the paper's effect against ours (:func:`size`)."""

    paper_effect: float
    inside: bool
    """Whether the paper's effect lies inside our interval."""
    ratio: float | None
    """Ours / paper (directional claims), else None."""
    words: str


def _factor(ratio: float) -> str:
    """A ratio in words: two significant digits, whole numbers from 100, "under 0.01" below
    0.01 (a difference at the level of float rounding reads as such, not as 1e-15)."""
    if 0 < abs(ratio) < 0.01:
        return "under 0.01"
    return f"{ratio:.2g}" if abs(ratio) < 100 else f"{ratio:.0f}"


def size(p: Paired, direction: str, paper_effect: float) -> Size:
    """Whether ``paper_effect`` lies in our interval, the ratio d̄ / e (directional claims) and
    words for both (module docstring): "consistent with the paper's size", "20x the paper's
    size" / "0.1x the paper's size" (a wide factor), "larger than the paper's (2x)" /
    "smaller than the paper's (0.5x)", "opposite in sign to the paper's"; equality claims:
    "consistent with the paper's gap" or "excludes the paper's gap"."""
    inside = p.low <= paper_effect <= p.high
    if direction == "equal":
        return Size(paper_effect, inside, None,
                    "consistent with the paper's gap" if inside else "excludes the paper's gap")
    ratio = p.mean / paper_effect if paper_effect != 0 else math.inf
    if inside:
        words = "consistent with the paper's size"
    elif ratio < 0:
        words = "opposite in sign to the paper's"
    elif ratio >= WIDE_FACTOR or ratio <= 1 / WIDE_FACTOR:
        words = f"{_factor(ratio)}x the paper's size"
    else:
        words = f"{'larger' if ratio > 1 else 'smaller'} than the paper's ({_factor(ratio)}x)"
    return Size(paper_effect, inside, ratio, words)


@dataclass(frozen=True)
class SignRule:
    """The paired sign rule on censored seeds (:func:`censored`)."""

    wins: int
    """Seeds on the claimed side (for "less": A sooner; for "equal": A less)."""
    losses: int
    ties: int
    p_claimed: float
    """Exact binomial P(at least ``wins`` of wins + losses at 1/2)."""
    p_other: float
    """The same for ``losses``."""


def sign_rule(a: Sequence[float], b: Sequence[float], direction: str) -> SignRule:
    """Wins, losses and ties of A against B per seed (+inf: never reached; module docstring),
    with the exact one-sided binomial p-values. ``direction`` "greater" counts A larger as a
    win; "less" and "equal" count A smaller as a win."""
    wins = losses = ties = 0
    for x, y in zip(a, b):
        if x == y:  # both reached at the same value, or neither reached (inf == inf)
            ties += 1
        elif (x > y) == (direction == "greater"):
            wins += 1
        else:
            losses += 1
    n = wins + losses
    p_claimed = float(stats.binom.sf(wins - 1, n, 0.5)) if n else 1.0
    p_other = float(stats.binom.sf(losses - 1, n, 0.5)) if n else 1.0
    return SignRule(wins, losses, ties, p_claimed, p_other)


def censored(a: Sequence[float], b: Sequence[float], direction: str, unpaired: bool = False
             ) -> tuple[str, float, SignRule | None]:
    """Verdict, p-value (for :func:`holm`) and sign rule of a to-target claim where some seed
    never reached the target (+inf; module docstring). ``unpaired``: no sign rule (seeds pair
    nothing), only the every-seed / no-seed rule, else cannot tell (p = 1)."""
    reached_a = [math.isfinite(x) for x in a]
    reached_b = [math.isfinite(y) for y in b]
    one_side_only = (all(reached_a) and not any(reached_b)) or (all(reached_b) and not any(reached_a))
    rule = None if unpaired else sign_rule(a, b, direction)
    if direction == "equal":
        differs = one_side_only or (rule is not None and min(rule.p_claimed, rule.p_other) <= ALPHA)
        return (DOES_NOT_HOLD if differs else CANNOT_TELL), 1.0, rule
    p_claimed = rule.p_claimed if rule is not None else 1.0
    # the side that reaches the target is the one with the smaller value
    smaller, larger = (reached_a, reached_b) if direction == "less" else (reached_b, reached_a)
    if all(smaller) and not any(larger):
        return HOLDS, p_claimed, rule
    if all(larger) and not any(smaller):
        return DOES_NOT_HOLD, p_claimed, rule
    if rule is not None and rule.p_claimed <= ALPHA:
        return HOLDS, p_claimed, rule
    if rule is not None and rule.p_other <= ALPHA:
        return DOES_NOT_HOLD, p_claimed, rule
    return CANNOT_TELL, p_claimed, rule


@dataclass(frozen=True)
class Assessment:
    """Everything a report row says about one claim (:func:`assess`)."""

    method: str
    """:data:`PAIRED`, :data:`UNPAIRED`, :data:`CENSORED` or :data:`IDENTICAL`."""
    verdict: str
    """A verdict, or :data:`IDENTICAL`."""
    stats: Paired | None
    """The interval (None for identical runs and censored rows)."""
    p: float | None
    """The row's p-value for :func:`holm` (None for identical runs)."""
    size: Size | None
    """The size axis (None without the paper's effect, or without an interval)."""
    sign: SignRule | None = None


def assess(a: Sequence[float], b: Sequence[float] | float, direction: str, margin: float,
           paper_effect: float | None = None, unpaired: bool = False) -> Assessment:
    """The row of a claim: A's values against B's (or against a reference number), +inf for
    a seed that never reached a target (module docstring)."""
    x = [float(v) for v in a]
    if isinstance(b, (int, float)):
        y, runs = [float(b)] * len(x), False
    else:
        y, runs = [float(v) for v in b], True
    if runs and x == y:
        return Assessment(IDENTICAL, IDENTICAL, None, None, None)
    if not all(math.isfinite(v) for v in x + y):
        word, p_value, rule = censored(x, y, direction, unpaired)
        return Assessment(CENSORED if rule is not None else UNPAIRED, word, None, p_value, None, rule)
    st = welch(x, y) if unpaired else paired(x, y)
    p_value = p_equivalence(st, margin) if direction == "equal" else p_directional(st, direction)
    return Assessment(UNPAIRED if unpaired else PAIRED, verdict(st, direction, margin, paper_effect), st, p_value,
                      size(st, direction, paper_effect) if paper_effect is not None else None)


def size_words(row: Assessment) -> str:
    """The size column of a report row: the size words, prefixed "holds in sign; " when the
    verdict holds but the paper's effect lies outside our interval ("–" without a size)."""
    if row.size is None:
        return "–"
    if row.verdict == HOLDS and not row.size.inside and row.size.ratio is not None:
        return f"holds in sign; {row.size.words}"
    return row.size.words


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the given order (None stays None and is not counted)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def expected_false_holds(rows: int) -> float:
    """How many "holds" chance alone gives on average among ``rows`` tested rows, each at
    one-sided level :data:`ALPHA`."""
    return rows * ALPHA
