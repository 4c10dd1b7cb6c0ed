"""A grid dies with its parent (:mod:`fedclock.scenarios.grid`): a ``fedclock run --jobs 2``
killed with SIGKILL (what the OOM killer does) leaves no worker training on; SIGTERM to it is
passed to every worker at once, and each records its run as interrupted."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FILE = """\
name: long
seeds: [1, 2]
dataset: {name: digits}
model: {name: mlp, hidden: [8]}
population: {num_clients: 4}
algorithm: {name: fedasync, lr: 0.05, local_epochs: 1, batch_size: 16}
mode: {type: async, concurrency: 2}
stop: {versions: 1000000}
evaluation: {every: 50, personalized: false}
runtime: {backend: inline}
output: {progress: false, flush_every_s: 1000}
"""
"""Two jobs that would run for hours: only a signal ends them."""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _start_grid(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int], list[Path]]:
    """``fedclock run FILE --jobs 2`` as the console script starts it, once both jobs run:
    the process, the workers' pids (from each job's run.json) and the job folders."""
    file, out = tmp_path / "long.yaml", tmp_path / "out"
    file.write_text(FILE)
    proc = subprocess.Popen([sys.executable, "-m", "fedclock.scenarios.entry", "run", str(file), "--jobs", "2",
                             "--out", str(out), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    jobs = [out / "seed_1", out / "seed_2"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if all((j / "metrics.parquet").is_file() for j in jobs):
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the grid's jobs did not start within 240 s")
    pids = [int(json.loads((j / "run.json").read_text())["pid"]) for j in jobs]
    assert len(set(pids)) == 2 and proc.pid not in pids and all(_alive(p) for p in pids)
    return proc, pids, jobs


def _gone_within(pids: list[int], seconds: float) -> float:
    """Seconds until every one of ``pids`` ended (fails after ``seconds``)."""
    start = time.monotonic()
    while any(_alive(p) for p in pids):
        if time.monotonic() - start > seconds:
            for p in pids:  # the test's own clean-up: the fault stays reported
                if _alive(p):
                    os.kill(p, signal.SIGKILL)
            pytest.fail(f"workers {[p for p in pids if _alive(p)]} still ran {seconds} s after their grid ended")
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.slow
def test_a_sigkilled_grid_parent_leaves_no_worker_running(tmp_path: Path) -> None:
    """SIGKILL of the parent: both workers are gone within 5 s (they ran to the end of their
    jobs before, writing checkpoints that --unfinished then refused as still running)."""
    proc, pids, jobs = _start_grid(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    _gone_within(pids, 5.0)
    for job in jobs:  # the folder reads as interrupted (recorded by the worker, or read from a dead pid)
        status = json.loads((job / "run.json").read_text())
        assert status["status"] in ("interrupted", "running")
        from fedclock.scenarios.runstatus import read_status

        read = read_status(job)
        assert read is not None and read.status == "interrupted"


@pytest.mark.slow
def test_sigterm_to_the_grid_parent_reaches_every_worker_at_once(tmp_path: Path) -> None:
    """SIGTERM: the parent exits 143 within a few seconds (it joined each worker for 10 s
    before terminating it), its workers are gone, and each job's folder says interrupted."""
    proc, pids, jobs = _start_grid(tmp_path)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - start
    assert proc.returncode == 143, err
    assert took < 6.0, took
    _gone_within(pids, 1.0)
    for job in jobs:
        status = json.loads((job / "run.json").read_text())
        assert status["status"] == "interrupted" and "SIGTERM" in status["reason"], status
