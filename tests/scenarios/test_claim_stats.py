"""Statistics and the verdict rule of ``fedclock reproduce`` against hand numbers
(:mod:`fedclock.scenarios.claim_stats`)."""
from __future__ import annotations

import math

import pytest

from fedclock.scenarios.claim_stats import (CANNOT_TELL, CENSORED, DOES_NOT_HOLD, HOLDS, IDENTICAL, PAIRED, UNPAIRED,
                                            Paired, assess, censored, expected_false_holds, holm, p_directional,
                                            p_equivalence, paired, sign_rule, size, size_words, verdict, welch)

INF = math.inf


def test_three_pairs_by_hand() -> None:
    """d = (0.02, 0.03, 0.04): mean 0.03, sd 0.01, SE 0.01/sqrt(3) = 0.0057735;
    t(0.975, 2) = 4.302653 gives the half-width 0.024841; t(0.80, 2) = 1.060660 gives the
    detectable difference (4.302653 + 1.060660) x 0.0057735 = 0.030965."""
    p = paired([0.80, 0.82, 0.84], [0.78, 0.79, 0.80])
    assert p.n == 3 and p.df == 2
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
    with pytest.raises(ValueError):
        welch([0.5], [0.4, 0.5])


def test_welch_by_hand() -> None:
    """A = (1, 2, 3): mean 2, s² 1, s²/n 1/3; B = (0, 2): mean 1, s² 2, s²/n 1. Difference 1,
    SE sqrt(4/3) = 1.154701; df = (4/3)² / ((1/3)²/2 + 1²/1) = (16/9) / (19/18) = 32/19 =
    1.684211; t(0.975, 32/19) = 5.176232 (scipy) gives the half-width 5.976997."""
    w = welch([1.0, 2.0, 3.0], [0.0, 2.0])
    assert w.mean == pytest.approx(1.0)
    assert w.se == pytest.approx(1.154701, abs=1e-6)
    assert w.df == pytest.approx(32 / 19)
    assert (w.low, w.high) == (pytest.approx(1 - 5.976997, abs=1e-5), pytest.approx(1 + 5.976997, abs=1e-5))
    assert w.n == 2


def _ci(low: float, high: float, mean: float | None = None) -> Paired:
    return Paired(n=3, mean=(low + high) / 2 if mean is None else mean, sd=math.nan, se=math.nan, low=low,
                  high=high, detectable=math.nan)


@pytest.mark.parametrize("low, high, direction, margin, effect, expected", [
    (0.01, 0.05, "greater", 0.01, None, HOLDS),               # excludes 0 on the claimed side
    (0.0019, 0.0050, "greater", 0.01, None, HOLDS),           # inside ± margin but excluding 0: the sign holds
    (-0.05, -0.01, "greater", 0.01, None, DOES_NOT_HOLD),     # excludes 0 on the other side
    (-0.005, 0.008, "greater", 0.01, None, DOES_NOT_HOLD),    # inside ± margin, no paper effect to exclude
    (-0.005, 0.008, "greater", 0.01, 0.02, DOES_NOT_HOLD),    # inside ± margin and excludes the paper's 0.02
    (-0.005, 0.008, "greater", 0.008, 0.008, CANNOT_TELL),    # inside ± margin but the paper's 0.008 is inside
    (-0.02, 0.05, "greater", 0.01, None, CANNOT_TELL),        # straddles 0, wider than the margin
    (-0.02, 0.05, "greater", 0.01, 0.3, CANNOT_TELL),
    (-0.05, -0.01, "less", 0.01, None, HOLDS),
    (0.01, 0.05, "less", 0.01, None, DOES_NOT_HOLD),
    (-0.004, 0.006, "less", 0.01, None, DOES_NOT_HOLD),
    (-0.004, 0.006, "less", 0.01, -0.02, DOES_NOT_HOLD),
    (-0.004, 0.006, "less", 0.006, -0.003, CANNOT_TELL),
    (-0.03, 0.004, "less", 0.01, None, CANNOT_TELL),
    (-0.009, 0.009, "equal", 0.01, None, HOLDS),
    (0.002, 0.008, "equal", 0.01, None, HOLDS),               # a real but negligible difference
    (0.005, 0.04, "equal", 0.01, None, CANNOT_TELL),          # overlaps the margin: was "does not hold"
    (0.01, 0.04, "equal", 0.01, None, CANNOT_TELL),           # touches the margin
    (0.011, 0.04, "equal", 0.01, None, DOES_NOT_HOLD),        # wholly above + margin
    (-0.04, -0.012, "equal", 0.01, None, DOES_NOT_HOLD),      # wholly below - margin
    (-0.02, 0.03, "equal", 0.01, None, CANNOT_TELL),
])
def test_verdict_rule(low: float, high: float, direction: str, margin: float, effect: float | None,
                      expected: str) -> None:
    assert verdict(_ci(low, high), direction, margin, effect) == expected


