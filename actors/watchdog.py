"""A wall-clock limit per client task (``runtime.task_wall_timeout_s``): a user's plugin that
hangs fails the run with the client and task named, instead of hanging it.

The limit is a real-time interval timer (``signal.setitimer``) whose handler raises
:class:`TaskHung` in the code that runs the task, on the executor (in this process with the
inline backend, in the actor's process on Ray). Python runs signal handlers in the main
thread, between bytecodes and inside blocking calls such as ``time.sleep``; a task running
outside the main thread, or stuck inside one C call that never returns to Python, is not
interrupted. Virtual time is untouched: the limit is on wall time and only ends runs.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator


class TaskHung(Exception):
    """A client task ran longer than ``runtime.task_wall_timeout_s`` of wall time (one line)."""


@contextmanager
def wall_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Run the block with a wall-clock limit of ``seconds`` (None: none); past it, raise
    :class:`TaskHung` naming ``what``. Without a main thread to interrupt the block runs
    unlimited (see the module's docstring)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TaskHung(f"{what}: still running after {seconds:g} s of wall time (runtime.task_wall_timeout_s); "
                       f"the algorithm, model or dataset code it runs may hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
