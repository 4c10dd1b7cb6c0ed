"""The FL protocol in virtual time (SimPy).

The clock decides *when* things happen; a :class:`Backend` does the real work. Dispatching a
task starts its real computation at once (on a Ray actor), while the clock schedules the
task's settlement at ``now + duration``, where the duration comes from the client's device
and the task's declared bytes and work (see :mod:`fedclock.scheduling.devices`). Arrivals
are handled in virtual-time order, ties broken by client id, so a scenario gives the same
events whatever the number of actors.

The mode makes the protocol (:meth:`~fedclock.scheduling.modes.Mode.protocol`: sync rounds
and async slots in :mod:`fedclock.scheduling.protocols`, windowed aggregation in
:mod:`fedclock.scheduling.windowed`); it uses the public methods of :class:`Clock`, the shared
steps (dispatch, aggregate, give up, drop, finish), and asks the clock's cohorts
(:mod:`fedclock.scheduling.cohorts`) whom to dispatch. What a task costs is planned by
:mod:`fedclock.scheduling.task_planning`. The vocabulary of a task's life (it *settles*: it
*arrives* or the server *gives up* on it; then it *ends*) is in :mod:`fedclock.scheduling.task`,
the event kernel under it in :mod:`fedclock.scheduling.kernel`.

Incomplete work and lost connections (:mod:`fedclock.scheduling.heterogeneity`): at dispatch
the planner decides how many local steps the task runs (its duration follows from them) and
whether the client loses its connection. With ``mode.task_timeout_s`` the server gives up on
a task not back ``task_timeout_s`` after its dispatch: a lost task ends ``lost`` then (its
client is idle again), a slow one ``timed_out`` (its client stays busy until it really
finishes; the result is discarded). In async mode the slot is freed at the give-up.
:meth:`Clock.lose_connection` drops a running task's connection from outside (scripted).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Collection, Generator, Hashable, Sequence

import numpy as np
import simpy

from fedclock.scheduling.availability import Availability
from fedclock.scheduling.clock_ports import Backend, Recorder, Script
from fedclock.scheduling.cohorts import Cohorts, UploadBudget
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.heterogeneity import WorkAndLinks
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.kernel import Kernel
from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode
from fedclock.scheduling.selection import Selector
from fedclock.scheduling.task import (APPLIED, CANCELLED, DROPPED, LOST, TIMED_OUT, UNFINISHED, Applied, Reported,
                                      Task, TaskCosts)
from fedclock.scheduling.task_planning import TaskPlanner

__all__ = ["APPLIED", "CANCELLED", "DROPPED", "LOST", "TIMED_OUT", "UNFINISHED", "Applied", "Backend", "Clock",
           "Recorder", "Reported", "Script", "Task", "TaskCosts"]


class Clock:
    """Runs one scenario's protocol in virtual time: the run and its stop, a task's life
    (dispatch, start, cancel, aggregate, give up, free) and evaluation. Who is picked is its
    :attr:`cohorts` (:mod:`fedclock.scheduling.cohorts`), what a task costs its :attr:`planner`
    (:mod:`fedclock.scheduling.task_planning`), and the protocol comes from its mode
    (:meth:`~fedclock.scheduling.modes.Mode.protocol`)."""

    def __init__(self, *, devices: Devices, availability: Sequence[Availability], client_sizes: np.ndarray,
                 costs: TaskCosts, mode: SyncMode | AsyncMode, stop: StopConfig, eval_every: int,
                 backend: Backend, recorder: Recorder, seed: int,
                 work_and_links: WorkAndLinks | None = None, script: Script | None = None,
                 eval_at: Collection[int] = (), stateless_clients: bool = False,
                 selector: Selector | None = None, disclose: Collection[str] = (),
                 feasible: np.ndarray | None = None,
                 server_seconds: Callable[[list[Task]], float] | None = None,
                 upload_kind: Callable[[int, int], Hashable] | None = None,
                 upload_limit: Sequence[int] | None = None, limit_reason: str = "") -> None:
        self.kernel = Kernel()
        self.env = self.kernel.env
        self.planner = TaskPlanner(devices, client_sizes, costs, work_and_links, server_seconds, upload_kind,
                                   timeout_s=mode.task_timeout_s, budget_s=stop.virtual_time_s,
                                   stateless_clients=stateless_clients)
        self.busy = BusyClients()
        """Busy client -> its running task (or the task the server gave up on while the client finishes it)."""
        self.cohorts = Cohorts(planner=self.planner, availability=availability, busy=self.busy, now=self.env.now,
                               seed=seed, selector=selector, disclose=disclose, feasible=feasible,
                               deadline_s=mode.round_deadline_s)
        self.upload_budget = None if upload_limit is None else UploadBudget(upload_limit, limit_reason, script)
        """Retires clients after their allowed uploads (None: no limit)."""
        self.server_seconds = server_seconds
        self.server_steps = 0
        """Server steps applied so far (calls of :meth:`aggregate` with arrivals)."""
        self.drop_after: float | None = None
        """The current sync round's deadline with ``late_results: drop`` (set by the protocol)."""
        self.script, self.mode, self.stop, self.backend, self.recorder = script, mode, stop, backend, recorder
        self.eval_every = eval_every
        self.eval_at = frozenset(eval_at)
        """Server versions evaluated besides every ``eval_every``-th (when an update passes one)."""
        self.version = self.round = self.task_count = 0
        self.in_flight: dict[int, Task] = {}
        """Tasks dispatched and not yet settled or ended, by index."""
        self.draining: dict[int, Task] = {}
        """Tasks the server gave up on whose clients are still computing them."""
        self.evaluated_version, self.stop_reason = -1, ""
        self.done = self.env.event()
        self._refill: Callable[[], None] | None = None
        self._client_tasks: list[int] = [0] * len(devices)
        """Tasks each client had so far."""

    def run(self) -> str:
        """Run until a stop condition; return why it stopped."""
        protocol = self.mode.protocol(self)
        if self.script is not None:
            self.script.start(self)
        self.env.process(protocol)
        if self.stop.virtual_time_s is not None:
            self.env.process(self._time_budget(self.stop.virtual_time_s))
        self.evaluate()
        self.kernel.run_until(self.done)
        for task in sorted(self.in_flight.values(), key=lambda t: t.index):
            self._end(task, UNFINISHED, self.env.now)
            if task.started:
                self.backend.release(task, keep_state=False)
        self.in_flight.clear()
        for task in sorted(self.draining.values(), key=lambda t: t.index):
            if task.started:
                self.backend.release(task, keep_state=False)
        self.draining.clear()
        if self.evaluated_version != self.version:
            self.evaluate()
        return self.stop_reason

    def _time_budget(self, budget: float) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(budget)
        self.finish("virtual_time_s")

    def finish(self, reason: str) -> None:
        """Stop the run now (the first reason given is kept)."""
        if not self.done.triggered:
            self.stop_reason = reason
            self.done.succeed()

    def check_stop(self) -> bool:
        """The stop decision after a server step (every protocol asks here): finish when
        ``stop.rounds`` or ``stop.versions`` is reached, rounds first; whether one is (the
        protocol then stops dispatching). ``stop.virtual_time_s``: :meth:`run`'s timer;
        ``stop.target_accuracy``: :meth:`evaluate`."""
        stop = self.stop
        if stop.rounds is not None and self.round >= stop.rounds:
            self.finish("rounds")
            return True
        if stop.versions is not None and self.version >= stop.versions:
            self.finish("versions")
            return True
        return False

    def free(self, task: Task) -> None:
        """``task``'s client is idle again (the one place a client is freed; nothing happens
        when the client is no longer busy with this task)."""
        busy = self.busy
        if busy.get(task.client) is task:
            busy.pop(task.client)

    def dispatch(self, client: int, on_settle: Callable[[Task], None] | None = None, start: bool = True) -> Task:
        """Send the current model to ``client``: real work starts now, the task settles at
        now + duration (or when the server gives up on it), and then ``on_settle(task)`` runs.
        With ``start=False`` the computation is left to :meth:`start` (over-commitment starts
        only the tasks whose results will be used)."""
        client_task = self._client_tasks[client]
        task = self.planner.task(self.task_count, client, client_task, self.round, self.version, self.env,
                                 self.server_steps, on_settle)
        self.task_count += 1
        self._client_tasks[client] = client_task + 1
        self.busy[client] = task
        self.in_flight[task.index] = task
        task.upload_discarded = self._upload_discarded(task)
        if start:
            self.start(task)
        now = self.env.now
        self.cohorts.picked(client, now, self.round if self.mode.counts_rounds else self.version)
        self.kernel.arm(task)
        self.recorder.progress(now, self.version, len(self.in_flight))
        return task

    def start(self, task: Task) -> None:
        """Start ``task``'s computation unless it is lost or its result is known to be unused."""
        if not task.started and not task.lost and not self._discarded(task):  # else skip its computation
            self.backend.start(task)
            task.started = True

    def _discarded(self, task: Task) -> bool:
        """Whether ``task``'s computation is known at dispatch to change no result (:meth:`TaskPlanner.skipped`)."""
        return self.planner.skipped(task)

    def _upload_discarded(self, task: Task) -> bool:
        """Whether ``task``'s upload is known at dispatch to be unused (:meth:`TaskPlanner.upload_discarded`)."""
        return self.planner.upload_discarded(task, self.drop_after)

    def cancel(self, task: Task) -> None:
        """Over-commitment: the server cancels ``task`` now (its round closed without it): it ends
        ``cancelled``, its client is idle at once, and its client's state stays as before it."""
        self.in_flight.pop(task.index, None)
        self.free(task)
        self._end(task, CANCELLED, self.env.now)
        if task.started:
            self.backend.release(task, keep_state=False)
        self.cohorts.cancelled(task)

    def aggregate(self, tasks: list[Task]) -> None:
        """Hand arrivals to the server, record them, evaluate on the cadence."""
        before = self.version
        if tasks:
            self.server_steps += 1
            applied = self.backend.apply(tasks)
            self.version = int(applied)
            if isinstance(applied, Applied):
                for t, report in zip(tasks, applied.reports):
                    t.metrics, t.steps_reported = report.metrics, report.steps
        if self.script is not None and self.version != before:
            self.script.version_reached(self)
        cohorts = self.cohorts
        for t in tasks:
            self.in_flight.pop(t.index, None)
            t.version_applied = self.version
            self._end(t, APPLIED, t.finishes_at)
            cohorts.arrived(t, applied=True)
        if self.upload_budget is not None:
            self.upload_budget.spend(tasks)
        self.recorder.progress(self.env.now, self.version, len(self.in_flight))
        if evaluation_due(before, self.version, self.eval_every, self.eval_at):
            self.evaluate()

    def drop(self, task: Task) -> None:
        """A result that arrived after its round closed is not used: it ends ``dropped``, and
        the client keeps its new state."""
        self.in_flight.pop(task.index, None)
        self._end(task, DROPPED, task.finishes_at)
        self.cohorts.arrived(task, applied=False)
        if task.started:
            self.backend.release(task, keep_state=True)

    def give_up(self, task: Task) -> None:
        """The server stops waiting for ``task`` (now, at ``task.gives_up_at``)."""
        self.in_flight.pop(task.index, None)
        self._end(task, LOST if task.lost else TIMED_OUT, self.env.now)
        self.cohorts.gave_up(task)
        self.backend.failed(task)
        if task.lost:
            self.free(task)
            if task.started:
                self.backend.release(task, keep_state=False)
        else:
            self.draining[task.index] = task
            task.renew_client_free()
            back = self.env.timeout(task.finishes_at - self.env.now)
            back.callbacks.append(partial(self._client_back, task))
        self.recorder.progress(self.env.now, self.version, len(self.in_flight))
        self.refill()

    def _client_back(self, task: Task, _: simpy.Event | None = None) -> None:
        """A timed-out task really finished (the SimPy callback of that time): its client is idle
        again; its result is discarded but its new state kept (as for a dropped late result)."""
        if self.draining.pop(task.index, None) is None:
            return  # the run ended first and released it
        self.free(task)
        if task.started:
            self.backend.release(task, keep_state=True)
        task.client_free.succeed()
        self.refill()

    def _end(self, task: Task, status: str, at: float) -> None:
        task.status = status
        task.ended_at = at
        self.recorder.task_ended(task)

    def evaluate(self) -> None:
        metrics = self.backend.evaluate()
        self.evaluated_version = self.version
        self.recorder.evaluated(self.env.now, self.version, self.round, metrics)
        target = self.stop.target_accuracy
        if target is not None and metrics.get("global_accuracy", 0.0) >= target and self.version > 0:
            self.finish("target_accuracy")

    def lose_connection(self, client: int) -> bool:
        """Scripted connection loss: ``client``'s running task (if its result has not yet
        reached the server) never comes back; the server gives up on it at its dispatch
        time + ``mode.task_timeout_s``. Returns whether a task was lost. Meant for timeline
        events; needs ``task_timeout_s``."""
        task = self.busy.get(client)
        if task is None or task.index not in self.in_flight or not self.planner.lose(task, self.env.now):
            return False
        self.kernel.arm(task)
        return True

    def set_mode_limits(self, *, concurrency: int | None = None, cohort_size: int | None = None,
                        cohort_fraction: float | None = None) -> None:
        """Change the async concurrency, or the sync cohort rule (size or fraction, the other
        is cleared), for dispatches from now on (timeline events)."""
        self.mode = self.mode.with_limits(concurrency, cohort_size, cohort_fraction)

    def set_refill(self, refill: Callable[[], None]) -> None:
        """What :meth:`refill` does from now on (the async protocol fills its free slots)."""
        self._refill = refill

    def refill(self) -> None:
        """Async slots: give free slots to idle, available clients now (after a scripted
        change freed capacity, brought clients back, or the server gave up on a task). Sync
        rounds and aggregation windows: nothing; their next round or window dispatches anew."""
        if self._refill is not None and not self.done.triggered:
            self._refill()


def evaluation_due(before: int, after: int, every: int, at: Collection[int]) -> bool:
    """Whether a server step from version ``before`` to ``after`` is evaluated: the version
    moved, onto a multiple of ``every`` or past one of the versions ``at``."""
    return after != before and (after % every == 0 or any(before < v <= after for v in at))