def test_verdict_refuses_an_unknown_direction() -> None:
    with pytest.raises(ValueError, match="direction"):
        verdict(_ci(0.0, 1.0), "above", 0.01)


@pytest.mark.parametrize("low, high, mean, effect, ratio, inside, words", [
    (0.10, 0.14, 0.12, 0.12, 1.0, True, "consistent with the paper's size"),
    (0.10, 0.14, 0.12, 0.006, 20.0, False, "20x the paper's size"),
    (0.5, 1.0, 0.75, 0.25, 3.0, False, "3x the paper's size"),         # exactly the wide factor
    (0.10, 0.14, 0.12, 0.05, 2.4, False, "larger than the paper's (2.4x)"),
    (0.10, 0.14, 0.12, 0.2, 0.6, False, "smaller than the paper's (0.6x)"),
    (0.10, 0.14, 0.12, 0.4, 0.3, False, "0.3x the paper's size"),      # under 1/3: a wide factor
    (0.10, 0.14, 0.12, -0.05, -2.4, False, "opposite in sign to the paper's"),
    (-0.14, -0.10, -0.12, -0.006, 20.0, False, "20x the paper's size"),  # "less": both negative
    (-0.007, 0.007, 1.4e-17, 0.0268, 1.4e-17 / 0.0268, False, "under 0.01x the paper's size"),  # rounding-level mean
    (-0.007, 0.007, 0.0, 0.0268, 0.0, False, "0x the paper's size"),  # no difference: not "opposite in sign"
])
def test_size_axis(low: float, high: float, mean: float, effect: float, ratio: float, inside: bool,
                   words: str) -> None:
    s = size(_ci(low, high, mean), "greater", effect)
    assert s.ratio == pytest.approx(ratio)
    assert s.inside is inside and s.words == words


def test_size_of_an_equality_claim_has_no_ratio() -> None:
    assert size(_ci(-0.01, 0.01), "equal", 0.004).words == "consistent with the paper's gap"
    s = size(_ci(-0.01, 0.01), "equal", 0.02)
    assert s.ratio is None and not s.inside and s.words == "excludes the paper's gap"


def test_size_words_of_a_row() -> None:
    """d = (0.11, 0.12, 0.13): mean 0.12, sd 0.01, interval 0.12 ± 0.024841, excluding 0 and
    the paper's 0.006 (20x): "holds in sign; 20x ..."; with the paper's 0.12, just consistent."""
    a = [0.91, 0.92, 0.93]
    b = [0.80, 0.80, 0.80]
    assert size_words(assess(a, b, "greater", 0.003, 0.006)) == "holds in sign; 20x the paper's size"
    assert size_words(assess(a, b, "greater", 0.06, 0.12)) == "consistent with the paper's size"
    assert size_words(assess(a, b, "greater", 0.01)) == "–"


