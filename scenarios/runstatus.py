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
refused unless the run was told to overwrite it (``--overwrite``), which first deletes the
earlier run's files: exactly the entries a run writes (:mod:`fedclock.scenarios.runfiles`). A
folder holding anything else is refused, naming the first such entry, and nothing in it is
deleted. ``--resume DIR`` takes over DIR's own run. Taking a folder is exclusive: the claim
holds a lock on the folder while it checks and empties it, and creates ``run.json``
only where none is (a hard link, atomic), so of two runs taking one folder at the same moment
one gets it and the other is refused in one line.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

from fedclock.scenarios import provenance
from fedclock.scenarios.runfiles import STATUS_FILE, foreign_entry

RUNNING, FINISHED, INTERRUPTED, FAILED = "running", "finished", "interrupted", "failed"


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


STATUS_SIZE = 1024
"""The bytes ``run.json`` takes on disk (its JSON padded with spaces): the status of a run's end
can then be written over it in place when the disk is full (:func:`finish`)."""


def _status_bytes(status: RunStatus) -> bytes:
    text = json.dumps(asdict(status), indent=1).encode()
    return text + b" " * max(0, STATUS_SIZE - len(text)) + b"\n"


def _write_tmp(run_dir: Path, status: RunStatus) -> Path:
    """``status`` in a temporary file of this process alone (removed again if it cannot be written)."""
    tmp = run_dir / f".{STATUS_FILE}.{uuid.uuid4().hex}.tmp"
    try:
        tmp.write_bytes(_status_bytes(status))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_status(run_dir: Path, status: RunStatus) -> None:
    """Write ``run.json`` atomically (temporary file, then rename; no temporary file is left
    when the disk refuses it)."""
    status.updated = time.time()
    tmp = _write_tmp(run_dir, status)
    try:
        os.replace(tmp, run_dir / STATUS_FILE)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _create_status(run_dir: Path, status: RunStatus) -> None:
    """Create ``run.json`` with ``status`` only if no run.json is there (a hard link of a complete
    temporary file: exclusive and atomic); another run's is :class:`FolderInUse`."""
    status.updated = time.time()
    tmp = _write_tmp(run_dir, status)
    try:
        os.link(tmp, run_dir / STATUS_FILE)
    except FileExistsError:
        raise FolderInUse(f"{run_dir}: another fedclock run took this folder at the same moment; choose another "
                          f"folder (--out DIR)") from None
    except OSError:  # a file system without hard links: an exclusive create, then the content
        try:
            fd = os.open(run_dir / STATUS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise FolderInUse(f"{run_dir}: another fedclock run took this folder at the same moment; choose "
                              f"another folder (--out DIR)") from None
        with os.fdopen(fd, "wb") as f:
            f.write(_status_bytes(status))
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder (``flock`` on its descriptor; released when the
    process ends, however it ends) while a run takes it: two runs claiming one folder at the
    same moment take turns, and the second sees the first's ``running``. Where the file system
    has no locks, the exclusive creation of ``run.json`` still lets only one fresh run in."""
    if fcntl is None:
        yield
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def claim(run_dir: Path, resume: bool = False, overwrite: bool = False) -> RunStatus:
    """Take ``run_dir`` for a run (see the module docstring) and mark it ``running``; returns
    the status written (its ``run_id`` names the run's checkpoints). One line
    (:class:`FolderInUse`) for a folder that is a file, holds a foreign file, another run or
    a run still running."""
    if run_dir.exists() and not run_dir.is_dir():
        raise FolderInUse(f"{run_dir}: is a file, not a folder; give a folder for the results (--out DIR)")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise FolderInUse(f"{run_dir}: a part of this path is a file, not a folder; give a folder for the results "
                          f"(--out DIR)") from None
    with _locked(run_dir):
        if resume:
            earlier = read_status(run_dir)
            if earlier is not None and earlier.status == RUNNING:
                raise FolderInUse(f"{run_dir}: the run in this folder is still running (process {earlier.pid}); "
                                  f"stop it before resuming it")
            run_id = earlier.run_id if earlier is not None else ""  # by an older fedclock: its checkpoints name none
            status = RunStatus(run_id=run_id, status=RUNNING, pid=os.getpid(), host=socket.gethostname(),
                               commit=provenance.run_commit())
            write_status(run_dir, status)
            return status
        if any(run_dir.iterdir()):
            _empty(run_dir, overwrite)
        status = RunStatus(run_id=uuid.uuid4().hex, status=RUNNING, pid=os.getpid(), host=socket.gethostname(),
                           commit=provenance.run_commit())
        _create_status(run_dir, status)
        return status


def _empty(run_dir: Path, overwrite: bool) -> None:
    """Delete the earlier run's entries of ``run_dir`` (:mod:`fedclock.scenarios.runfiles`),
    or refuse in one line: a foreign entry (named, kept), no ``overwrite``, a run still running."""
    foreign = foreign_entry(run_dir)
    if foreign is not None:
        raise FolderInUse(f"{run_dir}: the output folder holds {foreign.relative_to(run_dir).as_posix()}, which is "
                          f"not a file a fedclock run writes; fedclock deletes only its own files: move it away or "
                          f"choose an empty or new folder (--out DIR or output.dir)")
    earlier = read_status(run_dir)
    what = f"a {earlier.status} run" if earlier is not None else "an earlier run"
    if not overwrite:
        raise FolderInUse(f"{run_dir}: the output folder holds {what}'s results; give --overwrite to replace them, "
                          f"--resume {run_dir} to go on with it, or another folder (--out DIR)")
    if earlier is not None and earlier.status == RUNNING:
        raise FolderInUse(f"{run_dir}: the run in this folder is still running (process {earlier.pid}); "
                          f"stop it first or choose another folder")
    for path in sorted(run_dir.iterdir(), key=lambda p: p.name == STATUS_FILE):  # run.json last
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
        _write_in_place(run_dir, status)


def _write_in_place(run_dir: Path, status: RunStatus) -> None:
    """Write ``status`` over ``run.json``'s own bytes (which :data:`STATUS_SIZE` reserved), so a
    full disk, which refuses a new file, still gets the run's end; best effort (a read-only disk
    keeps the previous status, which then reads as ``interrupted``)."""
    data = _status_bytes(status)
    try:
        with (run_dir / STATUS_FILE).open("r+b") as f:
            if len(data) > os.fstat(f.fileno()).st_size:
                return  # would need new space
            f.write(data)
            f.truncate()
    except OSError:
        pass
