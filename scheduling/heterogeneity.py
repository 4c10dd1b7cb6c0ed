"""Incomplete work and lost connections: how many local steps a task runs, and whether its
result ever comes back.

The clock asks :class:`WorkAndLinks` at dispatch:

* :meth:`WorkAndLinks.steps` — how many of the algorithm's ``K`` local steps the task runs
  (full work, a fixed share, a random share per task or per client, or as many as fit in a
  time budget given the client's device speed). The task's virtual duration is then
  computed from that number of steps, and the task carries it to the client.
* :meth:`WorkAndLinks.loses` — whether the client loses its connection during the task
  (probability per task, or a failure rate per virtual second of task time).

Each answer is the client's variant's own (``Completeness.steps``, ``Connectivity.loses`` in
:mod:`fedclock.scheduling.completeness_connectivity`); this class only finds each client's
variant. Every draw comes from a generator seeded by (scenario seed, stream, client, task
index) (``per: client`` shares: (seed, stream, client)), so the answers do not depend on the
order in which they are asked, the number of actors, or Ray's scheduling.
"""
from __future__ import annotations

import math
from typing import Callable

from fedclock.scheduling.completeness_connectivity import (CompletenessConfig, ConnectivityConfig, Duration,
                                                           TaskDraws, steps_for_share, steps_within)
from fedclock.scheduling.modes import AsyncMode, SyncMode
from fedclock.scheduling.population import PopulationConfig

__all__ = ["Duration", "TimeoutTooShort", "WorkAndLinks", "steps_for_share", "steps_within"]


class TimeoutTooShort(ValueError):
    """``mode.task_timeout_s`` is shorter than any task could take (a user's mistake)."""


class WorkAndLinks:
    """Completeness and connectivity of every client of a population.

    Per-client settings come from ``population.clients`` overrides, the rest use the
    population defaults (stored once, so a huge population costs only its overrides).
    """

    def __init__(self, population: PopulationConfig, mode: SyncMode | AsyncMode, seed: int) -> None:
        self.seed = seed
        self.default_completeness: CompletenessConfig = population.completeness
        self.default_connectivity: ConnectivityConfig = population.connectivity
        self.completeness_of: dict[int, CompletenessConfig] = {}
        self.connectivity_of: dict[int, ConnectivityConfig] = {}
        for group in population.clients:
            for cid in group.ids:
                if group.completeness is not None:
                    self.completeness_of[cid] = group.completeness
                if group.connectivity is not None:
                    self.connectivity_of[cid] = group.connectivity
        self.round_deadline_s = mode.round_deadline_s
        self.timeout_s: float | None = mode.task_timeout_s

    def completeness(self, client: int) -> CompletenessConfig:
        return self.completeness_of.get(client, self.default_completeness)

    def connectivity(self, client: int) -> ConnectivityConfig:
        return self.connectivity_of.get(client, self.default_connectivity)

    # ------------------------------------------------------------------ completeness
    def steps(self, client: int, client_task: int, full: int, duration: Duration) -> int:
        """Local steps task ``client_task`` of ``client`` runs, out of the algorithm's
        ``full`` count; ``duration(steps)`` gives the task's total virtual seconds."""
        cfg = self.completeness(client)
        fixed = cfg.fixed_steps(full)
        if fixed is not None:
            return fixed
        return cfg.steps(full, duration, TaskDraws(self.seed, client, client_task), self.round_deadline_s)

    def fewest_steps(self, client: int, full: int) -> int:
        """A lower bound on the steps any task of ``client`` runs."""
        return self.completeness(client).fewest_steps(full)

    # ------------------------------------------------------------------ connectivity
    def loses(self, client: int, client_task: int, duration_s: float) -> bool:
        """Whether task ``client_task`` of ``client``, lasting ``duration_s`` virtual
        seconds, loses its connection before its result reaches the server."""
        cfg = self.connectivity(client)
        return cfg.can_lose() and cfg.loses(duration_s, TaskDraws(self.seed, client, client_task))

    def check_timeout(self, num_clients: int, full_steps: Callable[[int], int],
                      duration: Callable[[int, int], float]) -> None:
        """Raise :class:`TimeoutTooShort` when no task of any client could ever come back
        within ``mode.task_timeout_s`` (a run that would never make progress);
        ``duration(client, steps)`` is the task's total virtual seconds."""
        if self.timeout_s is None or num_clients == 0:
            return
        fastest = math.inf
        for c in range(num_clients):
            fastest = min(fastest, duration(c, self.fewest_steps(c, full_steps(c))))
            if fastest <= self.timeout_s:
                return
        if fastest > self.timeout_s:
            raise TimeoutTooShort(f"mode.task_timeout_s: {self.timeout_s:g} s is shorter than the fastest possible "
                                  f"task ({fastest:.4g} s), so no result could ever come back; raise it")
