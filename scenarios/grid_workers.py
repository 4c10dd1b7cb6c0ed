"""How the worker processes of a grid side by side start (:mod:`fedclock.scenarios.grid`),
without importing PyTorch here, so that the console script can start them first.

Measured on the 2-core box (``benchmarks/RESULTS.md``, "Grid side by side, third pass"): a
fresh process pays about 7 CPU seconds before its first run does any work: importing PyTorch,
pandas and fedclock, and PyTorch's own lazy import of ``torch._dynamo`` at the run's FLOP count
(about 2 CPU s of it: the first operator counted on meta tensors calls a function PyTorch marks
not to compile, :mod:`fedclock.algorithms.flop_count`). One after
another that is paid once; a ``spawn``-ed worker pays it again, inside its first run, so each
run side by side was slower than alone and the grid used several times the CPU. On Linux the
workers are therefore forked from one ``forkserver`` process (Python's ``multiprocessing``)
that imported those modules once (:data:`PRELOAD`). Importing runs no PyTorch operation, so
no OpenMP or BLAS thread pool has done work when the server forks (the hazard of forking a
process that used them); the server is a fresh interpreter, not a copy of the calling
process, so a Ray client or open files of the caller are not in it. Elsewhere (macOS, where
forking a process that loaded Apple's frameworks is unsafe; Windows, which cannot fork) the
workers are ``spawn``-ed and each imports on its own.

The calling process imports PyTorch too (to read the file and write the summary). The console
script (:mod:`fedclock.scenarios.entry`) starts the server before that (:func:`start_early`)
when its command line asks for workers (:func:`fedclock.scenarios.entry.asks_for_workers`), so that the two imports run
at once on two cores instead of one after the other. A start that the grid does not use (a
file with one job left) costs the server's imports on an otherwise idle core, never a result.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import signal
import sys

PRELOAD = ("fedclock.scenarios.grid", "pandas", "torch._dynamo")
"""What the forkserver imports once for every worker: the grid (PyTorch, NumPy, pyarrow,
pydantic and the fedclock modules a run uses), pandas (the result writers import it lazily)
and ``torch._dynamo``, which PyTorch imports lazily at a process's first call of a function
it marks not to compile (a dispatch mode's ``__torch_dispatch__`` and the meta kernels' type
promotion, both met by the FLOP count of every run: ``benchmarks/RESULTS.md``, "Issue 34 ...:
the FLOP count's import of TorchDynamo")."""


def forks_workers() -> bool:
    """Whether workers are forked from a preloaded server here (Linux) rather than spawned."""
    return sys.platform.startswith("linux") and "forkserver" in multiprocessing.get_all_start_methods()


def worker_context() -> multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext:
    """The context the grid starts its workers with (module docstring)."""
    if forks_workers():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        return context
    return multiprocessing.get_context("spawn")


def start_early() -> None:
    """Start the forkserver now (it imports :data:`PRELOAD` while the caller goes on); nothing
    where workers are spawned."""
    if forks_workers():
        worker_context()
        from multiprocessing import forkserver

        forkserver.ensure_running()


PR_SET_PDEATHSIG = 1
"""Linux's ``prctl`` option: the signal a process gets when the thread that started it ends."""


class ParentWatch:
    """A worker's tie to the grid's process (``grid_pid``; its parent when None): the worker
    gets ``SIGTERM`` the moment that process ends, however it ends (``SIGKILL``, the OOM
    killer). Spawned workers are the grid's children, and Linux's parent-death signal
    (``PR_SET_PDEATHSIG``, through ``ctypes``) delivers it. Forked ones are children of the
    forkserver, which outlives the grid while a worker holds its pipe's end; for them (and
    where that signal does not exist) a thread looks at the grid's process every
    :data:`WATCH_EVERY_S` and sends the signal itself. :meth:`gone` is the same check, made
    by the worker between the events of its run."""

    def __init__(self, grid_pid: int | None = None) -> None:
        self.parent = os.getppid()
        self.grid_pid = grid_pid
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            except (OSError, AttributeError):  # no prctl: the thread alone
                pass
        if self.gone():  # it ended before the signal was asked for
            os.kill(os.getpid(), signal.SIGTERM)
        import threading

        threading.Thread(target=self._watch, name="fedclock-grid-watch", daemon=True).start()

    def gone(self) -> bool:
        """Whether the grid's process has ended."""
        if os.getppid() != self.parent:
            return True
        return self.grid_pid is not None and self.grid_pid != self.parent and not running(self.grid_pid)

    def _watch(self) -> None:
        import time

        while not self.gone():
            time.sleep(WATCH_EVERY_S)
        os.kill(os.getpid(), signal.SIGTERM)


WATCH_EVERY_S = 0.25
"""How often a worker's thread looks whether the grid's process still runs."""


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (one that ended and was not yet reaped, a zombie, has not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):  # no /proc (not Linux): whether a signal could reach it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
