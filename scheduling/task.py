"""One unit of client work, from dispatch to its end, and what a task of an algorithm costs.

Vocabulary of the clock (every module of ``scheduling/`` uses it): a task *settles* when
the server stops waiting for it, at :attr:`Task.settles_at`: either its result *arrives*
(at :attr:`Task.finishes_at`) or the server *gives up* on it (at :attr:`Task.gives_up_at`:
the client lost its connection, or the task is slower than ``mode.task_timeout_s``). The
protocol that dispatched the task is told through :attr:`Task.on_settle`. A task then *ends*
with one of the statuses below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, NamedTuple, Sequence

import simpy

from fedclock.scheduling.devices import TaskTiming

APPLIED = "applied"
"""Its result was handed to the server."""
DROPPED = "dropped"
"""Its result arrived after its sync round closed and was not used."""
UNFINISHED = "unfinished"
"""The run stopped before it settled."""
LOST = "lost"
"""The client lost its connection; the server gave up on it."""
TIMED_OUT = "timed_out"
"""Slower than ``mode.task_timeout_s``; the server gave up on it (its client finishes it anyway)."""
CANCELLED = "cancelled"
"""Over-commitment (``mode.overcommit``): its sync round closed at the K-th arrival or the
deadline before it arrived; the server cancelled it then (nothing of it is kept)."""


class Task:
    """One unit of client work, from dispatch to its end (a plain class with ``__slots__``:
    one is built per dispatch)."""

    __slots__ = ("index", "client", "client_task", "round", "version", "dispatched_at", "timing", "bytes_down",
                 "bytes_up", "num_samples", "status", "staleness", "version_applied", "ended_at", "metrics", "late",
                 "steps", "steps_full", "steps_reported", "gives_up_at", "lost", "started",
                 "upload_discarded", "finishes_at", "upload_kind",
                 "on_settle", "settled", "free_event", "_env")

    def __init__(self, *, index: int, client: int, client_task: int, round: int, version: int,
                 dispatched_at: float, timing: TaskTiming, bytes_down: int, bytes_up: int, num_samples: int,
                 steps: int | None = None, steps_full: int | None = None,
                 on_settle: Callable[["Task"], None] | None = None, env: simpy.Environment | None = None) -> None:
        self.index = index
        self.client = client
        self.client_task = client_task
        """How many tasks this client had before this one."""
        self.round = round
        self.version = version
        """The server version the task was dispatched with."""
        self.dispatched_at = dispatched_at
        self.timing = timing
        self.bytes_down = bytes_down
        self.bytes_up = bytes_up
        self.num_samples = num_samples
        self.steps = steps
        """Local steps the clock assigned to the task (None: the algorithm's full count)."""
        self.steps_full = steps_full
        """The algorithm's full local step count for this client."""
        self.steps_reported: int | None = None
        """Local steps the client reports it ran (recorded with :attr:`metrics`; None before)."""
        self.on_settle = on_settle
        """What the protocol does when the task settles, at :attr:`settles_at`."""
        self._env = env
        self.status = "running"
        """``running`` until it ends with one of the statuses of this module."""
        self.staleness: int | None = None
        """Server versions between its dispatch and the version it was applied to."""
        self.version_applied: int | None = None
        self.ended_at: float | None = None
        self.metrics: dict[str, float] = {}
        """Training metrics the client reported (recorded by the clock when the server applies
        the task's result, from the backend's :class:`Applied`)."""
        self.late = False
        """Set when the task's round closed before it arrived."""
        self.gives_up_at: float | None = None
        """When the server gives up on the task (lost, or slower than the timeout); None when
        its result reaches the server."""
        self.lost = False
        """The client lost its connection: the result never comes back."""
        self.started = False
        """The backend computes the task (lost-at-dispatch tasks are never computed)."""
        self.upload_discarded = False
        """Known at dispatch: the server will not use the task's upload (it gives up on the
        task first, or drops it as late); only the client state the task leaves can matter,
        so the backend may compute it when that state is next needed."""
        self.finishes_at: float = dispatched_at + (timing.download_s + timing.compute_s + timing.upload_s)
        """When the client's result reaches the server (had it not been lost)."""
        self.upload_kind: Hashable | None = None
        """What the task uploads, told at its dispatch (``Clock(upload_kind=...)``: only when
        the server's step is charged, :mod:`fedclock.scheduling.server_device`); None: not told."""
        self.settled = False
        """The kernel has settled it (or is about to, at this instant)."""
        self.free_event: simpy.Event | None = None
        """:attr:`client_free`, once someone asked for it (None: nobody waits for the client)."""

    @property
    def settles_at(self) -> float:
        """When the server hears back or gives up."""
        return self.gives_up_at if self.gives_up_at is not None else self.finishes_at

    @property
    def client_free(self) -> simpy.Event:
        """Fires when the client can take new work (its arrival, or its real finish after a
        give-up); made on first use."""
        if self.free_event is None:
            self.free_event = simpy.Event(self._env)  # type: ignore[arg-type]
        return self.free_event

    def renew_client_free(self) -> None:
        """Make :attr:`client_free` a fresh event, for the client's real finish after the
        server gave up on the task (whoever waited on the old one is woken at the give-up)."""
        self.free_event = simpy.Event(self._env)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (f"Task(index={self.index}, client={self.client}, client_task={self.client_task}, round={self.round}, "
                f"version={self.version}, dispatched_at={self.dispatched_at}, timing={self.timing}, "
                f"status={self.status!r}, staleness={self.staleness}, version_applied={self.version_applied}, "
                f"ended_at={self.ended_at}, steps={self.steps}, lost={self.lost})")


class Reported(NamedTuple):
    """What a client reported with a result the server applied."""

    metrics: dict[str, float]
    """The algorithm's training metrics (``train_loss``, ...)."""
    steps: int | None
    """Local steps the client ran (None: not reported; the assigned count stands)."""


class Applied(int):
    """What the backend's ``apply`` returns: the server version (an ``int``), with what the
    client of each applied task reported, in the tasks' order. A backend that returns a plain
    ``int`` reports nothing (the tasks keep empty metrics); the clock records the reports on
    the tasks, so the backend never writes a :class:`Task`."""

    reports: tuple[Reported, ...]

    def __new__(cls, version: int, reports: Sequence[Reported] = ()) -> "Applied":
        applied = super().__new__(cls, version)
        applied.reports = tuple(reports)
        return applied


@dataclass(frozen=True)
class TaskCosts:
    """What one task of the algorithm costs: bytes each way and work per client size."""

    bytes_down: int
    bytes_up: int
    work: Callable[[int], float]
    local_steps: Callable[[int], int] | None = None
    """Full local step count per client size; with ``work_for_steps`` the clock assigns
    every task its number of steps (partial work)."""
    work_for_steps: Callable[[int, int], float] | None = None
    """Work of a task of (client size, steps)."""
