"""Who took part: participation metrics of a run (per evaluation row and per client).

* ``participation_jain``: Jain's fairness index of the clients' participation counts
  ``x_i`` (tasks dispatched to client ``i`` that have ended so far): ``(sum x)^2 / (n sum x^2)``
  (Jain, Chiu, Hawe, DEC-TR-301, 1984), 1 when every client took part equally, ``1/n`` when
  one client did everything (1 before any task ended);
* ``never_picked_fraction``: the share of clients with no task so far;
* ``data_seen_fraction``: the share of the training samples held by clients with at least
  one applied result;
* ``wasted_compute_s``: virtual compute seconds whose results were not used: the whole
  compute time of dropped and timed-out tasks, and the compute time a cancelled task had
  spent until its cancellation (its time since dispatch minus its download, within
  ``[0, compute_s]``). Lost tasks are not counted (their compute is unknown to the server).
"""
from __future__ import annotations

import numpy as np

from fedclock.scheduling.clock import APPLIED, CANCELLED, DROPPED, TIMED_OUT, Task


def jain_index(counts: np.ndarray) -> float:
    """Jain's fairness index of ``counts`` (1.0 for all zeros)."""
    x = np.asarray(counts, dtype=np.float64)
    square_sum = float(np.dot(x, x))
    if square_sum == 0.0:
        return 1.0
    return float(x.sum() ** 2 / (x.shape[0] * square_sum))


def wasted_compute(task: Task) -> float:
    """Compute seconds of ``task`` that produced no used result (see the module)."""
    t = task.timing
    if task.status in (DROPPED, TIMED_OUT):
        return float(t.compute_s)
    if task.status == CANCELLED and task.ended_at is not None:
        spent = task.ended_at - task.dispatched_at - t.download_s
        return float(min(max(spent, 0.0), t.compute_s))
    return 0.0


class Participation:
    """Running participation counts over a run's ended tasks."""

    def __init__(self, client_sizes: np.ndarray) -> None:
        self.sizes = np.asarray(client_sizes, dtype=np.float64)
        n = self.sizes.shape[0]
        self.tasks = np.zeros(n, dtype=np.int64)
        self.applied = np.zeros(n, dtype=np.int64)
        self.wasted_s = 0.0
        self.cancelled = 0

    def ended(self, task: Task) -> None:
        self.tasks[task.client] += 1
        if task.status == APPLIED:
            self.applied[task.client] += 1
        self.cancelled += int(task.status == CANCELLED)
        self.wasted_s += wasted_compute(task)

    def row(self) -> dict[str, float]:
        """The metrics row's participation columns."""
        n = self.tasks.shape[0]
        total = float(self.sizes.sum())
        return {"participation_jain": jain_index(self.tasks),
                "never_picked_fraction": float(np.count_nonzero(self.tasks == 0) / n) if n else 0.0,
                "data_seen_fraction": float(self.sizes[self.applied > 0].sum() / total) if total else 0.0,
                "wasted_compute_s": self.wasted_s, "tasks_cancelled": self.cancelled}
