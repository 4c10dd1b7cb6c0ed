"""The FL protocol in virtual time (SimPy).

The clock decides *when* things happen; a :class:`Backend` does the real work. Dispatching a
task starts its real computation at once (on a Ray actor), while the clock schedules the
task's settlement at ``now + duration``, where the duration comes from the client's device
and the task's declared bytes and work (see :mod:`fedclock.scheduling.devices`). Arrivals
are handled in virtual-time order, ties broken by client id, so a scenario gives the same
events whatever the number of actors.

The protocols (sync rounds, async slots, windowed aggregation) are in
:mod:`fedclock.scheduling.protocols` and use the public methods of :class:`Clock`: the
shared steps (dispatch, aggregate, give up, drop, finish) and the idle-client finder
(:mod:`fedclock.scheduling.candidates`). The vocabulary of a task's life (it *settles*: it
*arrives* or the server *gives up* on it; then it *ends*) is in :mod:`fedclock.scheduling.task`,
the event kernel under it in :mod:`fedclock.scheduling.kernel`.

Incomplete work and lost connections (:mod:`fedclock.scheduling.heterogeneity`): at dispatch
the clock decides how many local steps the task runs (its duration follows from them) and
whether the client loses its connection. With ``mode.task_timeout_s`` the server gives up on
a task not back ``task_timeout_s`` after its dispatch: a lost task ends ``lost`` then (its
client is idle again), a slow one ``timed_out`` (its client stays busy until it really
finishes; the result is discarded). In async mode the slot is freed at the give-up.
:meth:`Clock.lose_connection` drops a running task's connection from outside (scripted).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Collection, Generator, Hashable, Protocol, Sequence

import numpy as np
import simpy

from fedclock.scheduling.availability import Availability, Never
from fedclock.scheduling.candidates import EveryIdleClient, idle_clients
from fedclock.scheduling.devices import Devices, TaskTiming, task_timing
from fedclock.scheduling.heterogeneity import WorkAndLinks
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.kernel import Kernel
from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode
from fedclock.scheduling.protocols import SyncRules
from fedclock.scheduling.rank_draws import RankDraws
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.selection import ClientHistory, Disclosed, SelectionView, Selector, checked_choice
from fedclock.scheduling.task import (APPLIED, CANCELLED, DROPPED, LOST, TIMED_OUT, UNFINISHED, Applied, Reported,
                                      Task, TaskCosts)

NEVER = Never()
"""The availability of an infeasible client."""

__all__ = ["APPLIED", "CANCELLED", "DROPPED", "LOST", "TIMED_OUT", "UNFINISHED", "Applied", "Backend", "Clock",
           "Recorder", "Reported",
           "Script", "Task", "TaskCosts"]


class Backend(Protocol):
    """The real compute, as the clock sees it."""

    def start(self, task: Task) -> None:
        """Begin the task's computation now (non-blocking); with ``task.upload_discarded``,
        now or whenever the client state it leaves is first needed."""

    def apply(self, tasks: Sequence[Task]) -> int:
        """Hand these arrivals (with ``staleness`` set) to the server; return the server
        version, as an :class:`Applied` to report what each task's client reported (the
        clock records it on the tasks)."""

    def release(self, task: Task, keep_state: bool) -> None:
        """Forget a task whose upload is not used; keep the client's new state if it finished."""

    def failed(self, task: Task) -> None:
        """The server gave up on ``task`` now (``task.lost``: its connection was lost; else it
        timed out): tell the algorithm (its optional failure hook). The version stays."""

    def evaluate(self) -> dict[str, float]:
        """Evaluate the current global (and personalized) models."""


class Recorder(Protocol):
    """Where the clock reports what happened."""

    def task_ended(self, task: Task) -> None: ...

    def evaluated(self, now: float, version: int, round_index: int, metrics: dict[str, float]) -> None: ...

    def progress(self, now: float, version: int, in_flight: int) -> None: ...


