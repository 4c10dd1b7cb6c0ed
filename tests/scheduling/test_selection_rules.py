"""The built-in selectors' rules against numbers computed by hand: Oort (utility, staleness
bonus, system penalty, preferred duration, exploration split and decay, participation cap),
power-of-choice (the d-then-K rule), FedCS (the greedy fit of Algorithm 2), TiFL (tiers,
tier probabilities, credits)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fedclock.scheduling.selection import ClientHistory, Disclosed, SelectionView
from fedclock.scheduling.selection_fedcs import FedCS, FedCSParams
from fedclock.scheduling.selection_oort import Oort, OortParams
from fedclock.scheduling.selection_power import PowerOfChoice, PowerOfChoiceParams
from fedclock.scheduling.selection_tifl import TiFL, TiFLParams


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------- Oort
def test_oort_utility_is_samples_times_reported_loss() -> None:
    assert Oort.utility(np.array([10, 20]), np.array([0.5, 2.0])).tolist() == [5.0, 40.0]


def test_oort_staleness_bonus() -> None:
    # round index 9 is R = 10; last picked in round index 4 is r = 5: sqrt(0.1 ln 10 / 5)
    assert Oort.staleness_bonus(9, np.array([4]))[0] == pytest.approx(math.sqrt(0.1 * 2.302585092994046 / 5))
    assert Oort.staleness_bonus(0, np.array([0]))[0] == 0.0  # ln 1


def test_oort_system_penalty_only_for_clients_slower_than_preferred() -> None:
    got = Oort.system_penalty(np.array([2.0, 8.0, np.nan]), preferred=4.0, alpha=2.0)
    assert got.tolist() == [1.0, 0.25, 1.0]
    assert Oort.system_penalty(np.array([8.0]), preferred=4.0, alpha=0.0).tolist() == [1.0]  # the ablation


def test_oort_preferred_duration_is_the_pacer_percentile() -> None:
    durations = np.array([5.0, 1.0, 3.0, np.nan, 2.0])  # known, sorted: 1, 2, 3, 5
    assert Oort.preferred_duration(durations, 30.0) == 2.0  # rank floor(4 x 0.3) = 1
    assert Oort.preferred_duration(durations, 80.0) == 5.0  # rank floor(3.2) = 3
    assert Oort.preferred_duration(durations, 100.0) == math.inf


def test_oort_exploration_split_and_decay() -> None:
    assert Oort.split(10, 0.882, explored=50, unexplored=100) == (2, 8)  # floor(8.82) = 8 explored
    assert Oort.split(10, 0.3, explored=1, unexplored=100) == (1, 9)  # one explored candidate to exploit
    assert Oort.split(10, 0.882, explored=50, unexplored=3) == (7, 3)  # three left to explore
    oort = Oort(OortParams(), rng())
    h = ClientHistory(20)
    oort.select(SelectionView(h, 0.0, 0, 0, None), np.arange(20), 5)
    assert oort.exploration == pytest.approx(0.9 * 0.98)
    oort.select(SelectionView(h, 0.0, 0, 0, None), np.arange(20), 5)  # same round: no second decay
    assert oort.exploration == pytest.approx(0.9 * 0.98)
    oort.select(SelectionView(h, 1.0, 1, 1, None), np.arange(20), 5)
    assert oort.exploration == pytest.approx(0.9 * 0.98 * 0.98)


def test_oort_scores_by_hand() -> None:
    h = ClientHistory(3)
    h.last_samples[:] = 10
    h.last_loss[:] = [1.0, 2.0, 4.0]  # utilities 10, 20, 40
    h.last_picked_round[:] = [0, 1, 3]
    h.last_duration[:] = [1.0, 2.0, 10.0]  # preferred duration at the 30th percentile: rank 0, 1.0 s
    h.relist()  # the arrays were written directly: record the durations as arrivals
    got = Oort(OortParams(), rng()).scores(SelectionView(h, 0.0, 4, 4, None), np.arange(3))
    low, span = 10 * 0.999, 40 - 10 * 0.999  # clip at rank floor(3 x 0.9) = 2: 40 (nothing clipped)
    bonus = [math.sqrt(0.1 * math.log(5) / r) for r in (1, 2, 4)]
    expected = [((10 - low) / span + bonus[0]) * 1.0, ((20 - low) / span + bonus[1]) * 0.25,
                ((40 - low) / span + bonus[2]) * 0.01]
    assert got == pytest.approx(expected, rel=1e-12)


def test_oort_exploits_high_utility_fast_clients_and_the_penalty_matters() -> None:
    """Explored clients 0..9: utility rises with the id, clients 5..9 are 10x slower. With the
    penalty the exploited picks avoid the slow ones; with alpha = 0 they prefer them."""
    h = ClientHistory(30)
    h.last_samples[:10] = 10
    h.last_loss[:10] = np.arange(1, 11)
    h.last_picked_round[:10] = 0
    h.last_duration[:10] = [1.0] * 5 + [10.0] * 5
    h.applied[:10] = 1
    h.relist()  # the arrays were written directly: list the explored clients
    for alpha, slow_share in ((2.0, 0.0), (0.0, 0.5)):
        picks = []
        for seed in range(30):
            oort = Oort(OortParams(exploration_factor=0.0, exploration_min=0.0, round_penalty=alpha,
                                   cut_off_util=1.0, round_threshold=30), rng(seed))
            picks += oort.select(SelectionView(h, 0.0, 5, 5, None), np.arange(10), 1).tolist()
        share = np.mean(np.array(picks) >= 5)
        assert (share < 0.2) if slow_share == 0.0 else (share > 0.5)


def test_oort_participation_cap_excludes_the_clients_with_most_applied_results() -> None:
    """FedScale's blacklist counts a client's results (``count``, raised with each feedback),
    not its dispatches: picks whose results never arrived do not count."""
    h = ClientHistory(10)
    h.applied[:] = [5, 3, 1, 0, 0, 0, 0, 0, 0, 0]
    h.times_picked[:] = [5, 3, 9, 9, 0, 0, 0, 0, 0, 0]  # clients 2 and 3 were picked often, their results lost
    h.relist()
    oort = Oort(OortParams(blacklist_rounds=2, exploration_factor=1.0, exploration_min=1.0), rng())
    view = SelectionView(h, 0.0, 1, 1, None)
    assert oort.capped_clients(view).tolist() == [0, 1]  # more than 2 applied results
    capped = Oort(OortParams(blacklist_rounds=0, blacklist_max_len=0.1), rng())  # at most 1 of 10: the most picked
    assert capped.capped_clients(view).tolist() == [0]
    for _ in range(5):
        chosen = oort.select(view, np.arange(10), 8)
        assert sorted(chosen.tolist()) == [2, 3, 4, 5, 6, 7, 8, 9]


def test_oort_pacer_by_hand() -> None:
    """FedScale's pacer: one history entry per round, checked at rounds 2 step, 3 step, ..."""
    assert Oort.paced([0.0, 10, 10], 30.0, 2, 5.0) == 30.0  # round 3: not a multiple of the step
    assert Oort.paced([0.0, 10, 10, 11], 30.0, 2, 5.0) == 30.0  # sums 10 -> 21: +110 %, neither rule
    assert Oort.paced([0.0, 10, 5, 5.5], 30.0, 2, 5.0) == 35.0  # sums 10 -> 10.5: within 10 %, widen
    assert Oort.paced([0.0, 2, 3, 9], 30.0, 2, 5.0) == 25.0  # sums 2 -> 12: 5x the earlier sum, narrow
    assert Oort.paced([0.0, 2, 3, 9], 5.0, 2, 5.0) == 5.0  # never below delta
    assert Oort.paced([0.0, 10, 5, 5.5], 98.0, 2, 5.0) == 100.0  # never above 100
    assert Oort.paced([1.0, 1, 1, 1, 1, 1], 30.0, 2, 5.0) == 35.0  # round 6: windows [1, 1] and [1, 1]


