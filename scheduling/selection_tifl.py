"""TiFL: tier-based client selection (Chai, Ali, Zawad, Truex, Anwar, Baracaldo, Zhou, Ludwig,
Yan, Cheng, "TiFL: A Tier-based Federated Learning System", HPDC 2020, Sec. 4).

Every choice, stated:

* **Profiling and tiers** (Sec. 4.1, 4.2): clients are grouped into ``tiers`` tiers of
  (nearly) equal size by their observed mean task duration (dispatch to arrival), fastest
  first: a profiled client of rank ``r`` (ascending duration, ties by id) among ``n``
  profiled ones is in tier ``floor(r tiers / n)``. The paper profiles every client with a
  few training tasks first; here the server profiles as it goes: while some candidates have
  never returned a result, the cohort is drawn uniformly among those unprofiled candidates
  first (then uniformly among the others). Tiers are recomputed every ``interval`` rounds.
* **Tier choice** (Sec. 4.3, Algorithm 2, adaptive): every round one tier is chosen and the
  cohort drawn uniformly among its idle, available clients (filled uniformly from the
  other tiers when it has too few). Every ``interval`` rounds the tier probabilities are
  recomputed from the tiers' performance: the paper ranks tiers by their test accuracy
  and favours the worse ones; fedclock's server knows the clients' reported training
  losses, so tiers are ranked by the mean last reported loss of their clients, and the tier
  of rank ``j`` (0: highest loss) gets weight ``tiers - j`` (probabilities proportional,
  over the tiers with credits left). Before the first update all tiers are equally likely.
* **Credits** (Alg. 2): every tier starts with ``credits`` selections; choosing a tier
  spends one; a tier without credits is not chosen (when every tier is out of credits, all
  are allowed again). ``credits: null`` (default) sets no limit.
"""
from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field

from fedclock.scheduling.model_base import StrictModel
from fedclock.scheduling.selection import SelectionView, Selector


class TiFLParams(StrictModel):
    """Settings of :class:`TiFL`."""

    tiers: Annotated[int, Field(ge=1, le=1000)] = 5
    interval: Annotated[int, Field(ge=1)] = Field(default=10, description="rounds between tier/probability updates")
    credits: Annotated[int, Field(ge=1)] | None = Field(default=None, description="selections per tier; null: no limit")


class TiFL(Selector):
    """TiFL (Chai et al., HPDC 2020), adaptive tier selection; the rules are the module's."""

    Params = TiFLParams
    reads_loss = True

    def __init__(self, params: Any, rng: np.random.Generator) -> None:
        super().__init__(params, rng)
        p: TiFLParams = params
        self.tier_of: np.ndarray | None = None
        """Tier of every client (-1: not profiled), as last computed."""
        self.probs = np.full(p.tiers, 1.0 / p.tiers)
        self.credits = np.full(p.tiers, -1 if p.credits is None else p.credits, dtype=np.int64)
        self.current_round = -1
        self.rounds_seen = 0

    @staticmethod
    def tiers_from(durations: np.ndarray, tiers: int) -> np.ndarray:
        """Tier of every client from its mean observed duration (NaN: -1, not profiled)."""
        out = np.full(durations.shape[0], -1, dtype=np.int64)
        known = np.flatnonzero(~np.isnan(durations))
        if known.shape[0]:
            order = known[np.lexsort((known, durations[known]))]
            out[order] = np.arange(order.shape[0]) * tiers // order.shape[0]
        return out

    @staticmethod
    def tier_probabilities(tier_loss: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """Weights ``tiers - rank`` by mean loss (rank 0: highest loss; ties by tier index;
        NaN loss ranks last), normalised over the ``allowed`` tiers."""
        m = tier_loss.shape[0]
        key = np.where(np.isnan(tier_loss), -np.inf, tier_loss)
        rank = np.empty(m, dtype=np.int64)
        rank[np.lexsort((np.arange(m), -key))] = np.arange(m)
        weights = (m - rank).astype(np.float64) * allowed
        return weights / weights.sum()

    def _new_round(self, view: SelectionView) -> None:
        p: TiFLParams = self.params
        if self.tier_of is None or self.rounds_seen % p.interval == 0:
            self.tier_of = self.tiers_from(view.mean_duration(), p.tiers)
            if self.rounds_seen > 0:
                tier_loss = np.full(p.tiers, np.nan)
                loss = view.last_loss
                for t in range(p.tiers):
                    members = loss[self.tier_of == t]
                    members = members[~np.isnan(members)]
                    if members.shape[0]:
                        tier_loss[t] = members.mean()
                self.probs = self.tier_probabilities(tier_loss, np.ones(p.tiers, dtype=bool))
        self.rounds_seen += 1

    def select(self, view: SelectionView, candidates: np.ndarray, k: int) -> np.ndarray:
        p: TiFLParams = self.params
        if view.round != self.current_round:
            self._new_round(view)
            self.current_round = view.round
        assert self.tier_of is not None
        fresh = candidates[np.isnan(view.last_duration[candidates])]
        if fresh.shape[0]:  # profiling: unprofiled candidates first
            take = self.rng.choice(fresh, size=min(k, fresh.shape[0]), replace=False)
            return self._fill(candidates, take, k)
        allowed = self.credits != 0
        if not allowed.any():
            self.credits[:] = -1 if p.credits is None else p.credits
            allowed = self.credits != 0
        probs = self.probs * allowed
        probs = probs / probs.sum()
        tier = int(self.rng.choice(p.tiers, p=probs))
        if self.credits[tier] > 0:
            self.credits[tier] -= 1
        members = candidates[self.tier_of[candidates] == tier]
        take = self.rng.choice(members, size=min(k, members.shape[0]), replace=False)
        return self._fill(candidates, take, k)

    def _fill(self, candidates: np.ndarray, taken: np.ndarray, k: int) -> np.ndarray:
        if taken.shape[0] >= k:
            return taken
        rest = candidates[~np.isin(candidates, taken)]
        return np.concatenate([taken, self.rng.choice(rest, size=k - taken.shape[0], replace=False)])
