"""Client tasks on their way to the executors: which executor, alone or in a group, and
their reports fetched (re-run when an executor dies).

With pooled placement the tasks started at one virtual instant are held back and sent when
the session next needs a result, a release or an evaluation, or a task starts at a later
instant (:mod:`fedclock.actors.grouping`): with ``vectorize`` K > 1 in groups of at most K to
``train_many`` (vectorized clients), otherwise (Ray only) in one group per executor (or
groups of at most ``tasks_per_call``; 1 sends each task at once) to ``train_each``, which
runs them one by one as ``train`` would. A group whose executor died is re-run whole, so
every member gets the numbers it had. Tasks restarted from a checkpoint are grouped among
themselves, so a resumed vectorized run equals the uninterrupted one within float rounding
(bit for bit without vectorizing).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedclock.actors.calls import ActorCalls
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.actors.grouping import InstantGroups
from fedclock.actors.task_io import TaskInputs, TaskReport, TaskResults
from fedclock.actors.transport import InlineTransport


@dataclass(eq=False)
class InFlight:
    """A client task sent (or about to be sent) to an executor: its inputs (held here, so a
    lost executor costs only a re-run) and the handles of its results (None until sent)."""

    slot: int
    inputs: TaskInputs
    results: TaskResults | None = None
    group: list["InFlight"] | None = None
    """The tasks sent in one call with this one, itself included."""

    def handles(self) -> TaskResults:
        """The handles of its results (it must have been sent)."""
        assert self.results is not None, "task not sent yet"
        return self.results


class Launcher:
    """Sends client tasks to the executors, one by one or in groups."""

    def __init__(self, calls: ActorCalls, groups: InstantGroups[InFlight] | None = None,
                 group_method: str = "train_each", dedicated: bool = False) -> None:
        self.calls = calls
        self.groups = groups
        self.group_method = group_method
        """``train_many`` (vectorized) or ``train_each`` (one by one)."""
        self.dedicated = dedicated
        """Each client has its own executor (the slot is the client id)."""

    def launch(self, inputs: TaskInputs, at: float) -> InFlight:
        """Start a task dispatched at virtual time ``at`` (held back when grouping)."""
        calls = self.calls
        if self.groups is not None:
            running = InFlight(-1, inputs)
            self._start_groups(self.groups.add(at, running))
            return running
        slot = inputs.client if self.dedicated else calls.least_loaded()
        calls.load[slot] += 1
        return InFlight(slot, inputs, calls.train(slot, inputs))

    def flush(self) -> None:
        """Send every held-back task to the executors."""
        if self.groups is not None and len(self.groups):
            self._start_groups(self.groups.flush())

    def _start_groups(self, groups: list[list[InFlight]]) -> None:
        """Each group to the least loaded executor."""
        for group in groups:
            slot = self.calls.least_loaded()
            self.calls.load[slot] += len(group)
            for running in group:
                running.slot, running.group = slot, group
            self._train_group(group)

    def _train_group(self, group: list[InFlight]) -> None:
        results = self.calls.train_group(group[0].slot, self.group_method, [r.inputs for r in group])
        for running, handles in zip(group, results):
            running.results = handles

    def _rerun(self, running: InFlight) -> None:
        if running.group is not None:
            self._train_group(running.group)
        else:
            running.results = self.calls.train(running.slot, running.inputs)

    def report(self, running: InFlight) -> TaskReport:
        """The task's report, waiting for it (the task re-run if its executor died)."""
        def fetch() -> TaskReport:
            return self.calls.t.get(running.handles().report)

        what = f"client {running.inputs.client} task {running.inputs.client_task}"
        return self.calls.retried(what, running.slot, fetch, lambda: self._rerun(running))

    def reports(self, tasks: list[InFlight]) -> list[TaskReport]:
        """Several tasks' reports: one round trip, or task by task if one of them failed."""
        try:
            return list(self.calls.t.get([r.handles().report for r in tasks]))
        except Exception:
            return [self.report(r) for r in tasks]

    def done(self, running: InFlight) -> None:
        """The task's slot no longer holds it."""
        self.calls.load[running.slot] -= 1

    def run_now(self, tasks: list[TaskInputs]) -> list[Any]:
        """Run ``tasks`` at once, each alone on the least loaded executor, and return the
        handle of the client state each leaves (None: it returned none)."""
        started = []
        for inputs in tasks:
            slot = self.calls.least_loaded()
            self.calls.load[slot] += 1
            started.append(InFlight(slot, inputs, self.calls.train(slot, inputs)))
        kept = []
        for running in started:
            report = self.report(running)
            self.done(running)
            kept.append(running.handles().state if report.state_kept else None)
        return kept


def make_launcher(calls: ActorCalls, cfg: RuntimeConfig, placement: str, num_clients: int) -> Launcher:
    """How the run's tasks reach its executors: with ``vectorize`` K > 1 in groups of at most
    K; pooled on Ray in groups per executor (``tasks_per_call``); else one call per task (an
    inline call costs nothing to save)."""
    groups: InstantGroups[InFlight] | None = None
    if cfg.vectorize > 1:
        groups = InstantGroups(cfg.vectorize)
    elif placement == "pooled" and cfg.tasks_per_call != 1 and not isinstance(calls.t, InlineTransport):
        groups = InstantGroups(cfg.tasks_per_call or max(1, num_clients), spread=len(calls.executors))
    return Launcher(calls, groups, "train_many" if cfg.vectorize > 1 else "train_each", placement == "dedicated")
