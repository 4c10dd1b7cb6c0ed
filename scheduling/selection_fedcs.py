"""FedCS: client selection within a deadline from disclosed resources (Nishio and
Yonetani, "Client Selection for Federated Learning with Heterogeneous Resources in Mobile
Edge", ICC 2019, Sec. III, Algorithm 2).

Every choice, stated:

* **Resource request** (Sec. III-B, step 2): a random ``request_fraction`` of the idle,
  available clients (at least ``K``; all by default) tell the server their resources. Here
  they do so only if the scenario says so (``selection.disclose: [resources]``); the server
  then estimates each one's download + training time ``T_UD`` and upload time ``T_UL`` with
  the clock's own formula from its compute speed, link and the task's declared bytes and
  work (:class:`~fedclock.scheduling.selection.Disclosed`).
* **Greedy fit** (Alg. 2): with ``Theta`` the time the scheduled uploads end (0 at first),
  repeatedly take the remaining client maximising ``1 / (T_UL + max(0, T_UD - Theta))``
  (the smallest increment, ties by client id), and keep it if ``Theta' = Theta + T_UL +
  max(0, T_UD - Theta)`` is within the deadline, else discard it; stop when ``K`` are kept
  or none is left (after the first discard none can fit, as ``Theta`` did not change, so the
  loop stops there). Uploads are planned one after another (the paper's shared channel,
  ``sequential_uploads: true``); with ``false`` they are planned in parallel, as the clock
  simulates them, and a client is kept when its own ``T_UD + T_UL`` fits.
* **Deadline**: ``deadline_s`` if set, else the sync round's ``mode.deadline_s`` (the loader
  requires one of them).
* When no client fits, the fastest one (smallest ``T_UD + T_UL``) is chosen alone, so the
  round is not empty (the paper leaves this case open).
"""
from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from fedclock.scheduling.model_base import PositiveFloat, StrictModel
from fedclock.scheduling.selection import SelectionView, Selector


class FedCSParams(StrictModel):
    """Settings of :class:`FedCS`."""

    request_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    deadline_s: PositiveFloat | None = Field(default=None, description="default: mode.deadline_s")
    sequential_uploads: bool = True


class FedCS(Selector):
    """FedCS (Nishio and Yonetani, ICC 2019); the rules are the module's."""

    Params = FedCSParams
    needs = ("resources",)

    def select(self, view: SelectionView, candidates: np.ndarray, k: int) -> np.ndarray:
        p: FedCSParams = self.params
        asked = candidates
        if p.request_fraction < 1.0:
            n = min(candidates.shape[0], max(k, int(np.ceil(p.request_fraction * candidates.shape[0]))))
            asked = np.sort(self.rng.choice(candidates, size=n, replace=False))
        res = view.resources
        assert res.download_s is not None and res.expected_duration_s is not None and res.upload_s is not None
        deadline = p.deadline_s if p.deadline_s is not None else view.deadline_s
        assert deadline is not None  # the loader requires one
        t_ul = res.upload_s[asked]
        t_ud = res.expected_duration_s[asked] - t_ul
        return self.greedy(asked, t_ud, t_ul, deadline, k, p.sequential_uploads)

    @staticmethod
    def greedy(clients: np.ndarray, t_ud: np.ndarray, t_ul: np.ndarray, deadline: float, k: int,
               sequential: bool = True) -> np.ndarray:
        """Algorithm 2 over ``clients`` (see the module); returns the kept clients in the
        order they were kept."""
        if not sequential:
            total = t_ud + t_ul
            order = np.lexsort((clients, total))
            fit = order[total[order] <= deadline][:k]
            return clients[fit] if fit.shape[0] else clients[order[:1]]
        left = np.ones(clients.shape[0], dtype=bool)
        kept: list[int] = []
        theta = 0.0
        while len(kept) < k and left.any():
            increment = np.where(left, t_ul + np.maximum(0.0, t_ud - theta), np.inf)
            x = int(np.argmin(increment))  # the first minimum: clients are in id order
            left[x] = False
            if theta + increment[x] > deadline:
                break  # Theta is unchanged, so every other client's increment is at least as large: none fits
            theta += float(increment[x])
            kept.append(x)
        if not kept:
            kept = [int(np.lexsort((clients, t_ud + t_ul))[0])]
        return clients[np.array(kept, dtype=np.int64)]
