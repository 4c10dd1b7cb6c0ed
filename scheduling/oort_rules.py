"""Oort's rules one by one, as pure functions of arrays: the statistical utility, the staleness
bonus, the system penalty, the preferred duration, the cohort's split between exploitation and
exploration, and the pacer. The selector that applies them, and where each rule comes from:
:mod:`fedclock.scheduling.selection_oort`."""
from __future__ import annotations

import math

import numpy as np

from fedclock.scheduling.selection_arrays import rank_value

__all__ = ["paced", "preferred_duration", "split", "staleness_bonus", "system_penalty", "utility"]


def utility(samples: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Statistical utility ``|B_i| x loss_i`` (the selector module's reading of Eq. 1)."""
    return samples.astype(np.float64) * loss


def staleness_bonus(current_round: int, last_round: np.ndarray) -> np.ndarray:
    """``sqrt(0.1 ln R / r_i)`` with 1-based rounds ``R = current_round + 1`` and
    ``r_i = last_round + 1``."""
    return np.sqrt(0.1 * math.log(current_round + 1) / (last_round.astype(np.float64) + 1))


def system_penalty(duration: np.ndarray, preferred: float, alpha: float) -> np.ndarray:
    """``(T / t_i)^alpha`` for ``t_i > T``, else 1 (unknown durations: 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        slow = duration > preferred
        return np.where(slow, (preferred / np.maximum(duration, 1e-4)) ** alpha, 1.0)


def preferred_duration(durations: np.ndarray, percentile: float) -> float:
    """The duration of rank ``min(floor(n P / 100), n - 1)`` (ascending) among the ``n``
    known ones; inf when ``P >= 100`` or none is known."""
    if percentile >= 100.0:
        return math.inf
    known = durations.take(np.flatnonzero(~np.isnan(durations)))  # (a partition over NaNs is slow)
    if known.shape[0] == 0:
        return math.inf
    return rank_value(known, min(int(known.shape[0] * percentile / 100.0), known.shape[0] - 1))


def split(k: int, exploration: float, explored: int, unexplored: int) -> tuple[int, int]:
    """(exploited, newly explored) counts of a cohort of ``k``: ``floor(k e)`` explored
    (at most the unexplored candidates), the rest exploited (at most the explored ones);
    what one side cannot take goes to the other (see the selector's module)."""
    explore = min(int(k * exploration), unexplored)
    exploit = min(k - explore, explored)
    return exploit, min(k - exploit, unexplored)


def paced(history: list[float], threshold: float, step: int, delta: float) -> float:
    """The pacer's percentile after a round (FedScale's ``pacer``): ``history`` holds one
    entry per round so far (this one included); at a round ``R`` (1-based, the length of
    ``history``) with ``R >= 2 step`` and ``R % step == 0`` the sums of the last two
    windows of ``step`` entries are compared: a change of at most 10 % of the earlier
    sum widens the percentile by ``delta`` (at most 100), a change of at least 5 times
    it narrows it by ``delta`` (at least ``delta``)."""
    rounds = len(history)
    if rounds >= 2 * step and rounds % step == 0:
        before, now = sum(history[-2 * step:-step]), sum(history[-step:])
        if abs(now - before) <= before * 0.1:
            return min(100.0, threshold + delta)
        if abs(now - before) >= before * 5:
            return max(delta, threshold - delta)
    return threshold
