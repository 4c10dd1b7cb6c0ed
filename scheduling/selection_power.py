"""Power-of-choice selection (Cho, Wang, Joshi, "Towards Understanding Biased Client
Selection in Federated Learning", AISTATS 2022, Sec. 4, Algorithm 1).

The paper is not in this project's papers folder and its authors' code is not public; the
Flower baseline that reproduces it (adap/flower, ``baselines/power_of_choice/power_of_choice/strategy.py``)
is the reference named below. Every choice, stated:

* **Candidates** (Alg. 1, step 1): ``d`` distinct clients drawn without replacement among
  the idle, available ones with probability proportional to their data size ``p_k`` (the
  paper assumes the server knows the data fractions; here the scenario must disclose them,
  ``selection.disclose: [data_size]``; the Flower baseline asks each client its data size
  and draws the same way). ``d`` defaults to ``2 K`` (fedclock's default: the paper treats
  ``d`` as the knob between convergence speed and bias and gives no single value) and is
  capped at the number of candidates; ``d = K`` makes the choice the plain size-weighted
  draw (the ablation). When fewer than ``d`` candidates hold data, they are drawn
  uniformly.
* **Choice** (Alg. 1, step 3): the ``K`` candidates with the highest local loss. The paper's
  ``pow-d`` asks each candidate for its loss on the current global model; that costs a
  forward pass per candidate that fedclock does not simulate, so this is the paper's
  communication- and computation-free variant ``rpow-d`` (Sec. 5): the loss each client
  last reported with an applied result (the Flower baseline's ``rpow`` variant keeps each
  client's latest loss the same way). A client that never reported counts as having the
  highest loss (inf; it is tried first); ties are broken by the candidates' draw order.

**Cost at a million clients.** The draw is NumPy's weighted draw without replacement
(:func:`~fedclock.scheduling.selection_arrays.weighted_draw`: the same clients from the
same random numbers) without its per-call argument checks, and the distribution is
accumulated once per distinct candidate set; the choice sorts only the ``d`` candidates.
"""
from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field

from fedclock.scheduling.model_base import StrictModel
from fedclock.scheduling.selection import SelectionView, Selector
from fedclock.scheduling.selection_arrays import first_cdf, weighted_draw


class PowerOfChoiceParams(StrictModel):
    """Settings of :class:`PowerOfChoice`."""

    d: Annotated[int, Field(ge=1)] | None = Field(default=None, description="candidates per choice; default 2 K")


class PowerOfChoice(Selector):
    """``rpow-d`` of Cho et al. (AISTATS 2022); the rules are the module's."""

    Params = PowerOfChoiceParams
    reads_loss = True
    needs = ("data_size",)

    def __init__(self, params: Any, rng: np.random.Generator) -> None:
        super().__init__(params, rng)
        self._cached: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None
        """(candidates, their draw probabilities, the draw's first cumulative distribution, how
        many hold data) of the last weighted draw: a run's data sizes never change, so the same candidates give the same
        distribution, and a round whose candidates are the last round's reuses it."""

    def select(self, view: SelectionView, candidates: np.ndarray, k: int) -> np.ndarray:
        d = self.params.d if self.params.d is not None else 2 * k
        d = max(k, min(d, candidates.shape[0]))
        sizes = view.disclosed_data_size
        assert sizes is not None  # the loader requires the disclosure
        drawn = self._draw(sizes, candidates, d)
        return self.highest_loss(view.last_loss[drawn], drawn, k)

    def _draw(self, sizes: np.ndarray, candidates: np.ndarray, d: int) -> np.ndarray:
        """``d`` candidates without replacement, with probability proportional to data size:
        ``rng.choice(candidates, d, replace=False, p=sizes / sizes.sum())`` (uniform when
        fewer than ``d`` candidates hold data), drawn by
        :func:`~fedclock.scheduling.selection_arrays.weighted_draw` (the same clients from
        the same random numbers, without re-checking and re-accumulating the distribution
        when the candidates did not change)."""
        cached = self._cached
        if cached is None or cached[0].shape != candidates.shape or not np.array_equal(cached[0], candidates):
            whole = candidates.shape[0] == sizes.shape[0]  # sorted distinct ids: every client
            weights = (sizes if whole else sizes.take(candidates)).astype(np.float64)
            holding = int(np.count_nonzero(weights))
            prob = weights / weights.sum() if holding else weights
            cached = self._cached = (candidates.copy(), prob, first_cdf(prob) if holding else prob, holding)
        if cached[3] < d:
            return self.rng.choice(candidates, size=d, replace=False)
        return candidates.take(weighted_draw(self.rng, cached[1], d, cached[2]))

    @staticmethod
    def highest_loss(loss: np.ndarray, drawn: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` of ``drawn`` with the highest loss (NaN: never reported, counts as
        inf), ties by position in ``drawn``."""
        key = np.where(np.isnan(loss), np.inf, loss)
        order = np.argsort(-key, kind="stable")
        return drawn[order[:k]]
