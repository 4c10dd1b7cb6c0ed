"""Oort's guided participant selection (Lai, Zhu, Madhyastha, Chowdhury, "Oort: Efficient
Federated Learning via Guided Participant Selection", OSDI 2021, Sec. 4).

The paper is not in this project's papers folder; where it leaves a detail open, the
authors' public selector settles it: FedScale's ``thirdparty/oort/oort.py`` (the Oort
training selector the authors maintain, SymbioticLab/FedScale) with its defaults in
``fedscale/cloud/config_parser.py``; the older SymbioticLab/Oort repository
(``core/argParser.py``) is cited where its defaults differ. Every choice, stated:

* **Statistical utility** of a client (Sec. 4.2, Eq. 1): ``U_i = |B_i| sqrt(1/|B_i| sum_k loss(k)^2)``.
  fedclock's clients report the mean training loss of their last task (``train_loss``) and
  its sample count, not per-sample losses, so ``sqrt(mean loss^2)`` is taken as the reported
  mean loss: ``U_i = samples_i x loss_i`` (exact when per-sample losses are equal; below the
  true root mean square otherwise). Only clients whose result was applied have a utility
  (*explored*); the others are *unexplored*.
* **Normalisation and clipping** (FedScale, ``get_norm``): utilities of the explored
  candidates are clipped at their ``clip_bound`` quantile (value of rank
  ``min(floor(n clip_bound), n - 1)`` in ascending order; ``clip_bound`` 0.9, FedScale's
  default) and scaled as ``(U - 0.999 U_min) / max(U_max - 0.999 U_min, 1e-4)``. Difference:
  FedScale also counts the unexplored clients' initial rewards (a size prior from device
  profiles) in ``U_min``, ``U_max`` and the quantile; here only reported utilities.
* **Staleness bonus** (Sec. 4.2, the confidence term; FedScale's form): ``+ sqrt(0.1 ln R /
  r_i)``, ``R`` the current round and ``r_i`` the round the client was last picked, both
  counted from 1 (a sync round, or the server version in async mode). FedScale stamps a
  client with the round its last result was registered; for a sync round's applied result
  that is the same round; a client whose last task was lost keeps, here, the round it was
  picked.
* **System penalty** (Sec. 4.3, Eq. 2): a client whose last observed task duration ``t_i``
  exceeds the preferred duration ``T`` has its score multiplied by ``(T / t_i)^alpha``
  (``round_penalty``, alpha 2 as in FedScale; the Oort repository's default is 0.5;
  ``alpha = 0`` turns the penalty off: the ablation). ``T`` is the duration of rank
  ``min(floor(n P / 100), n - 1)`` among the observed durations of all clients
  (ascending), ``P`` the pacer's percentile (``round_threshold``, starting at 30 as in
  FedScale; 100: no penalty; the Oort repository starts at 101, i.e. no penalty).
* **Pacer** (Sec. 4.3; FedScale's ``pacer``, :meth:`Oort.paced`): every round appends
  the mean utility of the clients the previous round exploited that have reported since
  (0 in the first round, as FedScale's first call appends); at round ``R`` (1-based) with
  ``R >= 2 pacer_step`` and ``R % pacer_step == 0`` the sums of the last two windows of
  ``pacer_step`` entries are compared: a change of at most 10 % widens ``P`` by
  ``pacer_delta`` (at most 100), a change of at least 5x narrows it by ``pacer_delta``
  (at least ``pacer_delta``). ``pacer_step`` 20 and ``pacer_delta`` 5 are FedScale's
  defaults (the Oort repository: 10 and a step that never comes).
* **Exploration** (Sec. 4.2): the exploration fraction ``e`` decays once per round,
  ``e = max(e decay, e_min)``, before the round's choice (``exploration_factor`` 0.9,
  ``exploration_decay`` 0.98, ``exploration_min`` 0.3: FedScale's defaults; the Oort
  repository's minimum is 0.2); ``floor(K e)`` clients are explored and the other ``K -
  floor(K e)`` exploited. When fewer unexplored candidates are left, the exploitation takes
  the rest, and when fewer explored ones are known, the exploration does (FedScale's
  selector returns a smaller cohort then; here the cohort keeps its size). Unexplored
  clients are drawn uniformly: FedScale ranks them by a speed and size prior taken from
  device profiles (its ``sample_window`` of 5 x the count, then a weighted draw), which a
  server does not know here. The uniform draw is defined over the candidates' ranks (0-based,
  client-id order), whatever the population's size:
  :func:`~fedclock.scheduling.rank_sample.distinct_ranks` with the ranks of the explored
  and capped candidates left out, i.e. ``j = rng.integers(0, A - arange(n))`` for the ``A``
  candidates open to exploration, and the ``i``-th client is the candidate of the
  ``j_i``-th open rank not drawn before. With ``selection.disclose: [data_size]`` they are
  drawn with probability proportional to data size instead (NumPy's weighted draw over the
  listed unexplored candidates: a pass over the candidates, kept as it was).
* **Exploitation** (Sec. 4.2, FedScale): candidates sorted by score; the cut-off is
  ``cut_off_util`` times the score of rank ``exploit`` (0-based); the pool is every candidate
  at or above it, extended in score order to at least ``10 exploit + 1`` clients; ``exploit``
  clients are drawn from the pool without replacement with probability proportional to score.
  Ties in score are broken by client id. ``cut_off_util`` is 0.95, the reading of the
  comment FedScale's setting carries ("95 percentile"); its value there is 0.05, which with
  the code's product admits every client above 5 % of the cut-off score (nearly all), and
  the Oort repository's default is 0.9. The paper (Sec. 4.2) samples among clients near
  the cut-off instead of taking the top K, without a number we could check (its text is
  not in this project).
* **Participation cap** (Sec. 4.2, the blacklist; FedScale's ``get_blacklist``): with
  ``blacklist_rounds >= 0`` clients with more than that many applied results (FedScale's
  ``count``, raised with each result it registers, not with each pick) are excluded, at
  most ``blacklist_max_len`` (0.3, FedScale's default) of the population, the most
  reported first (ties by id). ``blacklist_rounds`` -1 (no cap) is FedScale's default.
* When too few candidates remain after the cap, the rest is filled uniformly from the
  candidates not picked yet, capped ones included (so a cohort is never smaller than under
  ``uniform``): the same rank draw, with the picked candidates' ranks left out.
* **Explored** means an applied result that reported a loss: a client of the history's
  record of clients with an applied result (``view.explored``) whose ``last_loss`` is known;
  every other candidate is unexplored.

Randomness comes only from the selector's own generator, in this order per call: the
exploitation draw, then the exploration draw, then the fill.

**Cost.** A decision reads the explored clients and ``k`` candidates, not the population:
the candidates come as a :class:`~fedclock.scheduling.candidate_set.Candidates`
(:attr:`lazy_candidates`; an array is wrapped to give the same answers), the explored
candidates are the history's explored clients the candidates hold, the exploration and the
fill draw ranks around their ranks (no rejection loop), the participation cap reads the
explored clients only (over a cap of 0 or more means applied, so explored), and the
preferred duration is kept sorted from the arrivals since the last call (the history's
arrival record, :meth:`Oort._preferred`). Over the explored clients a decision is a few
dozen linear passes and two partial sorts (the clip value and the preferred duration), no
full sort: the staleness bonus is computed once per distinct round and looked up, and the
exploitation pool is found with :func:`~fedclock.scheduling.selection_arrays.largest`. With
``data_size`` disclosed the weighted exploration lists the candidates
(:func:`~fedclock.scheduling.selection_arrays.weighted_draw`, NumPy's draw, the same
clients). ``benchmarks/selection.py`` and ``benchmarks/scale.py --population-only
--selection oort`` measure it (``benchmarks/RESULTS.md``, "Ten million clients").
"""
from __future__ import annotations

