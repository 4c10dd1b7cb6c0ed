"""Windowed (periodic) aggregation in virtual time, the third protocol (``mode: async`` with
``aggregation``), on the clock's public methods like the two in :mod:`fedclock.scheduling.protocols`."""
from __future__ import annotations

from typing import Any, Callable, Generator

import simpy

from fedclock.scheduling.lateness import split_due
from fedclock.scheduling.protocols import ProtocolClock, server_step
from fedclock.scheduling.task import Task

__all__ = ["windowed_rounds"]


def windowed_rounds(clock: ProtocolClock, window_s: float, late: dict[int, int]) -> Generator[simpy.Event, Any, None]:
    """Windowed (periodic) aggregation in virtual time, for any asynchronous algorithm;
    ``clock.round`` counts windows.

    With ``mode: {type: async, aggregation: {window_s: W}}`` the server works in fixed rounds of
    ``W`` virtual seconds instead of reacting to each arrival:

    * at ``t = 0`` and at every window close ``t = k W`` the server sends its current model to
      idle, available clients, in client-id order, until ``concurrency`` tasks are in flight
      (availability is asked with the window index ``k`` as the round, so the
      ``periodic_missing`` model skips whole windows);
    * a task arriving at ``t`` belongs to the window ``((k - 1) W, k W]`` that contains it (an
      arrival exactly at ``k W`` is in window ``k``'s close); its client is idle from then on;
    * at the close ``k W`` every arrival of the window is handed to the server in **one**
      ``server_receive`` call, ordered by (arrival time, client id), each with
      ``staleness = server version now - version it was dispatched with``; a window with
      arrivals gives one new version, an empty one none.

    So a client whose task takes between ``j W`` and ``(j + 1) W`` seconds, dispatched at a window
    close, is applied ``j`` windows after the punctual ones: with a new version every window its
    staleness is exactly ``j``. Stragglers therefore *emerge* from slow devices or links. A task
    the server gives up on ends at its give-up time and is not applied; its client is
    dispatched again at a later window close once it is idle.

    With ``aggregation.late_windows`` (``late``: client -> windows, :mod:`fedclock.scheduling.lateness`)
    the listed clients' results are held back a scripted number of windows instead, whatever their
    compute; such a client stays busy until its result is applied.
    """
    inbox: list[Task] = []

    def on_settle(task: Task) -> None:
        if task.gives_up_at is not None:
            clock.give_up(task)
        else:
            if not late.get(task.client, 0):
                clock.free(task)
            inbox.append(task)

    _dispatch_in_id_order(clock, clock.mode.concurrency, on_settle)
    close = clock.env.now
    while not clock.done.triggered:
        if clock.server_seconds is None:
            yield clock.env.timeout(window_s)
        else:  # windows close every window_s whatever the server step took (at once if it took longer)
            close += window_s
            yield clock.env.timeout(max(0.0, close - clock.env.now))
        yield clock.env.timeout(0)  # let every arrival due at this instant come in first
        ready = inbox
        if late:
            ready, held = split_due(inbox, clock.round, late)
            for task in ready:  # a scripted-late client was busy until now
                clock.free(task)
            inbox = held
        else:
            inbox = []
        due = sorted(ready, key=lambda t: (t.finishes_at, t.client, t.index))
        for task in due:
            task.staleness = clock.version - task.version
        yield from server_step(clock, due)
        clock.aggregate(due)
        clock.round += 1
        if clock.check_stop():
            return
        _dispatch_in_id_order(clock, clock.mode.concurrency, on_settle)


def _dispatch_in_id_order(clock: ProtocolClock, limit: int, on_settle: Callable[[Task], None]) -> None:
    """Send the current model to idle, available clients, lowest id first (or the selector's
    choice, :meth:`~fedclock.scheduling.cohorts.Cohorts.pick_for_window`), up to ``limit`` in flight."""
    if len(clock.in_flight) < limit:
        chosen = clock.cohorts.pick_for_window(limit - len(clock.in_flight), clock.env.now, clock.round, clock.version)
        if chosen is not None:
            for client in chosen:
                clock.dispatch(client, on_settle)
            return
    idle = clock.cohorts.idle
    while len(clock.in_flight) < limit and idle.count(clock.env.now, clock.round):
        clock.dispatch(idle.at(0), on_settle)

