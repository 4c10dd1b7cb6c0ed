"""The console script's early Ray start (scenarios/entry.py): when the command line says for
sure that it runs on Ray, and that a start nobody uses is shut down."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedclock.scenarios import entry
from fedclock.scenarios.entry import ray_address

FILE = """name: t
dataset: {name: digits}
model: {name: mlp}
population: {num_clients: 2}
algorithm: {name: fedavg}
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(FILE, encoding="utf-8")
    return path


def test_a_run_of_a_file_on_the_default_backend_is_on_ray(scenario: Path) -> None:
    assert ray_address(["run", str(scenario), "--quiet"]) == (True, None)
    assert ray_address(["run", str(scenario), "--address", "10.0.0.5:6379"]) == (True, "10.0.0.5:6379")
    assert ray_address(["run", str(scenario), "--set", "runtime.address=auto"]) == (True, "auto")
    assert ray_address(["run", "quickstart"]) == (True, None)  # a shipped scenario by name


def test_unsure_command_lines_start_nothing(scenario: Path) -> None:
    for argv in (["run", str(scenario), "--backend", "inline"], ["run", str(scenario), "--set=runtime.backend=inline"],
                 ["run", str(scenario), "--jobs", "2"], ["run", str(scenario), "--unfinished"],
                 ["run", "--resume", str(scenario.parent)], ["validate", str(scenario)], ["run", "no/such/file.yaml"],
                 ["run", str(scenario), "--set", "runtime.num_actors=2"], ["run", str(scenario), "-h"], []):
        assert ray_address(argv) == (False, None), argv


@pytest.mark.parametrize("extra", ["runtime: {backend: inline}\n",
                                   "runs:\n  - {name: a}\n  - {name: b, runtime: {backend: inline}}\n",
                                   "runs:\n  - {name: a, runtime: {address: x:1}}\n  - {name: b}\n",
                                   "runtime: [1]\n"])
def test_files_not_wholly_on_one_ray_start_nothing(scenario: Path, extra: str) -> None:
    scenario.write_text(FILE + extra, encoding="utf-8")
    assert ray_address(["run", str(scenario)]) == (False, None)


def test_a_run_that_stops_before_it_uses_ray_shuts_the_early_start_down(scenario: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A user's mistake found while loading the file: one line, exit status 2, and the Ray
    started on the chance of a run is shut down."""
    import ray

    calls: list[Any] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append("init"))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    scenario.write_text(FILE.replace("fedavg", "no_such_algorithm"), encoding="utf-8")
    assert entry.main(["run", str(scenario), "--quiet"]) == 2
    assert calls == ["init", "shutdown"]
    assert "no_such_algorithm" in capsys.readouterr().err


@pytest.mark.parametrize("thread", [False, True])
def test_the_console_script_exits_at_once_after_its_exit_handlers(thread: bool) -> None:
    """:func:`entry.exit_now`: the exit status, what was printed and the exit handlers'
    output arrive as with ``sys.exit``; a thread still working is waited for first."""
    import subprocess
    import sys

    code = ("import atexit, threading, time; from fedclock.scenarios.entry import exit_now\n"
            "atexit.register(print, 'handler ran')\n"
            f"if {thread}: threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
            "print('result', end=' ')\n"
            "exit_now(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 3, done.stderr
    assert done.stdout == ("result thread done\nhandler ran\n" if thread else "result handler ran\n")


def test_an_unparsable_line_is_unsure_and_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """The early reading of the command line is silent: the command's own parser speaks."""
    from fedclock.scenarios.entry import asks_for_workers

    for argv in ([], ["run", "study.yaml", "--jobs"], ["run", "--resume"]):
        assert ray_address(argv) == (False, None) and not asks_for_workers(argv)
    assert capsys.readouterr() == ("", "")