import math
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from fedclock.scheduling import oort_rules
from fedclock.scheduling.candidate_set import Candidates
from fedclock.scheduling.model_base import NonNegativeFloat, StrictModel
from fedclock.scheduling.rank_sample import distinct_ranks
from fedclock.scheduling.selection import SelectionView, Selector
from fedclock.scheduling.selection_arrays import largest, weighted_draw


class OortParams(StrictModel):
    """Settings of :class:`Oort` (see the module for what each does)."""

    exploration_factor: Annotated[float, Field(ge=0, le=1)] = 0.9
    exploration_decay: Annotated[float, Field(gt=0, le=1)] = 0.98
    exploration_min: Annotated[float, Field(ge=0, le=1)] = 0.3
    round_penalty: NonNegativeFloat = Field(default=2.0, description="alpha of the system penalty (T/t)^alpha; 0: off")
    round_threshold: Annotated[float, Field(gt=0, le=100)] = Field(
        default=30.0, description="initial percentile of observed durations taken as the preferred duration T")
    pacer_step: Annotated[int, Field(ge=1)] = 20
    pacer_delta: Annotated[float, Field(ge=0, le=100)] = 5.0
    cut_off_util: Annotated[float, Field(ge=0, le=1)] = 0.95
    clip_bound: Annotated[float, Field(gt=0, le=1)] = 0.9
    blacklist_rounds: Annotated[int, Field(ge=-1)] = Field(default=-1, description="participation cap; -1: none")
    blacklist_max_len: Annotated[float, Field(ge=0, le=1)] = 0.3


