"""The three federated protocols, as SimPy processes on the clock's public methods.

* :func:`sync_rounds` (``mode: sync``): each round samples a cohort of idle, available clients,
  dispatches them, and closes when all have settled or the deadline passes. Late results are
  dropped, or (``late_results: include``) handed to the round that closes after they arrive.
* :class:`AsyncSlots` (``mode: async``): ``concurrency`` tasks in flight; each arrival is handed
  to the server at once, and the freed slot goes to an idle, available client.
* :func:`~fedclock.scheduling.windowed.windowed_rounds` (``mode: async`` with ``aggregation``,
  in :mod:`fedclock.scheduling.windowed`): arrivals are collected and applied once per fixed
  virtual-time window.

In all three a task the server gives up on (lost, or slower than ``mode.task_timeout_s``)
ends then and is not applied (:meth:`ProtocolClock.give_up`). tests/scheduling/reference_protocols.py
writes the same protocols in plain SimPy (one process per task) as an executable specification.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Generator, Literal, Protocol

import simpy

from fedclock.scheduling.candidates import IdleClients
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.kernel import Arrivals, Kernel
from fedclock.scheduling.task import CANCELLED, Task


class SyncRules(Protocol):
    """What the sync protocol reads of its mode (:class:`~fedclock.scheduling.modes.SyncMode`)."""

    @property
    def deadline_s(self) -> float | None: ...

    @property
    def late_results(self) -> Literal["drop", "include"]: ...

    def cohort_rule(self, num_clients: int) -> tuple[int, int | None]: ...


class Picks(Protocol):
    """What a protocol asks of the clock's cohorts (:class:`~fedclock.scheduling.cohorts.Cohorts`):
    the idle finder, a sync cohort and its over-commitment quota, an async slot's client, a
    window's clients."""

    @property
    def idle(self) -> IdleClients: ...

    @property
    def quota(self) -> int | None: ...

    def sample(self, rule: SyncRules, now: float, round_index: int, version: int) -> list[int]: ...

    def pick_idle(self, now: float, version: int) -> int | None: ...

    def pick_for_window(self, limit: int, now: float, round_index: int, version: int) -> list[int] | None: ...


class ProtocolClock(Protocol):
    """What a protocol uses of the clock (:class:`~fedclock.scheduling.clock.Clock`). Its
    ``mode`` is the mode that made the protocol (:mod:`fedclock.scheduling.modes`), read anew
    each round (timeline events may change its limits): sync rounds read it as
    :class:`SyncRules`, async slots and windows its ``concurrency``."""

    env: simpy.Environment
    kernel: Kernel
    mode: Any
    version: int
    round: int
    done: simpy.Event
    busy: BusyClients
    in_flight: dict[int, Task]
    draining: dict[int, Task]
    drop_after: float | None
    server_seconds: Callable[[list[Task]], float] | None

    @property
    def cohorts(self) -> Picks: ...

    def dispatch(self, client: int, on_settle: Callable[[Task], None] | None = None, start: bool = True) -> Task: ...

    def start(self, task: Task) -> None: ...

    def cancel(self, task: Task) -> None: ...

    def aggregate(self, tasks: list[Task]) -> None: ...

    def give_up(self, task: Task) -> None: ...

    def drop(self, task: Task) -> None: ...

    def finish(self, reason: str) -> None: ...

    def check_stop(self) -> bool: ...

    def free(self, task: Task) -> None: ...

    def set_refill(self, refill: Callable[[], None]) -> None: ...


def server_step(clock: ProtocolClock, arrivals: list[Task]) -> Generator[simpy.Event, Any, None]:
    """The server's step on ``arrivals`` (in the order it gets them, right before
    :meth:`~ProtocolClock.aggregate` hands them over) takes its virtual time before the new
    version is published (``server.compute_gflops``, :mod:`fedclock.scheduling.server_device`):
    the seconds of *this* step, from the state the server is in (FedBuff's append or flush);
    nothing is waited without that setting or without arrivals."""
    if clock.server_seconds is not None and arrivals:
        yield clock.env.timeout(clock.server_seconds(arrivals))


# --------------------------------------------------------------------------- sync rounds
def sync_rounds(clock: ProtocolClock) -> Generator[simpy.Event, Any, None]:
    """Barrier rounds over a sampled cohort; optional deadline; late results dropped or
    included in the round that closes after they arrive."""
    late_inbox: list[Task] = []
    while not clock.done.triggered:
        mode = _sync_mode(clock)
        cohort = clock.cohorts.sample(mode, clock.env.now, clock.round, clock.version)
        if mode.deadline_s is not None and mode.late_results == "drop":
            clock.drop_after = clock.env.now + mode.deadline_s  # a stateless client's task finishing later need not run
        everyone = _Barrier(clock.env, len(cohort))
        quota = clock.cohorts.quota
        enough = _Barrier(clock.env, quota) if quota is not None else None

        def on_settle(task: Task, everyone: _Barrier = everyone, enough: _Barrier | None = enough) -> None:
            if task.status == CANCELLED:
                return
            if enough is not None and task.gives_up_at is None and not enough.triggered:
                enough.count_one()
            if task.gives_up_at is not None:
                clock.give_up(task)
            else:
                clock.free(task)
                if task.late:  # its round closed before: the round closing next takes it, or nobody
                    if _sync_mode(clock).late_results == "include":
                        late_inbox.append(task)
                    else:
                        clock.drop(task)
            everyone.count_one()

        deadline_s = mode.deadline_s
        if quota is None:
            tasks = [clock.dispatch(client, on_settle) for client in cohort]
        else:
            tasks = [clock.dispatch(client, on_settle, start=False) for client in cohort]
            for t in first_arrivals(tasks, quota, None if deadline_s is None else clock.env.now + deadline_s):
                clock.start(t)
        waits = everyone if enough is None or not tasks else everyone | enough
        if tasks and deadline_s is not None:
            yield waits | clock.env.timeout(deadline_s)
        elif tasks:
            yield waits
        elif deadline_s is not None:
            yield clock.env.timeout(deadline_s)
        else:
            yield from wait_for_change(clock)
        # ---- the round closes now
        now = clock.env.now
        if quota is not None:
            close_overcommitted(clock, tasks, quota)
        punctual = [t for t in tasks if t.gives_up_at is None and t.finishes_at <= now and t.status != CANCELLED]
        for t in punctual:
            t.staleness = 0
            clock.free(t)
        for t in tasks:
            t.late = t.finishes_at > now
        late = sorted(late_inbox, key=lambda t: (t.finishes_at, t.client))
        late_inbox.clear()
        for t in late:
            t.staleness = clock.version - t.version
        arrived = punctual + late
        yield from server_step(clock, arrived)
        clock.aggregate(arrived)
        clock.round += 1
        clock.check_stop()


