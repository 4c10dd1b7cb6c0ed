"""Who is picked: the run's selection, a room of the clock (:class:`~fedclock.scheduling.clock.Clock`).

:class:`Cohorts` owns everything that decides which idle client a task goes to: the idle
finder (:mod:`fedclock.scheduling.candidates`, idle and available clients by rank), the
seeded cohort stream, feasibility (a client whose device cannot fit the task is never
available), the selector (``selection:``, :mod:`fedclock.scheduling.selection`) with the
history it reads and what the server discloses to it, and the over-commitment quota of the
current sync round. The clock asks it for a sync cohort (:meth:`Cohorts.sample`), an async
slot's client (:meth:`Cohorts.pick_idle`) or a window's clients (:meth:`Cohorts.pick_for_window`),
and tells it what happened to each pick (the history's counters).
"""
from __future__ import annotations

from typing import Collection, Protocol, Sequence, cast

import numpy as np

from fedclock.scheduling.availability import Availability, DiurnalClients, Never
from fedclock.scheduling.candidate_set import Candidates
from fedclock.scheduling.candidates import idle_clients
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.rank_draws import RankDraws
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.selection import ClientHistory, Disclosed, SelectionView, Selector, checked_choice
from fedclock.scheduling.task import Task
from fedclock.scheduling.task_planning import TaskPlanner

NEVER = Never()
"""The availability of an infeasible client."""

__all__ = ["CohortRule", "Cohorts", "NEVER", "UploadBudget"]


class CohortRule(Protocol):
    """A sync mode's cohort rule (:meth:`~fedclock.scheduling.modes.SyncMode.cohort_rule`)."""

    def cohort_rule(self, num_clients: int) -> tuple[int, int | None]: ...


