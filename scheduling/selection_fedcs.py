"""FedCS: client selection within a deadline from disclosed resources (Nishio and
Yonetani, "Client Selection for Federated Learning with Heterogeneous Resources in Mobile
Edge", ICC 2019, Sec. III, Algorithm 2).

The paper is not in this project's papers folder and its authors published no code (none
was found), so the rules below are read from the paper's Algorithm 2 alone. Every choice,
stated:

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

**Cost at a million clients.** The loop as written rescans every client at each of its
``K`` steps; :meth:`FedCS.greedy` runs the same steps on a shortlist that provably holds
every client the loop can keep (see there), so a decision is a few linear passes plus
``K`` passes over a few ``K`` clients; ``tests/scheduling/test_selection_arrays.py``
checks it against the loop as written.
"""
from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from fedclock.scheduling.model_base import PositiveFloat, StrictModel
from fedclock.scheduling.selection import SelectionView, Selector
from fedclock.scheduling.selection_arrays import smallest


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
        """Algorithm 2 over ``clients`` (in increasing id order; see the module); returns the
        kept clients in the order they were kept.

        The result is the straightforward loop's (every step scans every client left), found
        on a shortlist that provably holds every client that loop would keep, so a decision
        costs about ``K`` passes over a few ``K`` clients instead of ``K`` passes over all:

        * a client whose ``T_UD + T_UL`` exceeds the deadline can never be kept (``Theta +
          increment >= T_UD + T_UL``); when the loop's choice is such a client it stops, and
          so does the shortlist's (its best increment is no smaller, so it does not fit
          either). The cut is taken with a relative margin of 1e-9 against rounding.
        * with ``r`` clients still to keep and the increments ``inc_i(Theta)`` of the clients
          left, let ``v`` be the ``r``-th smallest: an increment never grows as ``Theta``
          grows, and at most ``r - 1`` of those ``r`` clients are taken before the last
          step, so every later step's least increment is at most ``v``; a client's increment
          is at least its ``T_UL``, so a client with ``T_UL > v`` is never chosen again and
          leaves the shortlist (at the first step ``inc = T_UD + T_UL``).
        """
        total = t_ud + t_ul
        if not total.shape[0]:
            return clients[:0]
        if not sequential:
            fit = np.flatnonzero(total <= deadline)
            if not fit.shape[0]:
                return clients[smallest(total, clients, 1)]
            return clients[fit[smallest(total[fit], clients[fit], k)]]
        prune = bool(t_ud.min() >= 0 and t_ul.min() >= 0)  # else (or NaN) outside the proofs: scan all
        if prune:
            fits = total <= deadline * (1 + 1e-9)
            if k < total.shape[0]:  # the first step's shrink (increments are the totals), on the full arrays
                fits &= t_ul <= np.partition(total, k - 1)[k - 1]
            short = np.flatnonzero(fits)
        else:
            short = np.arange(total.shape[0])
        ul, ud = t_ul[short], t_ud[short]
        kept: list[int] = []
        theta = 0.0
        while len(kept) < k and short.shape[0]:
            increment = ul + np.maximum(0.0, ud - theta)
            left = k - len(kept)
            if prune and short.shape[0] > 4 * left + 64:  # drop the clients no later step can choose
                bound = np.partition(increment, left - 1)[left - 1]
                keep = np.flatnonzero(ul <= bound)
                short, ul, ud, increment = short[keep], ul[keep], ud[keep], increment[keep]
            x = int(np.argmin(increment))  # the first minimum: clients are in id order
            if theta + increment[x] > deadline:
                break  # Theta is unchanged, so every other client's increment is at least as large: none fits
            theta += float(increment[x])
            kept.append(int(short[x]))
            short, ul, ud = np.delete(short, x), np.delete(ul, x), np.delete(ud, x)
        if not kept:
            return clients[smallest(total, clients, 1)]
        return clients[np.array(kept, dtype=np.int64)]
