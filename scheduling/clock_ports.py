"""What the clock calls and what calls it back (:class:`~fedclock.scheduling.clock.Clock`):
the backend that does the real work, the recorder it reports to, and the script of scripted
changes. The clock calls these; none of them is imported by the clock's own rooms."""
from __future__ import annotations

from typing import Protocol, Sequence

from fedclock.scheduling.task import Task
from fedclock.scheduling.timeline import ClockControl

__all__ = ["Backend", "Recorder", "Script"]


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

    def start(self, clock: ClockControl) -> None:
        """Apply what is due at the start and schedule the rest (before the first dispatch)."""

    def version_reached(self, clock: ClockControl) -> None:
        """The server version just changed (called inside :meth:`Clock.aggregate`)."""

    def retire(self, clients: Sequence[int], reason: str) -> None:
        """Take ``clients`` out of every later cohort and slot, for good, and record why."""