class Cohorts:
    """The selection of the run's clients (module docstring)."""

    def __init__(self, *, planner: TaskPlanner, availability: Sequence[Availability], busy: BusyClients,
                 now: float, seed: int, selector: Selector | None = None, disclose: Collection[str] = (),
                 feasible: np.ndarray | None = None, deadline_s: float | None = None) -> None:
        self.planner = planner
        self.num_clients = len(planner.client_size)
        self.feasible: np.ndarray = (np.ones(self.num_clients, dtype=bool) if feasible is None
                                     else np.asarray(feasible, dtype=bool))
        """Per client: whether its device can fit the task (its memory covers the task's
        peak training memory). An infeasible client is never idle and available, so no
        protocol or selector ever dispatches it; selectors may read this array."""
        if not self.feasible.all():
            availability = cast(Sequence[Availability], availability.without(~self.feasible)) \
                if isinstance(availability, DiurnalClients) else \
                [model if ok else NEVER for model, ok in zip(availability, self.feasible.tolist())]
        self.availability = availability
        self.busy = busy
        self.ranks = RankDraws(numpy_rng(seed, Stream.COHORT))
        """The cohort stream: slot picks draw their ranks from it in batches (:attr:`rng` for
        every other draw)."""
        self.idle = idle_clients(availability, busy, now)
        """Idle, available clients by rank (:mod:`fedclock.scheduling.candidates`)."""
        self.selector = selector
        """Who trains (``selection:``); None: uniform draws from the cohort stream."""
        self.history = ClientHistory(self.num_clients) if selector is not None else None
        """What the server observed of each client (kept only for a selector)."""
        self.disclose = frozenset(disclose)
        self.deadline_s = deadline_s
        """The sync round's deadline the selector's view shows (None: none)."""
        self.quota: int | None = None
        """Over-commitment: results the current sync round waits for (None: every task's)."""

    @property
    def rng(self) -> np.random.Generator:
        """The cohort stream's generator, in the state one-at-a-time draws would have left it
        in (ranks the slot picks drew ahead are given back first)."""
        return self.ranks.generator()

    # ------------------------------------------------------------------ picks
    def sample(self, rule: CohortRule, now: float, round_index: int, version: int) -> list[int]:
        """A sync round's cohort: idle, available clients, sampled without replacement (or
        the selector's), in client-id order; sets :attr:`quota`."""
        want, quota = rule.cohort_rule(self.num_clients)
        idle = self.idle.count(now, round_index)
        if idle <= want:
            cohort = self.idle.at_many(range(idle))
        elif self.selector is not None:
            cohort = self._select(idle, want, round_index, now, version)
        else:
            cohort = sorted(self.idle.at_many(self.rng.choice(idle, size=want, replace=False)))
        self.quota = min(quota, len(cohort)) if quota is not None else None
        return cohort

    def pick_idle(self, now: float, version: int) -> int | None:
        """A uniformly random idle, available client (or the selector's), or None."""
        idle = self.idle.count(now, version)
        if self.selector is not None and idle > 1:
            return self._select(idle, 1, version, now, version)[0]
        return self.idle.at(self.ranks.below(idle)) if idle else None

    def pick_for_window(self, limit: int, now: float, round_index: int, version: int) -> list[int] | None:
        """Windowed aggregation: the idle, available clients the selector sends the model to
        at a window close (``limit`` at most), in client-id order; None without a selector
        (the protocol then fills the slots lowest id first)."""
        if self.selector is None:
            return None
        idle = self.idle.count(now, round_index)
        if idle <= limit:
            return self.idle.at_many(range(idle))
        return self._select(idle, limit, round_index, now, version)

    def _select(self, idle: int, k: int, round_index: int, now: float, version: int) -> list[int]:
        """``k`` (or fewer) of the ``idle`` candidates (``0 < k < idle``), by the selector (given
        them as a :class:`~fedclock.scheduling.candidate_set.Candidates` when it accepts
        that, else as an array)."""
        selector = self.selector
        assert selector is not None
        lazy = Candidates(self.idle, idle, self.num_clients)
        candidates = lazy if selector.lazy_candidates else lazy.array()
        chosen = selector.select(self.view(round_index, now, version), candidates, k)
        return checked_choice(chosen, candidates, k, type(selector).__name__).tolist()

    def candidates(self, idle: int) -> np.ndarray:
        """The idle, available clients of the last count (there are ``idle``), as an array
        (the finder's own listing when it has one: the index's marks in one C pass, not a
        lookup per candidate)."""
        return Candidates(self.idle, idle, self.num_clients).array()

    def view(self, round_index: int, now: float, version: int) -> SelectionView:
        """What the selector may see now (:class:`~fedclock.scheduling.selection.SelectionView`)."""
        assert self.history is not None
        sizes = self.planner.sizes() if "data_size" in self.disclose else None
        return SelectionView(self.history, now, round_index, version,
                             self._disclosed if "resources" in self.disclose else None, data_size=sizes,
                             deadline_s=self.deadline_s)

    def _disclosed(self) -> Disclosed:
        return self.planner.disclosed("data_size" in self.disclose)

    # ------------------------------------------------------------------ what happened to the picks
    def picked(self, client: int, now: float, index: int) -> None:
        if self.history is not None:
            self.history.picked(client, now, index)

    def arrived(self, task: Task, applied: bool) -> None:
        """``task``'s result reached the server (applied, with its reported loss and samples, or dropped)."""
        if self.history is not None:
            self.history.arrived(task.client, task.finishes_at - task.dispatched_at,
                                 task.metrics.get("train_loss") if applied else None,
                                 task.num_samples if applied else None)

    def cancelled(self, task: Task) -> None:
        if self.history is not None:
            self.history.cancelled[task.client] += 1

    def gave_up(self, task: Task) -> None:
        if self.history is not None:
            (self.history.lost if task.lost else self.history.timed_out)[task.client] += 1


class Retire(Protocol):
    """Who retires clients (the script, :class:`~fedclock.scheduling.clock_ports.Script`)."""

    def retire(self, clients: Sequence[int], reason: str) -> None: ...


class UploadBudget:
    """Per client, the applied uploads after which it is retired (``script.retire``, with
    ``reason``): e.g. a privacy budget's uploads (:mod:`fedclock.scenarios.privacy_accounting`)."""

    def __init__(self, limit: Sequence[int], reason: str, script: Retire | None) -> None:
        assert script is not None, "an upload limit needs a script"
        self.limit = list(limit)
        self.reason = reason
        self.script = script
        self.applied: list[int] = [0] * len(self.limit)
        """Applied uploads of each client so far."""

    def spend(self, tasks: Sequence[Task]) -> None:
        """Count these applied uploads; the clients that reached their limit retire (in id order)."""
        applied, limit = self.applied, self.limit
        spent = []
        for t in tasks:
            applied[t.client] += 1
            if applied[t.client] == limit[t.client]:
                spent.append(t.client)
        if spent:
            self.script.retire(sorted(spent), self.reason)
