"""What a driver killed outright leaves of its local Ray is ended by the next one, which says
so (:func:`fedclock.actors.ray_processes.end_leftovers`); processes of a driver that still
runs, or numbers the system gave to other processes since, are never touched."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fedclock.actors import ray_processes
from fedclock.actors.ray_processes import end_leftovers


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ray_processes, "record_dir", lambda: tmp_path)
    return tmp_path


def _record(folder: Path, driver: psutil.Process | tuple[int, float], procs: list[psutil.Process],
            name: str = "x") -> None:
    pid, started = (driver.pid, driver.create_time()) if isinstance(driver, psutil.Process) else driver
    (folder / f"{pid}.json").write_text(json.dumps({"driver": [pid, started], "processes": [
        [p.pid, p.create_time(), name] for p in procs]}))


def _dead_driver() -> tuple[int, float]:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(child.pid).create_time()
    child.wait()
    return child.pid, started


def test_a_dead_drivers_processes_are_ended_with_a_note(records: Path) -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _record(records, _dead_driver(), [psutil.Process(worker.pid)], name="ray::ServerActor")
        start = time.monotonic()
        note = end_leftovers()
        assert worker.wait(timeout=5) is not None and time.monotonic() - start < 5
        assert note is not None and "ended 1 Ray process" in note and f"ray::ServerActor ({worker.pid})" in note
        assert "\n" not in note and not list(records.glob("*.json"))
        assert end_leftovers() is None
    finally:
        worker.kill()


def test_a_running_drivers_processes_and_reused_numbers_are_kept(records: Path) -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _record(records, psutil.Process(), [psutil.Process(worker.pid)])  # this process: its driver runs
        assert end_leftovers() is None and worker.poll() is None
        (records / f"{os.getpid()}.json").unlink()
        dead = _dead_driver()
        (records / f"{dead[0]}.json").write_text(json.dumps({"driver": list(dead), "processes": [
            [worker.pid, psutil.Process(worker.pid).create_time() - 100.0, "ray::old"]]}))  # the number, reused
        assert end_leftovers() is None and worker.poll() is None
    finally:
        worker.kill()


@pytest.mark.slow
def test_the_ray_of_a_sigkilled_driver_is_ended_by_the_next_start(tmp_path: Path) -> None:
    """A ``fedclock run`` on the Ray backend killed with SIGKILL: its list names its Ray's
    processes (the actors' workers among them); :func:`end_leftovers`, which the next local
    start runs first, ends every one still running (they lived on for about a minute) and
    says so."""
    file = tmp_path / "s.yaml"
    file.write_text("name: r\ndataset: {name: digits}\nmodel: {name: mlp, hidden: [8]}\npopulation: {num_clients: 4}\n"
                    "algorithm: {name: fedasync, lr: 0.05, local_epochs: 1, batch_size: 16}\n"
                    "mode: {type: async, concurrency: 2}\nstop: {versions: 1000000}\n"
                    "evaluation: {every: 50, personalized: false}\nruntime: {backend: ray, num_actors: 1}\n"
                    "output: {progress: false}\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "fedclock.scenarios.entry", "run", str(file), "--out", str(out),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    record = ray_processes.record_dir() / f"{proc.pid}.json"
    deadline = time.monotonic() + 300
    while not (out / "metrics.parquet").is_file() or not record.is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    time.sleep(1.0)
    listed = json.loads(record.read_text())["processes"]
    assert any(name.startswith("ray::") for _, _, name in listed), listed  # the actors' workers
    proc.kill()
    proc.wait()
    time.sleep(1.0)
    running = [p for p, t, _ in listed if ray_processes._same(p, t) is not None]
    assert running, "nothing of the killed run's Ray was left to end"
    note = end_leftovers()
    assert note is not None and f"process {proc.pid}" in note and "\n" not in note
    assert not [p for p, t, _ in listed if ray_processes._same(p, t) is not None]


def test_the_note_reaches_the_command_once() -> None:
    """What the start ended is handed to the runtime's ``on_note`` (the command prints it as
    ``fedclock: note: ...``) once, at the first session (:meth:`RayStart.remember`)."""
    import threading
    from types import SimpleNamespace

    from fedclock.actors.ray_start import RayStart

    start = SimpleNamespace(note="ended 2 Ray process(es) ...", _started_ray=False, address=None,
                            _done=threading.Event())
    heard: list[str] = []
    for _ in range(2):
        RayStart.remember(start, heard.append)  # type: ignore[arg-type]
    assert heard == ["ended 2 Ray process(es) ..."] and start.note is None
