"""Power-of-choice selection (Cho, Wang, Joshi, "Towards Understanding Biased Client
Selection in Federated Learning", AISTATS 2022, Sec. 4, Algorithm 1).

Every choice, stated:

* **Candidates** (Alg. 1, step 1): ``d`` distinct clients drawn without replacement among
  the idle, available ones with probability proportional to their data size ``p_k`` (the
  paper assumes the server knows the data fractions; here the scenario must disclose them,
  ``selection.disclose: [data_size]``). ``d`` defaults to ``2 K`` and is capped at the
  number of candidates; ``d = K`` makes the choice the plain size-weighted draw (the
  ablation).
* **Choice** (Alg. 1, step 3): the ``K`` candidates with the highest local loss. The paper's
  ``pow-d`` asks each candidate for its loss on the current global model; that costs a
  forward pass per candidate that fedclock does not simulate, so this is the paper's
  communication- and computation-free variant ``rpow-d`` (Sec. 5): the loss each client
  last reported with an applied result. A client that never reported counts as having the
  highest loss (inf; it is tried first); ties are broken by the candidates' draw order.
"""
from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from fedclock.scheduling.model_base import StrictModel
from fedclock.scheduling.selection import SelectionView, Selector


class PowerOfChoiceParams(StrictModel):
    """Settings of :class:`PowerOfChoice`."""

    d: Annotated[int, Field(ge=1)] | None = Field(default=None, description="candidates per choice; default 2 K")


class PowerOfChoice(Selector):
    """``rpow-d`` of Cho et al. (AISTATS 2022); the rules are the module's."""

    Params = PowerOfChoiceParams
    reads_loss = True
    needs = ("data_size",)

    def select(self, view: SelectionView, candidates: np.ndarray, k: int) -> np.ndarray:
        d = self.params.d if self.params.d is not None else 2 * k
        d = max(k, min(d, candidates.shape[0]))
        sizes = view.disclosed_data_size
        assert sizes is not None  # the loader requires the disclosure
        weights = sizes[candidates].astype(np.float64)
        prob = weights / weights.sum() if np.count_nonzero(weights) >= d else None
        drawn = self.rng.choice(candidates, size=d, replace=False, p=prob)
        return self.highest_loss(view.last_loss[drawn], drawn, k)

    @staticmethod
    def highest_loss(loss: np.ndarray, drawn: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` of ``drawn`` with the highest loss (NaN: never reported, counts as
        inf), ties by position in ``drawn``."""
        key = np.where(np.isnan(loss), np.inf, loss)
        order = np.argsort(-key, kind="stable")
        return drawn[order[:k]]