def test_p_values_by_hand() -> None:
    """d = (0.02, 0.03, 0.04): t = 0.03 / 0.0057735 = 5.196152 on 2 df, whose upper tail is
    1/2 - t / (2 sqrt(2 + t²)) = 1/2 - 5.196152 / (2 sqrt 29) = 0.017549. TOST at margin 0.05:
    t = (0.03 - 0.05) / SE = -3.464102, tail 1/2 - 3.464102 / (2 sqrt 14) = 0.037090, and
    (0.03 + 0.05) / SE = 13.856406, tail 1/2 - 13.856406 / (2 sqrt 194) = 0.002584; the larger."""
    p = paired([0.80, 0.82, 0.84], [0.78, 0.79, 0.80])
    assert p_directional(p, "greater") == pytest.approx(0.017549, abs=1e-6)
    assert p_directional(p, "less") == pytest.approx(1 - 0.017549, abs=1e-6)
    assert p_equivalence(p, 0.05) == pytest.approx(0.037090, abs=1e-6)
    row = assess([0.80, 0.82, 0.84], [0.78, 0.79, 0.80], "equal", 0.05)
    assert row.method == PAIRED and row.verdict == CANNOT_TELL and row.p == pytest.approx(0.037090, abs=1e-6)


def test_identical_runs_get_no_interval() -> None:
    row = assess([0.7, 0.8, 0.9], [0.7, 0.8, 0.9], "greater", 0.01)
    assert row.method == IDENTICAL and row.verdict == IDENTICAL
    assert row.stats is None and row.p is None and size_words(row) == "–"
    # a single cell equal to the reference on every seed is a measurement, not two identical runs
    cell = assess([0.5, 0.5], 0.5, "equal", 0.01)
    assert cell.verdict == HOLDS and cell.stats is not None and cell.p == 0.0


def test_unpaired_rows_use_welch() -> None:
    """A = (0.9, 0.92, 0.94), B = (0.5, 0.52, 0.54): difference 0.4 >> Welch's SE 0.016330."""
    row = assess([0.9, 0.92, 0.94], [0.5, 0.52, 0.54], "greater", 0.01, unpaired=True)
    assert row.method == UNPAIRED and row.verdict == HOLDS
    assert row.stats is not None and row.stats.se == pytest.approx(0.016330, abs=1e-6)
    assert row.stats.df == pytest.approx(4.0)  # equal spreads and sizes: df = 2 (n - 1)


@pytest.mark.parametrize("a, b, direction, expected, wins, losses, p", [
    # A reaches on every seed, B on none: holds (A sooner), although the sign rule's p is 1/8
    ((5, 6, 7), (INF, INF, INF), "less", HOLDS, 3, 0, 0.125),
    ((INF, INF, INF), (5, 6, 7), "less", DOES_NOT_HOLD, 0, 3, 1.0),
    ((INF, INF, INF), (5, 6, 7), "greater", HOLDS, 3, 0, 0.125),       # the mirror
    ((5, 6, 7), (INF, INF, INF), "greater", DOES_NOT_HOLD, 0, 3, 1.0),
    # 7 seeds: 6 won (A 1 vs B 2), 1 tie (neither reached): P(X >= 6 | 6) = 1/64 <= 0.025
    ((1, 1, 1, 1, 1, 1, INF), (2, 2, 2, 2, 2, 2, INF), "less", HOLDS, 6, 0, 1 / 64),
    ((2, 2, 2, 2, 2, 2, INF), (1, 1, 1, 1, 1, 1, INF), "less", DOES_NOT_HOLD, 0, 6, 1.0),
    # 1 win by censoring, 4 by value, 1 loss by censoring, 1 tie: P(X >= 5 | 6) = 7/64
    ((10, 10, 10, 10, 10, INF, INF), (INF, 20, 20, 20, 20, 20, INF), "less", CANNOT_TELL, 5, 1, 7 / 64),
    # 5 of 5 wins: P = 1/32 = 0.03125 > 0.025
    ((1, 1, 1, 1, 1, INF), (2, 2, 2, 2, 2, INF), "less", CANNOT_TELL, 5, 0, 1 / 32),
])
def test_censored_targets(a: tuple[float, ...], b: tuple[float, ...], direction: str, expected: str, wins: int,
                          losses: int, p: float) -> None:
    row = assess(a, b, direction, 0.01)
    assert row.method == CENSORED and row.stats is None and row.verdict == expected
    assert row.sign is not None and (row.sign.wins, row.sign.losses) == (wins, losses)
    assert row.p == pytest.approx(p)