def test_oort_pacer_history_counts_the_first_round_and_reported_exploited_clients() -> None:
    h = ClientHistory(20)
    h.last_samples[:10] = 10
    h.last_loss[:10] = 2.0
    h.last_picked_round[:10] = 0
    h.applied[:10] = 1
    h.relist()
    oort = Oort(OortParams(exploration_factor=0.5, exploration_decay=1.0, exploration_min=0.5), rng())
    oort.select(SelectionView(h, 0.0, 0, 0, None), np.arange(20), 4)
    assert oort.exploit_history == [0.0]  # nothing exploited before the first round
    exploited = oort.exploited.tolist()
    assert len(exploited) == 2
    h.applied[exploited[0]] += 1  # one of the two reported since (utility 10 x 2.0 = 20), the other did not
    oort.select(SelectionView(h, 1.0, 1, 1, None), np.arange(20), 4)
    assert oort.exploit_history == [0.0, pytest.approx(20 / 1.0001)]


# --------------------------------------------------------------------------- power of choice
def test_power_of_choice_takes_the_k_highest_losses_never_reported_first() -> None:
    got = PowerOfChoice.highest_loss(np.array([0.5, np.nan, 2.0, 1.0]), np.array([7, 3, 9, 1]), 2)
    assert got.tolist() == [3, 9]


