"""``runtime.task_wall_timeout_s`` (issue 33): a user's algorithm that hangs fails the run with
one line naming the client and its task, on the inline backend and on Ray actors, instead of
hanging it; without the setting nothing changes."""
from __future__ import annotations

import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fedclock.actors.watchdog import TaskHung, wall_limit
from fedclock.scenarios.cli import main

SLEEPY = '''
import time

from fedclock.algorithms.fedavg import FedAvg


class Sleepy(FedAvg):
    """FedAvg whose client 1 hangs in its first task."""

    def client_update(self, payload, client_state, data, rng):
        if data.client == 1:
            time.sleep(120)
        return super().client_update(payload, client_state, data, rng)
'''


def _scenario(folder: Path, runtime: str) -> Path:
    folder.mkdir()
    (folder / "sleepy.py").write_text(SLEEPY, encoding="utf-8")
    (folder / "scenario.yaml").write_text(textwrap.dedent(f"""\
        name: hangs
        dataset: {{name: digits, partition: {{type: iid}}}}
        population: {{num_clients: 3}}
        algorithm: {{name: "sleepy:Sleepy", lr: 0.1, batch_size: 16, local_steps: 1}}
        mode: {{type: sync}}
        stop: {{rounds: 2}}
        evaluation: {{every: 2}}
        runtime: {runtime}
        output: {{progress: false}}
        """), encoding="utf-8")
    return folder / "scenario.yaml"


def test_wall_limit_interrupts_a_sleep_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGALRM)
    start = time.perf_counter()
    with pytest.raises(TaskHung, match=r"^client 4's task 2: still running after 0.05 s of wall time"):
        with wall_limit(0.05, "client 4's task 2"):
            time.sleep(10)
    assert time.perf_counter() - start < 5
    assert signal.getsignal(signal.SIGALRM) is before
    with wall_limit(None, "unlimited"):
        time.sleep(0.01)
    with wall_limit(5.0, "quick"):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer is off after the block


def _fails_in_one_line(file: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    start = time.perf_counter()
    assert main(["run", str(file), "--quiet", "--out", str(out), *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fedclock: error: client 1's task 0: still running after 1 s of wall time") and \
        err.count("\n") == 1, err
    assert time.perf_counter() - start < 100  # not the 120 s the plugin sleeps


def test_a_hanging_plugin_fails_an_inline_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = _scenario(tmp_path / "inline", "{backend: inline, task_wall_timeout_s: 1}")
    _fails_in_one_line(file, tmp_path / "out", capsys)


def test_a_hanging_plugin_fails_a_ray_run(ray_runtime: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """On Ray the limit runs in the executor's process (the user's file shipped there). About
    12 s on a quiet 2-core machine: the CLI starts an executor and a server of its own, with the
    user's file in their environment (what this test checks)."""
    ray_runtime.close()  # the CLI starts its own actors on the session's 2 CPUs (the shared ones come back when used)
    file = _scenario(tmp_path / "ray", "{num_actors: 1, placement: pooled, task_wall_timeout_s: 1}")
    _fails_in_one_line(file, tmp_path / "out", capsys)
