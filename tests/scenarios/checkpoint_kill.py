"""Driver of the SIGKILL fault-injection test (``test_checkpoint_faults.py``): run as
``python -m tests.scenarios.checkpoint_kill OUT`` from the repository root.

One fresh process (single-threaded: ``torch.set_num_threads(1)`` before any work, so a forked
child never inherits a busy OpenMP pool) runs the scenario whole into ``OUT/whole``, counting
the file-system steps of its checkpoint of version :data:`TARGET` (from making the tables
durable to pruning old checkpoints), then forks, per kill point ``k``, a child that runs the
scenario into ``OUT/killed-k`` and sends itself ``SIGKILL`` just before step ``k`` of that
checkpoint (no ``finally`` block, no buffered write, no exit handler runs: what a power cut
or the OOM killer leaves), then resumes that folder itself.

It writes ``OUT/report.json``: per kill point, the step, how the killed child ended (the
signal number) and the resumed run's notes (a resume that fails ends the driver with its
traceback). The test reads it and compares
every resumed folder's tables with the whole run's. Forking one warm process instead of
starting ``python`` (and importing torch) per kill point keeps the test at seconds.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import torch

from fedclock.actors.runtime import Runtime
from fedclock.scenarios import experiment
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.run_costs import CountedCosts
from tests.actors.test_determinism import ASYNC_HETEROGENEOUS
from tests.conftest import scenario

SMALL = {**ASYNC_HETEROGENEOUS, "population": {**ASYNC_HETEROGENEOUS["population"], "num_clients": 4},
         "dataset": {**ASYNC_HETEROGENEOUS["dataset"], "max_train_samples": 300},
         "stop": {"versions": 9}, "evaluation": {"every": 2},
         "output": {"checkpoint_every": 3, "progress": False, "flush_every_s": 1000}}
"""Checkpoints at versions 3, 6 and 9; the kills hit the one of version 9, which also prunes
checkpoint 3. 300 training samples keep each of the test's many runs short. Tables are
flushed only when a checkpoint makes them durable (not by wall time), so every run takes the
same steps."""
TARGET = 9
STEPS: list[tuple[Any, str]] = [(os, "replace"), (os, "fsync"), (os, "unlink"), (os, "rmdir"), (os, "mkdir"),
                                (shutil, "rmtree"), (torch, "save"), (pq, "write_table"), (Path, "write_text")]
"""The file-system calls counted as steps of checkpointing."""


class Plan:
    """What the wrapped steps do: record each step of the checkpoint of :data:`TARGET` in
    ``done`` and, with ``kill_at``, kill the process (``SIGKILL``) just before that step."""

    def __init__(self) -> None:
        self.kill_at: int | None = None
        self.done: list[str] = []
        self.armed = False


def install(plan: Plan) -> None:
    """Wrap :data:`STEPS` and the run's checkpoint writer to follow ``plan`` (for good: this
    process only ever runs the test's scenarios)."""

    def step(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if plan.armed:
                if plan.kill_at is not None and len(plan.done) == plan.kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                plan.done.append(name)
            return original(*args, **kwargs)
        return wrapped

    for owner, attr in STEPS:
        setattr(owner, attr, step(f"{getattr(owner, '__name__', owner)}.{attr}", getattr(owner, attr)))
    save = experiment._save_checkpoint

    def saving(writer: Any, out_dir: Path, ckpt: Any, mark: str, run_id: str) -> None:
        plan.armed = ckpt.version == TARGET
        try:
            save(writer, out_dir, ckpt, mark, run_id)
        finally:
            plan.armed = False
    experiment._save_checkpoint = saving


def in_child(work: Callable[[], None]) -> tuple[int | None, int | None]:
    """Run ``work`` in a forked child; (the signal that ended it or None, its exit code or None).
    The parent's objects are frozen first, so the child's garbage collector does not touch
    (and copy) every page it inherits."""
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            work()
        except BaseException:  # reported through the exit code, the traceback on stderr
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status), None
    return None, os.WEXITSTATUS(status)


def main(out: Path) -> int:
    torch.set_num_threads(1)
    s = scenario(**SMALL)
    inline = Runtime("inline")
    plan = Plan()
    install(plan)
    costs = CountedCosts()  # counted by the whole run, inherited by every forked child and resume
    run_scenario(s, inline, out / "whole", costs=costs)  # here, so that every import and cache is warm before forking
    steps = list(plan.done)
    # Of a run of consecutive fsyncs only the first is a kill point: a kill before a later
    # one leaves the same files (fsync changes nothing a killed process's successor can see).
    points = [k for k, name in enumerate(steps) if name != "os.fsync" or k == 0 or steps[k - 1] != "os.fsync"]
    report = []
    for k in points:
        folder = out / f"killed-{k}"
        plan.kill_at, plan.done = k, []
        kill_signal, _ = in_child(partial(run_scenario, s, inline, folder, costs=costs))
        plan.kill_at = None
        notes: list[str] = []
        run_scenario(s, inline, folder, resume=True, on_note=notes.append, costs=costs)  # here: nothing kills it
        report.append({"point": k, "step": steps[k], "signal": kill_signal, "notes": notes})
    (out / "report.json").write_text(json.dumps({"steps": steps, "points": report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