def test_power_of_choice_draws_d_by_data_size_then_keeps_k() -> None:
    h = ClientHistory(6)
    h.last_loss[:] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    sizes = np.array([10, 0, 10, 0, 10, 10])  # clients 1 and 3 hold nothing: never drawn
    view = SelectionView(h, 0.0, 1, 1, None, data_size=sizes)
    got = PowerOfChoice(PowerOfChoiceParams(d=4), rng(3)).select(view, np.arange(6), 2)
    assert got.tolist() == [5, 4]  # d = 4 draws all of 0, 2, 4, 5; the two highest losses
    # d = K: the plain size-weighted draw, the same as drawing K directly
    plain = PowerOfChoice(PowerOfChoiceParams(d=2), rng(3)).select(view, np.arange(6), 2)
    direct = rng(3).choice(np.arange(6), size=2, replace=False, p=sizes / sizes.sum())
    assert sorted(plain.tolist()) == sorted(direct.tolist())


# --------------------------------------------------------------------------- FedCS
def test_fedcs_greedy_fit_by_hand() -> None:
    clients = np.array([0, 1, 2, 3])
    t_ud, t_ul = np.array([1.0, 3.0, 2.0, 5.0]), np.array([1.0, 1.0, 2.0, 1.0])
    # Theta 0: increments 2, 4, 4, 6 -> client 0 (Theta 2); then 2, 2, 4 -> client 1 (Theta 4);
    # then 2, 2 -> client 2 (Theta 6 <= 6); then client 3 would end at 7 > 6: left out
    assert FedCS.greedy(clients, t_ud, t_ul, 6.0, 4).tolist() == [0, 1, 2]
    assert FedCS.greedy(clients, t_ud, t_ul, 6.0, 2).tolist() == [0, 1]
    assert FedCS.greedy(clients, t_ud, t_ul, 4.0, 4, sequential=False).tolist() == [0, 1, 2]  # totals 2, 4, 4, 6
    assert FedCS.greedy(clients, t_ud, t_ul, 1.0, 4).tolist() == [0]  # nobody fits: the fastest alone


def test_fedcs_reads_the_disclosed_request() -> None:
    disclosed = Disclosed(None, None, None, None, None, expected_duration_s=np.array([2.0, 4.0, 4.0, 6.0]),
                          download_s=np.array([1.0, 3.0, 2.0, 5.0]), upload_s=np.array([1.0, 1.0, 2.0, 1.0]))
    view = SelectionView(ClientHistory(4), 0.0, 0, 0, lambda: disclosed, deadline_s=6.0)
    assert FedCS(FedCSParams(), rng()).select(view, np.arange(4), 3).tolist() == [0, 1, 2]


# --------------------------------------------------------------------------- TiFL
def test_tifl_tiers_from_observed_durations() -> None:
    # known: client 1 (1 s), 3 (2 s), 0 (3 s), 5 (4 s), 4 (5 s) -> ranks 0..4, tier floor(2 r / 5)
    got = TiFL.tiers_from(np.array([3.0, 1.0, np.nan, 2.0, 5.0, 4.0]), 2)
    assert got.tolist() == [0, 0, -1, 0, 1, 1]


def test_tifl_tier_probabilities_favour_high_loss_tiers() -> None:
    got = TiFL.tier_probabilities(np.array([0.5, 2.0, np.nan]), np.ones(3, dtype=bool))
    assert got == pytest.approx([2 / 6, 3 / 6, 1 / 6])  # ranks 1, 0, 2 -> weights 2, 3, 1
    got = TiFL.tier_probabilities(np.array([0.5, 2.0, np.nan]), np.array([True, False, True]))
    assert got == pytest.approx([2 / 3, 0.0, 1 / 3])
    # Algorithm 2 ranks the tiers that have credits among themselves: n = 2 tiers, D = 3;
    # tier 1 (the middle loss) has none, so tiers 0 and 2 get 2/3 and 1/3 (not 3/4 and 1/4)
    got = TiFL.tier_probabilities(np.array([2.0, 1.0, 0.5]), np.array([True, False, True]))
    assert got == pytest.approx([2 / 3, 0.0, 1 / 3])


def test_tifl_profiles_first_then_picks_one_tier_and_spends_credits() -> None:
    h = ClientHistory(8)
    tifl = TiFL(TiFLParams(tiers=2, credits=1, interval=100), rng())
    first = tifl.select(SelectionView(h, 0.0, 0, 0, None), np.arange(8), 3)
    assert len(first) == 3  # nobody profiled: unprofiled candidates drawn uniformly
    h.last_duration[:] = h.duration_sum[:] = [1, 1, 1, 1, 9, 9, 9, 9]
    h.arrivals[:] = 1
    tifl = TiFL(TiFLParams(tiers=2, credits=1, interval=100), rng())
    tiers = []
    for r in range(3):
        chosen = tifl.select(SelectionView(h, 0.0, r, r, None), np.arange(8), 3)
        assert len({int(c >= 4) for c in chosen}) == 1  # one tier per round
        tiers.append(int(chosen[0] >= 4))
    assert sorted(tiers[:2]) == [0, 1]  # one credit each: the second round takes the other tier
    assert tifl.credits.tolist() in ([0, 1], [1, 0])  # credits were refilled for the third round