class Script(Protocol):
    """Scripted changes during a run (the scenario's timeline, see
    :mod:`fedclock.scheduling.timeline`)."""

    def start(self, clock: "Clock") -> None:
        """Apply what is due at the start and schedule the rest (before the first dispatch)."""

    def version_reached(self, clock: "Clock") -> None:
        """The server version just changed (called inside :meth:`Clock.aggregate`)."""

    def retire(self, clients: Sequence[int], reason: str) -> None:
        """Take ``clients`` out of every later cohort and slot, for good, and record why."""


class Clock:
    """Runs one scenario's protocol in virtual time."""

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
        self.upload_limit = None if upload_limit is None else list(upload_limit)
        """Per client, the applied uploads after which it is retired (the script's
        :meth:`Script.retire`, with ``limit_reason``): e.g. a privacy budget's uploads
        (:mod:`fedclock.scenarios.privacy_accounting`); None: no limit."""
        self.limit_reason = limit_reason
        self._applied: list[int] = [0] * len(devices)
        """Applied uploads of each client (counted only with an ``upload_limit``)."""
        self.upload_kind = upload_kind
        """What a task dispatched now to a client uploads, given the client and
        :attr:`server_steps` (kept on :attr:`Task.upload_kind` for the server step's charge);
        None: not asked."""
        self.server_steps = 0
        """Server steps applied so far (calls of :meth:`aggregate` with arrivals)."""
        self.server_seconds = server_seconds
        """Virtual seconds of the server step on these arrivals, from the state the server is in
        (:mod:`fedclock.scheduling.server_device`); None: the step takes no time."""
        self.env = self.kernel.env
        self.stateless_clients = stateless_clients
        """The algorithm keeps no client state: a task whose upload is known at dispatch to be
        discarded changes nothing and is not started (see :meth:`_discarded`)."""
        self.drop_after: float | None = None
        """Sync rounds with a deadline and ``late_results: drop``: the current round's deadline
        (set by the protocol)."""
        self.script = script
        self.devices = devices
        self.feasible: np.ndarray = (np.ones(len(devices), dtype=bool) if feasible is None
                                     else np.asarray(feasible, dtype=bool))
        """Per client: whether its device can fit the task (its memory covers the task's
        peak training memory). An infeasible client is never idle and available, so no
        protocol or selector ever dispatches it; selectors may read this array."""
        if not self.feasible.all():
            availability = [model if ok else NEVER for model, ok in zip(availability, self.feasible.tolist())]
        self.availability = availability
        self.costs = costs
        self.mode = mode
        self.stop = stop
        self.eval_every = eval_every
        self.eval_at = frozenset(eval_at)
        """Server versions evaluated besides every ``eval_every``-th (an update that moves the
        server past one of them is evaluated)."""
        self.backend = backend
        self.recorder = recorder
        self.work_and_links = work_and_links
        self.task_timeout_s: float | None = getattr(mode, "task_timeout_s", None)
        self._ranks = RankDraws(numpy_rng(seed, Stream.COHORT))
        """The cohort stream: slot picks draw their ranks from it in batches (:attr:`rng` for
        every other draw)."""
        self.version = 0
        self.round = 0
        self.task_count = 0
        self.busy = BusyClients()
        """Busy client -> its running task (or the task the server gave up on while the client finishes it)."""
        self.idle = idle_clients(availability, self.busy, self.env.now)
        """Idle, available clients by rank (:mod:`fedclock.scheduling.candidates`)."""
        self.in_flight: dict[int, Task] = {}
        """Tasks dispatched and not yet settled or ended, by index."""
        self.draining: dict[int, Task] = {}
        """Tasks the server gave up on whose clients are still computing them."""
        self.evaluated_version = -1
        self.done = self.env.event()
        self.stop_reason = ""
        self._refill: Callable[[], None] | None = None
        self._full_work = costs.local_steps is None or costs.work_for_steps is None
        """Every task does the algorithm's full work (the costs do not declare steps)."""
        # Per-client values read on every dispatch, as Python lists (list indexing is the
        # cheapest read; the values are those ``.item()`` gives).
        self._client_size: list[int] = np.asarray(client_sizes).astype(np.int64, copy=False).tolist()
        self._client_tasks: list[int] = [0] * len(devices)
        """Tasks each client had so far."""
        self._fixed_devices = type(devices) is Devices
        """Device values never change during the run (no timeline): transfer times are
        computed once per client."""
        if self._fixed_devices:
            down_s, up_s = devices.transfer_arrays(costs.bytes_down, costs.bytes_up)
            self._down_s, self._up_s = down_s.tolist(), up_s.tolist()
            self._compute = devices.compute.tolist()
        self.selector = selector
        """Who trains (``selection:``); None: the uniform draws above (:mod:`fedclock.scheduling.selection`)."""
        self.history = ClientHistory(len(devices)) if selector is not None else None
        self._sizes: np.ndarray | None = None
        self._request: Disclosed | None = None
        """What the server observed of each client (kept only for a selector)."""
        self.disclose = frozenset(disclose)
        self.cohort_quota: int | None = None
        """Over-commitment: results the current sync round waits for (None: every task's)."""

    @property
    def rng(self) -> np.random.Generator:
        """The clock's seeded generator (cohort stream), in the state one-at-a-time draws
        would have left it in (ranks the slot picks drew ahead are given back first)."""
        return self._ranks.generator()

    # ------------------------------------------------------------------ the run
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
        """The stop decision after a server step (every protocol asks here): finish the run
        when ``stop.rounds`` (sync rounds; async mode refuses it) or ``stop.versions`` is
        reached, rounds first. Whether a bound is reached (the protocol then stops dispatching).
        (``stop.virtual_time_s`` is a timer of :meth:`run`, ``stop.target_accuracy`` is
        decided in :meth:`evaluate`.)"""
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

    # ------------------------------------------------------------------ finding idle clients
    def sample_cohort(self, rule: SyncRules) -> list[int]:
        """Idle, available clients, sampled without replacement, in client-id order."""
        want, quota = rule.cohort_rule(len(self.devices))
        idle = self.idle.count(self.env.now, self.round)
        if idle <= want:
            cohort = self.idle.at_many(range(idle))
        elif self.selector is not None:
            cohort = self._select(idle, want, self.round)
        else:
            cohort = sorted(self.idle.at_many(self.rng.choice(idle, size=want, replace=False)))
        self.cohort_quota = min(quota, len(cohort)) if quota is not None else None
        return cohort

    def pick_idle(self) -> int | None:
        """A uniformly random idle, available client (or the selector's), or None."""
        idle = self.idle.count(self.env.now, self.version)
        if self.selector is not None and idle > 1:
            return self._select(idle, 1, self.version)[0]
        return self.idle.at(self._ranks.below(idle)) if idle else None

    def pick_for_window(self, limit: int) -> list[int] | None:
        """Windowed aggregation: the idle, available clients the selector sends the model to
        at a window close (``limit`` at most), in client-id order; None without a selector
        (the protocol then fills the slots lowest id first)."""
        if self.selector is None:
            return None
        idle = self.idle.count(self.env.now, self.round)
        if idle <= limit:
            return self.idle.at_many(range(idle))
        return self._select(idle, limit, self.round)

    # ------------------------------------------------------------------ selection
    def _select(self, idle: int, k: int, round_index: int) -> list[int]:
        """``k`` (or fewer) of the ``idle`` candidates (``0 < k < idle``), by the selector."""
        selector = self.selector
        assert selector is not None
        candidates = self.candidates(idle)
        chosen = selector.select(self.selection_view(round_index), candidates, k)
        return checked_choice(chosen, candidates, k, type(selector).__name__).tolist()

    def candidates(self, idle: int) -> np.ndarray:
        """The idle, available clients of the last count (there are ``idle``), as an array."""
        n = len(self.devices)
        if isinstance(self.idle, EveryIdleClient):
            mask = np.ones(n, dtype=bool)
            if self.busy:
                mask[np.fromiter(self.busy.keys(), dtype=np.int64, count=len(self.busy))] = False
            return np.flatnonzero(mask)
        return np.asarray(self.idle.at_many(range(idle)), dtype=np.int64)

    def selection_view(self, round_index: int) -> SelectionView:
        """What the selector may see now (:class:`~fedclock.scheduling.selection.SelectionView`)."""
        assert self.history is not None
        sizes = self._size_array() if "data_size" in self.disclose else None
        deadline = self.mode.round_deadline_s
        return SelectionView(self.history, self.env.now, round_index, self.version,
                             self._disclosed if "resources" in self.disclose else None, data_size=sizes,
                             deadline_s=deadline)

    def _size_array(self) -> np.ndarray:
        """Every client's training-set size as a read-only array, built once (a selector's
        view reads it at every decision)."""
        if self._sizes is None:
            self._sizes = np.asarray(self._client_size, dtype=np.int64)
            self._sizes.flags.writeable = False
        return self._sizes

    def _disclosed(self) -> Disclosed:
        """The clients' resource request: their profiles now and a full task's estimated times
        (computed once when the profiles never change)."""
        if self._request is None or not self._fixed_devices:
            self._request = self._resource_request()
            for array in vars(self._request).values():  # shared between decisions: nobody may write it
                if isinstance(array, np.ndarray):
                    array.flags.writeable = False
        return self._request

    def _resource_request(self) -> Disclosed:
        devices, costs = self.devices, self.costs
        if type(devices) is Devices:
            compute, down, up, lat = devices.compute, devices.down_mbps, devices.up_mbps, devices.latency_s
        else:
            profiles = [devices[c] for c in range(len(devices))]
            compute = np.array([p.compute for p in profiles])
            down = np.array([p.down_mbps for p in profiles])
            up = np.array([p.up_mbps for p in profiles])
            lat = np.array([p.latency_s for p in profiles])
        down_s = costs.bytes_down * 8.0 / (down * 1e6) + lat
        up_s = costs.bytes_up * 8.0 / (up * 1e6) + lat
        sizes = self._size_array()
        unique, inverse = np.unique(sizes, return_inverse=True)
        work = np.array([costs.work(int(u)) for u in unique])[inverse]
        total = down_s + work / compute + up_s
        data = sizes if "data_size" in self.disclose else None
        return Disclosed(data_size=data, compute=compute.copy(), down_mbps=down.copy(), up_mbps=up.copy(),
                         latency_s=lat.copy(), expected_duration_s=total, download_s=down_s + work / compute,
                         upload_s=up_s)

    # ------------------------------------------------------------------ a task's life
    def dispatch(self, client: int, on_settle: Callable[[Task], None] | None = None, start: bool = True) -> Task:
        """Send the current model to ``client``: real work starts now, the task settles at
        now + duration (or when the server gives up on it), and then ``on_settle(task)`` runs.
        With ``start=False`` the computation is left to :meth:`start` (over-commitment starts
        only the tasks whose results will be used)."""
        num_samples = self._client_size[client]
        client_task = self._client_tasks[client]
        costs = self.costs
        if self._full_work:
            steps = full = None
            work = costs.work(num_samples)
        else:
            steps, full, work = self._plan_work(client, client_task, num_samples)
        if self._fixed_devices:
            timing = TaskTiming._make((self._down_s[client], work / self._compute[client], self._up_s[client]))
        else:
            timing = task_timing(self.devices[client], costs.bytes_down, costs.bytes_up, work)
        now = self.env.now
        task = Task(index=self.task_count, client=client, client_task=client_task, round=self.round,
                    version=self.version, dispatched_at=now, timing=timing, bytes_down=costs.bytes_down,
                    bytes_up=costs.bytes_up, num_samples=num_samples, steps=steps, steps_full=full,
                    on_settle=on_settle, env=self.env)
        if self.upload_kind is not None:
            task.upload_kind = self.upload_kind(client, self.server_steps)
        self.task_count += 1
        self._client_tasks[client] = client_task + 1
        self.busy[client] = task
        self.in_flight[task.index] = task
        timeout = self.task_timeout_s
        if self.work_and_links is not None and self.work_and_links.loses(client, client_task, timing.total_s):
            assert timeout is not None, "mode.task_timeout_s: required when connections may be lost"
            task.lost = True
            task.gives_up_at = now + timeout
        elif timeout is not None and timing.total_s > timeout:
            task.gives_up_at = now + timeout
        task.upload_discarded = self._upload_discarded(task)
        if start:
            self.start(task)
        if self.history is not None:
            self.history.picked(client, now, self.round if self.mode.counts_rounds else self.version)
        self.kernel.arm(task)
        self.recorder.progress(now, self.version, len(self.in_flight))
        return task

    def start(self, task: Task) -> None:
        """Start ``task``'s computation unless it is lost or its result is known to be unused."""
        if not task.started and not task.lost and not self._discarded(task):  # else skip its computation
            self.backend.start(task)
            task.started = True

    def cancel(self, task: Task) -> None:
        """Over-commitment: the server cancels ``task`` now (its round closed without it): it
        ends ``cancelled``, its client is idle at once, and nothing it computed is kept (the
        client's state stays as before the task)."""
        self.in_flight.pop(task.index, None)
        self.free(task)
        self._end(task, CANCELLED, self.env.now)
        if task.started:
            self.backend.release(task, keep_state=False)
        if self.history is not None:
            self.history.cancelled[task.client] += 1

    def _discarded(self, task: Task) -> bool:
        """Whether ``task``'s computation is known at its dispatch to change no result, so it
        need not run (the events table is the same: a task's row takes its training metrics
        only when its upload is applied).

        * It finishes after the run's time budget (``stop.virtual_time_s``): it ends
          unfinished (or timed out and still running), and neither its upload nor its client
          state is kept — for every algorithm.
        * With :attr:`stateless_clients` (the algorithm keeps no client state), its upload is
          discarded: the server gives up on it first (``mode.task_timeout_s``), or it finishes
          after its sync round's deadline with ``late_results: drop``.
        """
        budget = self.stop.virtual_time_s
        if budget is not None and task.finishes_at > budget:
            return True
        return self.stateless_clients and task.upload_discarded

    def _upload_discarded(self, task: Task) -> bool:
        """Whether the server will not use ``task``'s upload, known at its dispatch: it gives
        up on the task first (``mode.task_timeout_s``), or the task finishes after its sync
        round's deadline with ``late_results: drop``."""
        drop_after = self.drop_after
        return task.gives_up_at is not None or (drop_after is not None and task.finishes_at > drop_after)

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
        history = self.history
        for t in tasks:
            self.in_flight.pop(t.index, None)
            t.version_applied = self.version
            self._end(t, APPLIED, t.finishes_at)
            if history is not None:
                history.arrived(t.client, t.finishes_at - t.dispatched_at, t.metrics.get("train_loss"), t.num_samples)
        if self.upload_limit is not None and tasks:
            self._retire_spent(tasks)
        self.recorder.progress(self.env.now, self.version, len(self.in_flight))
        if self.version != before and (self.version % self.eval_every == 0
                                       or any(before < v <= self.version for v in self.eval_at)):
            self.evaluate()

    def _retire_spent(self, tasks: list[Task]) -> None:
        """Count the applied uploads; clients that reached their ``upload_limit`` retire."""
        assert self.upload_limit is not None and self.script is not None, "an upload limit needs a script"
        applied, limit = self._applied, self.upload_limit
        spent = []
        for t in tasks:
            applied[t.client] += 1
            if applied[t.client] == limit[t.client]:
                spent.append(t.client)
        if spent:
            self.script.retire(sorted(spent), self.limit_reason)

    def drop(self, task: Task) -> None:
        """A result that arrived after its round closed is not used: it ends ``dropped``, and
        the client keeps its new state."""
        self.in_flight.pop(task.index, None)
        self._end(task, DROPPED, task.finishes_at)
        if self.history is not None:
            self.history.arrived(task.client, task.finishes_at - task.dispatched_at, None, None)
        if task.started:
            self.backend.release(task, keep_state=True)

    def give_up(self, task: Task) -> None:
        """The server stops waiting for ``task`` (now, at ``task.gives_up_at``)."""
        self.in_flight.pop(task.index, None)
        self._end(task, LOST if task.lost else TIMED_OUT, self.env.now)
        if self.history is not None:
            (self.history.lost if task.lost else self.history.timed_out)[task.client] += 1
        self.backend.failed(task)
        if task.lost:
            self.free(task)
            if task.started:
                self.backend.release(task, keep_state=False)
        else:
            self.draining[task.index] = task
            task.renew_client_free()
            back = self.env.timeout(task.finishes_at - self.env.now)
            back.callbacks.append(partial(self._client_back_event, task))
        self.recorder.progress(self.env.now, self.version, len(self.in_flight))
        self.refill()

    def _client_back_event(self, task: Task, _: simpy.Event) -> None:
        """SimPy callback of the timeout at which a timed-out task really finishes."""
        self._client_back(task)

    def _client_back(self, task: Task) -> None:
        """A timed-out task really finished: its client is idle again; its result is
        discarded but its new state kept (as for a dropped late result)."""
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

    # ------------------------------------------------------------------ partial work, lost links
    def _plan_work(self, client: int, client_task: int, num_samples: int) -> tuple[int | None, int | None, float]:
        """(steps this task runs, the full count, its work). Steps are (None, None) when the
        costs do not declare them: every task then does the algorithm's full work."""
        costs = self.costs
        work_for = costs.work_for_steps
        if costs.local_steps is None or work_for is None:
            return None, None, costs.work(num_samples)
        full = costs.local_steps(num_samples)
        if self.work_and_links is None:
            return full, full, work_for(num_samples, full)
        profile = self.devices[client]

        def duration(steps: int) -> float:
            return task_timing(profile, costs.bytes_down, costs.bytes_up, work_for(num_samples, steps)).total_s

        steps = self.work_and_links.steps(client, client_task, full, duration)
        return steps, full, work_for(num_samples, steps)

    def lose_connection(self, client: int) -> bool:
        """Scripted connection loss: ``client``'s running task (if its result has not yet
        reached the server) never comes back; the server gives up on it at its dispatch
        time + ``mode.task_timeout_s``. Returns whether a task was lost. Meant for timeline
        events; needs ``task_timeout_s``."""
        task = self.busy.get(client)
        if task is None or task.index not in self.in_flight or task.lost or task.finishes_at <= self.env.now:
            return False
        if self.task_timeout_s is None:
            raise ValueError("mode.task_timeout_s: required to lose connections (the server learns of a lost task "
                             "only by this timeout)")
        task.lost = True
        task.gives_up_at = task.dispatched_at + self.task_timeout_s
        self.kernel.arm(task)
        return True

    # ------------------------------------------------------------------ scripted changes
    def set_mode_limits(self, *, concurrency: int | None = None, cohort_size: int | None = None,
                        cohort_fraction: float | None = None) -> None:
        """Change the async concurrency, or the sync cohort rule (size or fraction, the other
        is cleared), for dispatches from now on (timeline events)."""
        if concurrency is not None:
            self.mode = self.mode.model_copy(update={"concurrency": concurrency})
        if cohort_size is not None or cohort_fraction is not None:
            self.mode = self.mode.model_copy(update={"cohort_size": cohort_size, "cohort_fraction": cohort_fraction})

    def set_refill(self, refill: Callable[[], None]) -> None:
        """What :meth:`refill` does from now on (the async protocol fills its free slots)."""
        self._refill = refill

    def refill(self) -> None:
        """Async slots: give free slots to idle, available clients now (after a scripted
        change freed capacity, brought clients back, or the server gave up on a task). Sync
        rounds and aggregation windows: nothing; their next round or window dispatches anew."""
        if self._refill is not None and not self.done.triggered:
            self._refill()
