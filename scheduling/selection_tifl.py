"""TiFL: tier-based client selection (Chai, Ali, Zawad, Truex, Anwar, Baracaldo, Zhou, Ludwig,
Yan, Cheng, "TiFL: A Tier-based Federated Learning System", HPDC 2020, Sec. 4).

The paper is not in this project's papers folder and its authors published no code; where
Algorithm 2 needs reading, the public re-implementation in FLTK (bacox/fltk,
``fltk/strategy/client_selection/tifl.py``, ``change_probs`` and ``tifl_init``) is the
reference named below. Every choice, stated:

* **Profiling and tiers** (Sec. 4.1, 4.2): clients are grouped into ``tiers`` tiers (5 by
  default, the paper's and FLTK's usual count) of (nearly) equal size by their observed
  mean task duration (dispatch to arrival), fastest first: a profiled client of rank ``r``
  (ascending duration, ties by id) among ``n`` profiled ones is in tier ``floor(r tiers /
  n)``. The paper profiles every client with a few training tasks first; here the server
  profiles as it goes: while some candidates have never returned a result, the cohort is
  drawn uniformly among those unprofiled candidates first (then uniformly among the
  others). Tiers are recomputed every ``interval`` rounds (the paper tiers once, after
  profiling; re-tiering follows clients whose speed changes).
* **Tier choice** (Sec. 4.3, Algorithm 2, adaptive): every round one tier is chosen and the
  cohort drawn uniformly among its idle, available clients (filled uniformly from the
  other tiers when it has too few). Every ``interval`` rounds (``I``, 10 by default) the
  tier probabilities are recomputed (``ChangeProbs``): the ``n`` tiers with credits left
  are ranked by performance, worst first, and the tier of rank ``j`` gets ``(n - j) / (n
  (n + 1) / 2)``, a tier without credits 0 (:meth:`TiFL.tier_probabilities`; FLTK's
  ``change_probs`` reads Algorithm 2 the same way). The paper ranks by each tier's test
  accuracy; fedclock's server holds no per-tier test data but knows the clients' reported
  training losses, so "worst" is the highest mean last reported loss. Before the first
  update all tiers are equally likely; between updates a tier that runs out of credits is
  left out and the others' probabilities renormalised (as FLTK's ``select_tier`` does).
* **Credits** (Alg. 2): every tier starts with ``credits`` selections; choosing a tier
  spends one; a tier without credits is not chosen (when every tier is out of credits, all
  are refilled: the paper's runs end first, FLTK sizes credits as ``ceil(rounds /
  tiers)`` so they do too). ``credits: null`` (default) sets no limit.

**Cost at a million clients.** A round's choice is a few linear passes (who is unprofiled,
the chosen tier's members); re-tiering places only the ``tiers - 1`` boundary clients with
one partial sort and keeps each tier's members from one stable counting sort, instead of
sorting every client (``benchmarks/selection.py`` measures both).
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
        self.members: list[np.ndarray] = []
        """Each tier's clients in id order, as last computed."""
        self.probs = np.full(p.tiers, 1.0 / p.tiers)
        self.credits = np.full(p.tiers, -1 if p.credits is None else p.credits, dtype=np.int64)
        self.current_round = -1
        self.rounds_seen = 0

    @staticmethod
    def tiers_from(durations: np.ndarray, tiers: int) -> np.ndarray:
        """Tier of every client from its mean observed duration (NaN: -1, not profiled).

        The tier of rank ``r`` among ``m`` profiled clients, ``floor(r tiers / m)``, is the
        number of tier boundaries at or below it (boundary ``t`` at rank ``ceil(t m /
        tiers)``), so only the ``tiers - 1`` boundary clients are placed (one partial sort)
        and every client is compared with them, instead of sorting all clients: the result
        is the full sort's (ties in duration by client id), in a few linear passes."""
        out = np.full(durations.shape[0], -1, dtype=np.int64)
        known = np.flatnonzero(~np.isnan(durations))
        m = known.shape[0]
        if not m:
            return out
        d = durations.take(known)
        ranks = np.unique(-(-np.arange(1, tiers) * m // tiers))  # ceil(t m / tiers), t = 1 .. tiers - 1
        ranks = ranks[ranks < m]
        if not ranks.shape[0]:
            out[known] = 0
            return out
        # boundaries: per distinct rank, its (duration, id); t boundaries may share a rank
        values = np.partition(d, ranks)[ranks]
        below = np.searchsorted(values, d, side="left")  # boundaries with a smaller duration
        upto = np.searchsorted(values, d, side="right")  # ... with a duration at most the client's
        smaller = np.cumsum(np.bincount(upto, minlength=values.shape[0] + 1))  # [j]: clients below values[j]
        tier_rank = below.copy()
        tied = np.flatnonzero(upto > below)  # clients whose duration is a boundary's
        for first in np.unique(below.take(tied)):  # one group of boundaries per distinct value
            group = tied[below.take(tied) == first]  # those clients, in id order
            last = int(upto[group[0]])
            ids = known.take(group)
            boundary_ids = ids[ranks[first:last] - smaller[first]]  # the boundary clients, by rank
            tier_rank[group] = first + np.searchsorted(boundary_ids, ids, side="right")
        # tier = number of boundary ranks c_t (with multiplicity over t) at or below the client's rank
        per_rank = np.bincount(-(-np.arange(1, tiers) * m // tiers), minlength=m + 1)[ranks]
        counted = np.concatenate([[0], np.cumsum(per_rank)])
        out[known] = counted[tier_rank]
        return out

    @staticmethod
    def tier_probabilities(tier_loss: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """Algorithm 2's ``ChangeProbs`` over the ``n`` ``allowed`` tiers (those with credits
        left): ranked by mean loss (rank 0: highest loss; ties by tier index; NaN loss ranks
        last), the tier of rank ``j`` gets ``(n - j) / (n (n + 1) / 2)``; the others 0."""
        m = tier_loss.shape[0]
        tiers = np.flatnonzero(allowed)
        n = tiers.shape[0]
        key = np.where(np.isnan(tier_loss[tiers]), -np.inf, tier_loss[tiers])
        out = np.zeros(m)
        out[tiers[np.lexsort((tiers, -key))]] = (n - np.arange(n)) / (n * (n + 1) / 2)
        return out

    def _new_round(self, view: SelectionView) -> None:
        p: TiFLParams = self.params
        if self.tier_of is None or self.rounds_seen % p.interval == 0:
            self.tier_of = self.tiers_from(view.mean_duration(), p.tiers)
            # each tier's clients in id order (one stable counting sort), kept until the next re-tiering
            order = np.argsort(self.tier_of.astype(np.int16 if p.tiers < 32767 else np.int32), kind="stable")
            bounds = np.cumsum(np.bincount(self.tier_of + 1, minlength=p.tiers + 1))
            self.members = [order[bounds[t]:bounds[t + 1]] for t in range(p.tiers)]
            if self.rounds_seen > 0:
                tier_loss = np.full(p.tiers, np.nan)
                loss = view.last_loss
                for t in range(p.tiers):
                    members = loss.take(self.members[t])
                    members = members[~np.isnan(members)]
                    if members.shape[0]:
                        tier_loss[t] = members.mean()
                allowed = self.credits != 0
                self.probs = self.tier_probabilities(tier_loss, allowed if allowed.any() else ~allowed)
        self.rounds_seen += 1

    def select(self, view: SelectionView, candidates: np.ndarray, k: int) -> np.ndarray:
        p: TiFLParams = self.params
        if view.round != self.current_round:
            self._new_round(view)
            self.current_round = view.round
        assert self.tier_of is not None
        whole = candidates.shape[0] == view.num_clients  # sorted distinct ids: every client
        fresh = np.flatnonzero(np.isnan(view.last_duration if whole else view.last_duration.take(candidates)))
        if fresh.shape[0]:  # profiling: unprofiled candidates first
            if not whole:
                fresh = candidates.take(fresh)
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
        if whole:
            members = self.members[tier]
        else:
            members = candidates.take(np.flatnonzero(self.tier_of.take(candidates) == tier))
        take = self.rng.choice(members, size=min(k, members.shape[0]), replace=False)
        return self._fill(candidates, take, k)

    def _fill(self, candidates: np.ndarray, taken: np.ndarray, k: int) -> np.ndarray:
        if taken.shape[0] >= k:
            return taken
        rest = candidates[~np.isin(candidates, taken)]
        return np.concatenate([taken, self.rng.choice(rest, size=k - taken.shape[0], replace=False)])
