"""The fast paths of the selectors equal the straightforward computations they replace:
NumPy's weighted draw without replacement, full sorts, FedCS's greedy that rescans every
client at each step, TiFL's tiers from a full sort (small random cases, ties included)."""
from __future__ import annotations

import numpy as np

from fedclock.scheduling.selection import ClientHistory, SelectionView
from fedclock.scheduling.selection_arrays import largest, rank_value, smallest, weighted_draw
from fedclock.scheduling.selection_fedcs import FedCS
from fedclock.scheduling.selection_oort import Oort, OortParams
from fedclock.scheduling.selection_tifl import TiFL


def test_weighted_draw_is_numpys_choice_from_the_same_random_numbers() -> None:
    for case in range(300):
        rng = np.random.default_rng(case)
        n = int(rng.integers(1, 200))
        weights = rng.integers(0, 4, n).astype(float) if case % 2 else rng.lognormal(0, 2, n)  # zeros, repeats
        if not np.count_nonzero(weights):
            continue
        p = weights / weights.sum()
        size = int(rng.integers(1, np.count_nonzero(weights) + 1))
        ours, theirs = np.random.default_rng(case + 1), np.random.default_rng(case + 1)
        assert weighted_draw(ours, p, size).tolist() == theirs.choice(n, size, replace=False, p=p).tolist()
        assert ours.random() == theirs.random()  # the stream is left where choice leaves it


def test_partial_orders_equal_the_full_sort() -> None:
    for case in range(200):
        rng = np.random.default_rng(case)
        n = int(rng.integers(1, 60)) if case % 4 else int(rng.integers(64, 2000))
        keys = rng.integers(0, 5, n).astype(float) if case % 2 else rng.random(n)
        ids = np.sort(rng.choice(10_000, n, replace=False))
        m = int(rng.integers(0, n + 2)) if case % 4 else int(rng.integers(0, n // 64 + 1))  # the sampled cut too
        assert smallest(keys, ids, m).tolist() == np.lexsort((ids, keys))[:m].tolist()
        assert largest(keys, ids, m).tolist() == np.lexsort((ids, -keys))[:m].tolist()
        rank = int(rng.integers(0, n))
        assert rank_value(keys, rank) == np.sort(keys)[rank]


def straightforward_greedy(t_ud: np.ndarray, t_ul: np.ndarray, deadline: float, k: int) -> list[int]:
    """Algorithm 2 of Nishio and Yonetani (ICC 2019) as written: every step rescans every
    client left for the least increment (first minimum), stops at the first that does not
    fit; nobody fits: the fastest alone."""
    left = np.ones(t_ud.shape[0], dtype=bool)
    kept: list[int] = []
    theta = 0.0
    while len(kept) < k and left.any():
        increment = np.where(left, t_ul + np.maximum(0.0, t_ud - theta), np.inf)
        x = int(np.argmin(increment))
        left[x] = False
        if theta + increment[x] > deadline:
            break
        theta += float(increment[x])
        kept.append(x)
    return kept or [int(np.lexsort((np.arange(t_ud.shape[0]), t_ud + t_ul))[0])]


def test_fedcs_greedy_equals_the_straightforward_loop() -> None:
    """300 random cases, a third with integer times (many ties), cohorts up to 60 of up to
    600 clients (the shortlist and its shrinking both act)."""
    for case in range(300):
        rng = np.random.default_rng(case)
        n, k = int(rng.integers(1, 600)), int(rng.integers(1, 60))
        if case % 3 == 0:
            t_ud, t_ul = rng.integers(0, 5, n).astype(float), rng.integers(0, 3, n).astype(float)
        else:
            t_ud, t_ul = rng.lognormal(0, 1, n), rng.lognormal(-1, 0.7, n)
        deadline = float(rng.uniform(0.5, 30))
        clients = np.arange(n) * 3  # ids in increasing order, not positions
        got = FedCS.greedy(clients, t_ud, t_ul, deadline, k).tolist()
        assert got == (clients[straightforward_greedy(t_ud, t_ul, deadline, k)]).tolist(), case


def test_tifl_tiers_equal_the_full_sort() -> None:
    for case in range(400):
        rng = np.random.default_rng(case)
        n, tiers = int(rng.integers(0, 60)), int(rng.integers(1, 12))
        durations = rng.integers(0, 4, n).astype(float) if case % 2 else rng.random(n)
        durations[rng.random(n) < 0.2] = np.nan
        expected = np.full(n, -1)
        known = np.flatnonzero(~np.isnan(durations))
        order = known[np.lexsort((known, durations[known]))]
        expected[order] = np.arange(order.shape[0]) * tiers // max(order.shape[0], 1)
        assert TiFL.tiers_from(durations, tiers).tolist() == expected.tolist()


def test_oorts_kept_preferred_duration_equals_a_fresh_one() -> None:
    """Oort keeps the known durations sorted and moves only the clients whose results
    arrived; after every batch of arrivals (rounded durations: ties) its preferred duration
    equals :meth:`Oort.preferred_duration` computed from scratch."""
    rng = np.random.default_rng(0)
    history = ClientHistory(300)
    oort = Oort(OortParams(round_threshold=30.0), rng)
    for step in range(40):
        for client in rng.choice(300, size=int(rng.integers(0, 40)), replace=False).tolist():
            history.arrived(client, float(np.round(rng.lognormal(0, 1), 1)), None, None)
        oort.threshold = float(rng.choice([5.0, 30.0, 95.0]))
        view = SelectionView(history, float(step), step, step, None)
        assert oort._preferred(view) == Oort.preferred_duration(history.last_duration, oort.threshold)
