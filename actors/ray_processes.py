"""The processes a local Ray start began, and ending them: ``ray.shutdown`` waits only for the
processes it started itself (the GCS, the raylet, the log monitor), not for the workers and
agents the raylet started, which exit later, once they notice; a command that exits at once
would leave them behind. :class:`fedclock.actors.ray_start.RayStart` lists its start's
processes with :func:`children` and ends them with :func:`end` (psutil: the process tree
is read portably, not from ``/proc``).

A driver killed outright (SIGKILL, the OOM killer) cannot end them: Ray's daemons die with it
(their parent-death signal), but the raylet's workers and agents go on for about a minute.
So a driver that starts a local Ray lists its processes (:func:`remember`, in
:func:`record_dir`), removes the list when it ends them (:func:`forget`), and a driver about
to start a local Ray first ends what the lists of drivers no longer running name, saying so
(:func:`end_leftovers`; a process counts only with the start time listed, so a number the
system gave to another process since is never touched)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
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


def record_dir() -> Path:
    """Where each driver that started a local Ray lists that Ray's processes (one folder per
    user, in the temporary folder)."""
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"fedclock-ray-{user}"


def remember(processes: list[Any]) -> None:
    """List ``processes`` and their descendants (the local Ray this driver started: its
    daemons, and the workers and agents the raylet started) with their start times, so that
    if this driver is killed outright the next one can end them (:func:`end_leftovers`)."""
    import psutil

    me = psutil.Process()
    entries = []
    for proc in with_descendants(processes):
        try:
            entries.append([proc.pid, proc.create_time(), proc.name()])
        except psutil.Error:
            continue
    folder = record_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    tmp = folder / f".{me.pid}.tmp"
    tmp.write_text(json.dumps({"driver": [me.pid, me.create_time()], "processes": entries}), encoding="utf-8")
    os.replace(tmp, folder / f"{me.pid}.json")


def forget() -> None:
    """This driver's Ray ended as it should: remove its list."""
    (record_dir() / f"{os.getpid()}.json").unlink(missing_ok=True)


def _same(pid: int, started: float) -> Any:
    """The running process ``pid`` if it is the one that started at ``started`` (not a zombie,
    not a later process given the same number), else None."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > 0.01 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def end_leftovers() -> str | None:
    """End the Ray processes that drivers which no longer run left running (a driver killed
    outright: its raylet's workers and agents go on for about a minute, competing with the
    next run); a one-line note saying what was ended, None when nothing was."""
    import psutil

    folder = record_dir()
    if not folder.is_dir():
        return None
    ended: list[tuple[int, str]] = []
    drivers = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            driver_pid, driver_start = int(data["driver"][0]), float(data["driver"][1])
            entries = [(int(p), float(t), str(n)) for p, t, n in data["processes"]]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            path.unlink(missing_ok=True)
            continue
        if _same(driver_pid, driver_start) is not None:
            continue  # its driver still runs: its Ray is in use
        left = [(proc, name) for pid, started, name in entries if (proc := _same(pid, started)) is not None]
        for proc, _ in left:
            try:
                proc.terminate()
            except psutil.Error:
                pass
        end([proc for proc, _ in left])
        ended += [(proc.pid, name) for proc, name in left]
        if left:
            drivers.append(driver_pid)
        path.unlink(missing_ok=True)
    if not ended:
        return None
    names = ", ".join(f"{name} ({pid})" for pid, name in ended[:8]) + (" ..." if len(ended) > 8 else "")
    return (f"ended {len(ended)} Ray process(es) that a killed fedclock run (process "
            f"{', '.join(str(d) for d in drivers)}) left running: {names}")