class Oort(Selector):
    """Oort (Lai et al., OSDI 2021); the rules are the module's."""

    Params = OortParams
    reads_loss = True
    lazy_candidates = True

    def __init__(self, params: Any, rng: np.random.Generator) -> None:
        super().__init__(params, rng)
        p: OortParams = params
        self.exploration = p.exploration_factor
        self.threshold = p.round_threshold
        self.current_round = -1
        self.exploit_history: list[float] = []
        """Per round: mean utility of the previous round's exploited clients that reported."""
        self.exploited: np.ndarray = np.zeros(0, dtype=np.int64)
        """The clients the last round exploited ..."""
        self.exploited_applied: np.ndarray = np.zeros(0, dtype=np.int64)
        """... and how many of their results had been applied when they were picked."""
        self._log_seen = 0
        """Arrivals of the view's record read so far ..."""
        self._sorted_durations = np.zeros(0)
        """... and the known durations as of them, in ascending order (:meth:`_preferred`)."""

    # the rules, one by one (:mod:`fedclock.scheduling.oort_rules`)
    utility = staticmethod(oort_rules.utility)
    staleness_bonus = staticmethod(oort_rules.staleness_bonus)
    system_penalty = staticmethod(oort_rules.system_penalty)
    preferred_duration = staticmethod(oort_rules.preferred_duration)
    split = staticmethod(oort_rules.split)
    paced = staticmethod(oort_rules.paced)

    def _new_round(self, view: SelectionView) -> None:
        p: OortParams = self.params
        utility = 0.0  # the first round: no exploited clients yet (FedScale appends 0 too)
        if self.exploited.shape[0]:
            done = self.exploited[view.applied[self.exploited] > self.exploited_applied]  # reported since picked
            utils = self.utility(view.last_samples[done], view.last_loss[done])
            utility = float(utils.sum() / (done.shape[0] + 1e-4))
        self.exploit_history.append(utility)
        self.threshold = self.paced(self.exploit_history, self.threshold, p.pacer_step, p.pacer_delta)
        self.exploration = max(self.exploration * p.exploration_decay, p.exploration_min)

    def capped_clients(self, view: SelectionView) -> np.ndarray:
        """The clients the participation cap excludes, in id order: those with more than
        ``blacklist_rounds`` applied results, at most ``blacklist_max_len`` of the population,
        the most reported first (ties by id); none without a cap. Only explored clients
        (``view.explored``) can be over a cap of 0 or more, so only they are read."""
        p: OortParams = self.params
        if p.blacklist_rounds < 0:
            return np.zeros(0, dtype=np.int64)
        explored = view.explored
        over = np.sort(explored[view.applied[explored] > p.blacklist_rounds])
        limit = int(p.blacklist_max_len * view.num_clients)
        if over.shape[0] > limit:
            order = np.lexsort((over, -view.applied[over]))
            over = np.sort(over[order[:limit]])
        return over

    def explored_candidates(self, view: SelectionView, pool: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """(the explored candidates the exploitation may pick, the candidates the exploration
        leaves out): of the history's clients with an applied result (``view.explored``, in
        that order), those ``pool`` holds whose loss is known, less the capped ones; and
        those with a known loss or capped. Reads the explored clients only."""
        listed = view.explored
        here = listed[pool.holds(listed)]  # explored clients among the candidates
        known = ~np.isnan(view.last_loss[here])
        capped = self.capped_clients(view)
        if not capped.shape[0]:
            explored = here[known]
            return explored, explored
        out = np.isin(here, capped)
        return here[known & ~out], here[known | out]

    # ------------------------------------------------------------------ the choice
    def select(self, view: SelectionView, candidates: np.ndarray | Candidates, k: int) -> np.ndarray:
        """The module's choice; ``candidates`` as an array or a
        :class:`~fedclock.scheduling.candidate_set.Candidates` (the same choice either way).
        Only the explored clients and ``k`` candidates are read: the explored candidates are
        the explored clients the candidates hold, the exploration's candidates are drawn by
        rank (:func:`~fedclock.scheduling.rank_sample.distinct_ranks`) around them."""
        p: OortParams = self.params
        if view.round != self.current_round:
            self._new_round(view)
            self.current_round = view.round
        pool = candidates if isinstance(candidates, Candidates) else Candidates.of_array(candidates,
                                                                                          view.num_clients)
        explored, closed = self.explored_candidates(view, pool)
        unexplored = pool.count - closed.shape[0]
        exploit_n, _ = self.split(k, self.exploration, explored.shape[0], unexplored)
        chosen: list[np.ndarray] = []
        if exploit_n > 0:
            scores = self.scores(view, explored)
            chosen.append(self._exploit(explored, scores, exploit_n, p.cut_off_util))
        picked = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        explore_n = min(k - picked.shape[0], unexplored)
        if explore_n > 0:
            picked = np.concatenate([picked, self._explore(view, pool, closed, explore_n)])
        if picked.shape[0] < k:  # too few unexplored (or left by the cap): fill uniformly
            ranks = distinct_ranks(self.rng, pool.count, pool.ranks(picked), k - picked.shape[0])
            picked = np.concatenate([picked, pool.at_many(ranks.tolist())])
        self.exploited = picked[:exploit_n].copy()
        self.exploited_applied = view.applied[self.exploited]
        return picked

    def scores(self, view: SelectionView, clients: np.ndarray) -> np.ndarray:
        """Each explored client's score: normalised clipped utility + staleness bonus, times
        the system penalty (computed in place over the clients' arrays: a handful of passes,
        one partial sort for the clip value and one for the preferred duration)."""
        p: OortParams = self.params
        score = self.utility(view.last_samples[clients], view.last_loss[clients])
        positive = score if score.shape[0] and score.min() > 0 else score.take(np.flatnonzero(score > 0))
        if positive.shape[0]:
            rank = min(int(positive.shape[0] * p.clip_bound), positive.shape[0] - 1)
            parted = np.partition(positive, rank)
            clip = float(parted[rank])
            low = float(parted[:rank + 1].min()) * 0.999
            span = max(float(parted[rank:].max()) - low, 1e-4)
        else:
            clip, low, span = 0.0, 0.0, 1e-4
        np.minimum(score, clip, out=score)
        score -= low
        score /= span
        score += self._bonus(view.round, view.last_picked_round[clients])
        preferred = self._preferred(view)
        if p.round_penalty != 0 and preferred != math.inf:  # (T / t)^0 = 1 and t > inf never: no change
            duration = view.last_duration[clients]
            slow = duration > preferred
            with np.errstate(invalid="ignore", divide="ignore"):
                penalty = np.divide(preferred, np.maximum(duration, 1e-4, out=duration), out=duration)
                np.power(penalty, p.round_penalty, out=penalty)
            np.multiply(score, penalty, out=score, where=slow)  # x 1 elsewhere
        return np.abs(score, out=score)

    def _preferred(self, view: SelectionView) -> float:
        """:meth:`preferred_duration` over the view's durations, from a sorted copy of the
        known durations kept up to date from the arrival record: a client's duration changes
        only when a result of it arrives, so each call reads the arrivals since the last one
        (``view.arrival_clients``; each changed client's duration before the first of them is
        beside it, ``view.arrival_previous``) and moves only those clients' entries (two
        linear memory moves of the sorted copy), never the population's arrays. The copy
        starts empty at the record's start (a shorter record than read: another history,
        read from its start)."""
        if self.threshold >= 100.0:
            return math.inf
        logged = view.arrival_clients.shape[0]
        if logged < self._log_seen:
            self._log_seen, self._sorted_durations = 0, np.zeros(0)
        if logged > self._log_seen:
            clients = view.arrival_clients[self._log_seen:]
            changed, first = np.unique(clients, return_index=True)
            old, new = view.arrival_previous[self._log_seen:][first], view.last_duration[changed]
            old, new = np.sort(old[~np.isnan(old)]), np.sort(new[~np.isnan(new)])
            held = self._sorted_durations
            # the k-th of equal old values sits k places after the first of them
            at = np.searchsorted(held, old) + (np.arange(old.shape[0]) - np.searchsorted(old, old))
            held = np.delete(held, at)
            self._sorted_durations = np.insert(held, np.searchsorted(held, new), new)
        self._log_seen = logged
        held = self._sorted_durations
        if not held.shape[0]:
            return math.inf
        return float(held[min(int(held.shape[0] * self.threshold / 100.0), held.shape[0] - 1)])

    def _bonus(self, current_round: int, last_round: np.ndarray) -> np.ndarray:
        """:meth:`staleness_bonus`, computed once per round from -1 (never picked) to
        ``current_round`` (a table of at most one entry per round so far) and looked up for
        each client (a round outside that range: computed directly)."""
        if current_round + 2 >= last_round.shape[0]:
            return self.staleness_bonus(current_round, last_round)
        rounds = np.arange(-1, current_round + 1, dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):  # round -1's entry (never picked) divides by 0
            table = np.roll(self.staleness_bonus(current_round, rounds), -1)  # round -1 last: index -1 finds it
        try:
            return table.take(last_round)
        except IndexError:
            return self.staleness_bonus(current_round, last_round)

    def _exploit(self, clients: np.ndarray, scores: np.ndarray, n: int, cut_off: float) -> np.ndarray:
        total_n = clients.shape[0]
        floor = min(10 * n + 1, total_n)  # the pool's least size
        top = largest(scores, clients, floor)  # the best ``floor`` by (score desc, id), in that order
        threshold = scores[top[min(n, total_n - 1)]] * cut_off
        above = np.flatnonzero(scores >= threshold)
        if above.shape[0] > floor:  # more at or above the cut-off than the least size: all of them
            top = above[np.lexsort((clients[above], -scores[above]))]
        pool, weights = clients[top], scores[top]
        total = weights.sum()
        prob = weights / total if total > 0 else None
        if prob is not None and np.count_nonzero(prob) < n:
            prob = None
        return self.rng.choice(pool, size=n, replace=False, p=prob)

    def _explore(self, view: SelectionView, pool: Candidates, closed: np.ndarray, n: int) -> np.ndarray:
        """``n`` distinct candidates outside ``closed`` (the explored and capped candidates),
        uniformly: :func:`~fedclock.scheduling.rank_sample.distinct_ranks` over the
        candidates' ranks, ``closed``'s ranks left out (reads ``n`` candidates and
        ``closed``, not the population). With ``selection.disclose: [data_size]`` the draw is
        weighted by data size instead, and that one lists the candidates (a pass over them)."""
        if view.disclosed_data_size is not None:
            everyone = pool.array()
            open_ = np.ones(everyone.shape[0], dtype=bool)
            open_[pool.ranks(closed)] = False
            clients = everyone[open_]
            sizes = view.disclosed_data_size[clients].astype(np.float64)
            if np.count_nonzero(sizes) >= n:  # rng.choice(clients, n, replace=False, p=...), the same draw
                return clients.take(weighted_draw(self.rng, sizes / sizes.sum(), n))
        ranks = distinct_ranks(self.rng, pool.count, pool.ranks(closed), n)
        return pool.at_many(ranks.tolist())
