"""The processes a local Ray start began, and ending them: ``ray.shutdown`` waits only for the
processes it started itself (the GCS, the raylet, the log monitor), not for the workers and
agents the raylet started, which exit later, once they notice; a command that exits at once
would leave them behind. :class:`fedclock.actors.ray_start.RayStart` lists its start's
processes with :func:`children` and ends them with :func:`end` (psutil: the process tree
is read portably, not from ``/proc``)."""
from __future__ import annotations

from typing import Any

LEFT_GRACE_S = 2.0
"""How long :func:`end` waits for a Ray process that outlived ``ray.shutdown`` (a worker or
agent whose raylet was killed exits once it notices) before it kills it."""


def children() -> list[Any]:
    """This process's children (``psutil`` processes)."""
    import psutil

    return list(psutil.Process().children())


def with_descendants(processes: list[Any]) -> list[Any]:
    """``processes`` and every live descendant of them."""
    import psutil

    found = list(processes)
    for proc in processes:
        try:
            found.extend(proc.children(recursive=True))
        except psutil.Error:
            continue
    return found


def end(processes: list[Any]) -> None:
    """After ``ray.shutdown``: wait up to :data:`LEFT_GRACE_S` for ``processes`` to exit,
    then kill those left, so that none outlives the run (``ray.shutdown`` waits for the
    processes it started itself, not for the raylet's workers and agents)."""
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=LEFT_GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=LEFT_GRACE_S)