def first_arrivals(tasks: list[Task], quota: int, deadline_at: float | None) -> list[Task]:
    """The tasks whose results an over-committed round will use, as known at dispatch: the
    first ``quota`` by (arrival time, client id) among those the server will not give up
    on, arriving by the deadline."""
    arriving = [t for t in tasks if t.gives_up_at is None and (deadline_at is None or t.finishes_at <= deadline_at)]
    return sorted(arriving, key=lambda t: (t.finishes_at, t.client))[:quota]


def close_overcommitted(clock: ProtocolClock, tasks: list[Task], quota: int) -> None:
    """An over-committed round closes now: the first ``quota`` arrivals (by arrival time,
    client id) stay; every other task of the round not yet ended is cancelled (one whose
    result arrived at this same instant beyond the quota included). A kept task that was
    not started (a scripted change after dispatch moved the close) is started now."""
    now = clock.env.now
    arrived = sorted((t for t in tasks if t.status == "running" and t.gives_up_at is None and t.finishes_at <= now),
                     key=lambda t: (t.finishes_at, t.client))
    keep = {t.index for t in arrived[:quota]}
    for t in tasks:
        if t.index in keep:
            clock.start(t)
        elif t.status == "running":
            clock.cancel(t)


def _sync_mode(clock: ProtocolClock) -> SyncRules:
    """The clock's mode (sync; timeline events may have changed its cohort rule)."""
    mode: SyncRules = clock.mode
    return mode


def wait_for_change(clock: ProtocolClock) -> Generator[simpy.Event, Any, None]:
    """Nobody can be dispatched: wait until a busy client is free or some client's
    availability may change; if neither can happen, go on at once (the round closes empty)."""
    wake = clock.cohorts.idle.next_change(clock.env.now)
    events = [t.client_free for t in clock.busy.values()]
    if math.isfinite(wake):
        events.append(clock.env.timeout(wake - clock.env.now))
    if events:
        yield clock.env.any_of(events)
    else:
        yield clock.env.timeout(0)


class _Barrier(simpy.Event):
    """Succeeds when ``count`` tasks have settled (a sync round's cohort)."""

    def __init__(self, env: simpy.Environment, count: int) -> None:
        super().__init__(env)
        self.remaining = count

    def count_one(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            self.succeed()


# --------------------------------------------------------------------------- async slots
class AsyncSlots:
    """``concurrency`` tasks in flight; each arrival goes to the server at once and its slot
    is refilled with an idle, available client."""

    def __init__(self, clock: ProtocolClock) -> None:
        self.clock = clock
        self.arrivals = Arrivals(clock.kernel)
        self.waiting_for_clients = False

    def run(self) -> Generator[simpy.Event, Any, None]:
        clock, arrivals = self.clock, self.arrivals
        clock.set_refill(self.fill_slots)
        self.fill_slots()
        while not clock.done.triggered:
            task = arrivals.take()
            if task is None:
                task = yield from arrivals.wait()
            clock.free(task)
            task.staleness = clock.version - task.version
            yield from server_step(clock, [task])
            clock.aggregate([task])
            if clock.check_stop():
                return
            self.fill_slots()

    def on_settle(self, task: Task) -> None:
        if task.gives_up_at is not None:
            self.clock.give_up(task)
        else:
            self.arrivals.put(task)

    def fill_slots(self) -> None:
        """Dispatch idle, available clients until ``concurrency`` tasks are in flight; if
        slots stay empty, wait for the next availability change to fill them."""
        clock = self.clock
        in_flight, concurrency, on_settle = clock.in_flight, int(clock.mode.concurrency), self.on_settle
        cohorts, now, version = clock.cohorts, clock.env.now, clock.version
        while len(in_flight) < concurrency:
            client = cohorts.pick_idle(now, version)
            if client is None:
                break
            clock.dispatch(client, on_settle)
        if len(in_flight) < concurrency and not self.waiting_for_clients:
            self.waiting_for_clients = True
            clock.env.process(self._wait_for_availability())

    def _wait_for_availability(self) -> Generator[simpy.Event, Any, None]:
        clock = self.clock
        wake = clock.cohorts.idle.next_idle_change(clock.env.now)
        if math.isfinite(wake):
            yield clock.env.timeout(wake - clock.env.now)
        self.waiting_for_clients = False
        if math.isfinite(wake):
            self.fill_slots()
        elif not clock.in_flight and not clock.draining:
            clock.finish("no_clients_available")
