"""``fedclock run --profile-startup``: where the seconds between the process's start and the
run's first client task go, printed once that task is dispatched.

Phases (wall seconds, the first run of the file only): ``imports`` (from the process's start,
as the operating system records it, to the command reading its file: the interpreter,
PyTorch, Ray's client, fedclock), ``scenario`` (reading and checking the file), ``data``
(:func:`~fedclock.scenarios.data.federation.build_federation`: reading, standardizing and splitting
the data set), ``model`` (the algorithm and its model), ``FLOP count`` (counting what a task
and a server step cost, :mod:`fedclock.algorithms.task_cost`: PyTorch's compiler is imported
here unless every count is cached on disk), ``actors`` (the runtime's session: on Ray, waiting
for Ray and the executors that started in the background while the phases above ran), and
``other`` (the rest up to the first dispatch: results files, the clock, selection). Off
unless asked: nothing is measured then.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["StartupProfile", "active", "begin", "phase", "watch_first_task"]

PHASES = ("imports", "scenario", "data", "model", "FLOP count", "actors", "evaluation")


@dataclass
class StartupProfile:
    """The phases measured so far, in wall seconds, and when the process started (epoch s)."""

    origin: float
    seconds: dict[str, float] = field(default_factory=dict)
    first_task: float | None = None

    def report(self) -> str:
        """One line: every phase, the rest, and the first task's time since the process started."""
        total = (self.first_task if self.first_task is not None else time.time()) - self.origin
        parts = [f"{name} {self.seconds.get(name, 0.0):.2f} s" for name in PHASES]
        parts.append(f"other {max(total - sum(self.seconds.values()), 0.0):.2f} s")
        where = "first task dispatched" if self.first_task is not None else "no task dispatched"
        return f"start-up: {', '.join(parts)}; {where} {total:.2f} s after the process started"


_ACTIVE: StartupProfile | None = None


def begin() -> StartupProfile:
    """Start profiling this process: ``imports`` is the time since the process started."""
    global _ACTIVE
    import psutil

    origin = psutil.Process().create_time()
    _ACTIVE = StartupProfile(origin=origin, seconds={"imports": time.time() - origin})
    return _ACTIVE


def active() -> StartupProfile | None:
    """The profile being taken, or None (not asked, or its first task already dispatched)."""
    return _ACTIVE if _ACTIVE is not None and _ACTIVE.first_task is None else None


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Add the wall time of the block to ``name`` while a profile is being taken."""
    profile = active()
    start = time.time()
    try:
        yield
    finally:
        if profile is not None:
            profile.seconds[name] = profile.seconds.get(name, 0.0) + time.time() - start


def watch_first_task(session: Any) -> None:
    """Mark the profile's end at the session's first ``start`` (its first dispatched task), and
    time its evaluations before it (``evaluation``)."""
    profile = active()
    if profile is None:
        return
    start, evaluate = session.start, session.evaluate

    def scored() -> Any:
        with phase("evaluation"):
            return evaluate()

    def first(task: Any) -> Any:
        if profile.first_task is None:
            profile.first_task = time.time()
        return start(task)

    session.start = first
    session.evaluate = scored
