"""fedclock run --profile-startup (scenarios/startup_profile.py): the phases add up, the
first task ends the profile, and the command prints one line naming every phase."""
from __future__ import annotations

from pathlib import Path

import pytest

from fedclock.scenarios import startup_profile
from fedclock.scenarios.cli import main


def test_phases_add_up_and_the_first_task_ends_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([110.0, 112.0, 113.5, 120.0, 121.0, 122.0])
    monkeypatch.setattr(startup_profile.time, "time", lambda: next(clock))
    monkeypatch.setattr("psutil.Process.create_time", lambda self: 100.0)
    profile = startup_profile.begin()  # 110: imports 10 s
    assert profile.seconds == {"imports": 10.0}
    with startup_profile.phase("data"):  # 112 -> 113.5
        pass

    class Session:
        def start(self, task: int) -> int:
            return task

        def evaluate(self) -> dict[str, float]:
            return {}

    session = Session()
    startup_profile.watch_first_task(session)
    assert session.start(7) == 7  # 120: the first task
    assert profile.first_task == 120.0 and startup_profile.active() is None
    with startup_profile.phase("actors"):  # after the first task: not measured (no clock read is used)
        pass
    line = profile.report()
    assert "imports 10.00 s" in line and "data 1.50 s" in line and "actors 0.00 s" in line
    assert "other 8.50 s" in line and "first task dispatched 20.00 s after the process started" in line
    startup_profile._ACTIVE = None


def test_the_command_prints_every_phase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ndataset: {name: digits}\nmodel: {name: mlp, hidden: [8]}\n"
                        "population: {num_clients: 4}\nmode: {type: sync}\nstop: {rounds: 1}\n"
                        "algorithm: {name: fedavg}\nruntime: {backend: inline}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet", "--profile-startup"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "start-up:" in x)
    for name in (*startup_profile.PHASES, "other"):
        assert f"{name} " in line
    assert "first task dispatched" in line
    startup_profile._ACTIVE = None
    assert main(["run", str(scenario), "--out", str(tmp_path / "out2"), "--quiet", "--profile-startup",
                 "--jobs", "2"]) == 2
