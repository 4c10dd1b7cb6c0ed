"""Who owns a run directory and how its run ended: ``run.json``.

Each run directory holds ``run.json``: the run's id (a random hex string, kept by
``--resume``), its status and, once it ended, the reason, with the process and host that ran
it. The status is ``running`` while it runs, then ``finished`` (the reason is the stop
reason), ``interrupted`` (Ctrl-C or SIGTERM) or ``failed`` (the error, one line). A run
killed outright (SIGKILL, power loss) cannot write its end: a ``running`` status whose
process is gone (same host) reads as ``interrupted``. ``fedclock compare`` and ``plot``
show every status but ``finished``. ``commit`` is the source commit of the fedclock that
started (or resumed) the run, ``+dirty`` when its work tree had changes
(:func:`fedclock.scenarios.provenance.run_commit`); ``fedclock reproduce`` lists reused runs
made at another commit.

A fresh run takes a folder only when it is empty or absent: a folder holding anything else
(an earlier run's tables, which ``plot``/``compare`` would read beside the new ones) is
refused unless the run was told to overwrite it (``--overwrite``), which first empties a
folder that holds a fedclock run (and refuses one that does not: fedclock deletes only what
it recognizes as its own). ``--resume DIR`` takes over DIR's own run.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from fedclock.scenarios import provenance

STATUS_FILE = "run.json"
RUNNING, FINISHED, INTERRUPTED, FAILED = "running", "finished", "interrupted", "failed"
RUN_MARKERS = (STATUS_FILE, "scenario.resolved.yaml", "metrics.parquet")
"""Files whose presence makes a folder a fedclock run directory (one ``--overwrite`` may empty)."""


class FolderInUse(Exception):
    """A fresh run pointed at a folder that holds something else (one line)."""


@dataclass
class RunStatus:
    """The content of ``run.json``."""

    run_id: str
    status: str
    reason: str = ""
    pid: int = 0
    host: str = ""
    updated: float = 0.0
    """Unix time of the last change."""
    commit: str = ""
    """The source commit the run was made at (module docstring; empty: an older fedclock)."""

    @property
    def label(self) -> str:
        """``status`` with its reason, for a table (``finished`` alone when finished)."""
        return self.status if self.status == FINISHED or not self.reason else f"{self.status}: {self.reason}"


def read_status(run_dir: Path) -> RunStatus | None:
    """``run.json`` of ``run_dir`` (None when absent or unreadable: a run by an older fedclock);
    a ``running`` run whose process is gone reads as ``interrupted``."""
    try:
        data = json.loads((run_dir / STATUS_FILE).read_text(encoding="utf-8"))
        status = RunStatus(**{k: data[k] for k in RunStatus.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None
    if status.status == RUNNING and status.host == socket.gethostname() and not _alive(status.pid):
        status.status, status.reason = INTERRUPTED, "the process ended without saying why (killed?)"
    return status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return pid > 0


def write_status(run_dir: Path, status: RunStatus) -> None:
    """Write ``run.json`` atomically (temporary file, then rename)."""
    status.updated = time.time()
    tmp = run_dir / f".{STATUS_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(status), indent=1), encoding="utf-8")
    os.replace(tmp, run_dir / STATUS_FILE)


def claim(run_dir: Path, resume: bool = False, overwrite: bool = False) -> RunStatus:
    """Take ``run_dir`` for a run (see the module docstring) and mark it ``running``; returns
    the status written (its ``run_id`` names the run's checkpoints)."""
    if resume:
        earlier = read_status(run_dir)
        if earlier is not None and earlier.status == RUNNING:
            raise FolderInUse(f"{run_dir}: the run in this folder is still running (process {earlier.pid}); "
                              f"stop it before resuming it")
        run_id = earlier.run_id if earlier is not None else ""  # a run by an older fedclock: its checkpoints name none
    else:
        run_id = uuid.uuid4().hex
        if run_dir.is_dir() and any(run_dir.iterdir()):
            _empty(run_dir, overwrite)
    run_dir.mkdir(parents=True, exist_ok=True)
    status = RunStatus(run_id=run_id, status=RUNNING, pid=os.getpid(), host=socket.gethostname(),
                       commit=provenance.run_commit())
    write_status(run_dir, status)
    return status


def _empty(run_dir: Path, overwrite: bool) -> None:
    earlier = read_status(run_dir)
    if not any((run_dir / m).exists() for m in RUN_MARKERS):
        raise FolderInUse(f"{run_dir}: the output folder holds files that are not a fedclock run; choose an empty "
                          f"or new folder (--out DIR or output.dir)")
    what = f"a {earlier.status} run" if earlier is not None else "an earlier run"
    if not overwrite:
        raise FolderInUse(f"{run_dir}: the output folder holds {what}'s results; give --overwrite to replace them, "
                          f"--resume {run_dir} to go on with it, or another folder (--out DIR)")
    if earlier is not None and earlier.status == RUNNING:
        raise FolderInUse(f"{run_dir}: the run in this folder is still running (process {earlier.pid}); "
                          f"stop it first or choose another folder")
    for path in run_dir.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def finish(run_dir: Path, status: RunStatus, state: str, reason: str) -> None:
    """Record how the run ended (best effort: a disk that is full or read-only keeps the
    previous status, which then reads as ``interrupted``)."""
    status.status, status.reason = state, " ".join(reason.split())[:300]
    try:
        write_status(run_dir, status)
    except OSError:
        pass