def test_censored_equality_and_unpaired() -> None:
    """An equality claim with censored seeds never holds; one side only reaching is a difference."""
    assert censored([5, 6, 7], [INF, INF, INF], "equal")[0] == DOES_NOT_HOLD
    assert censored([5, 6, INF], [5, 6, INF], "equal")[0] == CANNOT_TELL
    assert censored([5, INF, 7], [6, 6, INF], "equal")[0] == CANNOT_TELL
    # unpaired: only the every-seed / no-seed rule
    assert censored([5, 6, 7], [INF, INF, INF], "less", unpaired=True)[:2] == (HOLDS, 1.0)
    assert censored([5, 6, INF], [INF, 4, INF], "less", unpaired=True) == (CANNOT_TELL, 1.0, None)
    row = assess([5, 6, 7], [INF, INF, INF], "less", 1.0, unpaired=True)
    assert row.method == UNPAIRED and row.verdict == HOLDS


def test_sign_rule_counts_ties_both_ways() -> None:
    """(3 vs 3): tie by value; (inf vs inf): tie by censoring; (2 vs 4): win for "less"."""
    rule = sign_rule([3, INF, 2], [3, INF, 4], "less")
    assert (rule.wins, rule.losses, rule.ties) == (1, 0, 2)
    assert rule.p_claimed == pytest.approx(0.5) and rule.p_other == pytest.approx(1.0)


def test_no_censored_seed_uses_the_t_rule() -> None:
    row = assess([5.0, 6.0, 7.0], [8.0, 9.0, 11.0], "less", 1.0)
    assert row.method == PAIRED and row.stats is not None and row.stats.mean == pytest.approx(-10 / 3)


def test_holm_by_hand() -> None:
    """p = (0.01, 0.04, none, 0.03), 3 tested: 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 =
    0.04, raised to the running maximum 0.06."""
    adjusted = holm([0.01, 0.04, None, 0.03])
    assert adjusted[2] is None
    assert adjusted[0] == pytest.approx(0.03)
    assert adjusted[1] == pytest.approx(0.06) and adjusted[3] == pytest.approx(0.06)
    assert holm([0.6, 0.7]) == [pytest.approx(1.0), pytest.approx(1.0)]  # capped at 1
    assert expected_false_holds(12) == pytest.approx(0.3)


def test_the_readme_worked_example() -> None:
    """docs/reproductions/README.md: PLGA 95.2, 95.6, 96.0 against FedAsync 94.0, the paper's
    effect 3.43 points, margin 1.715: differences 1.2, 1.6, 2.0 points, interval 1.6 ± 0.9937,
    holds, 0.47x; one-sided p 0.5 - 6.928 / (2 sqrt(2 + 6.928²)) = 0.0101. PLGA 93.6, 94.2, 94.8:
    interval 0.2 ± 1.4905 inside ± 1.715, excluding 3.43: does not hold, 0.058x."""
    b = [0.94, 0.94, 0.94]
    row = assess([0.952, 0.956, 0.960], b, "greater", 0.0343 / 2, 0.0343)
    assert row.stats is not None
    assert (row.stats.low, row.stats.high) == (pytest.approx(0.016 - 0.009937, abs=1e-6),
                                               pytest.approx(0.016 + 0.009937, abs=1e-6))
    assert row.verdict == HOLDS and size_words(row) == "holds in sign; smaller than the paper's (0.47x)"
    assert row.p == pytest.approx(0.0101, abs=1e-4)
    row = assess([0.936, 0.942, 0.948], b, "greater", 0.0343 / 2, 0.0343)
    assert row.stats is not None
    assert (row.stats.low, row.stats.high) == (pytest.approx(0.002 - 0.014905, abs=1e-6),
                                               pytest.approx(0.002 + 0.014905, abs=1e-6))
    assert row.verdict == DOES_NOT_HOLD and size_words(row) == "0.058x the paper's size"
