"""Output folders never mix runs and say how their run ended (:mod:`fedclock.scenarios.runstatus`):
a fresh run refuses a non-empty folder unless ``--overwrite``; an overwriting run keeps every
checkpoint it writes (an old run's higher versions used to make it delete its own); the
folder's ``run.json`` says ``finished``, ``failed`` or ``interrupted``, and ``compare`` and
``plot`` show it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime, Session
from fedclock.scenarios.checkpoints import checkpoint_dir, write_checkpoint
from fedclock.scenarios.cli import main
from fedclock.scenarios.runstatus import STATUS_FILE, FolderInUse, RunStatus, read_status, write_status
from tests.scenarios.test_checkpoints import KILLED, _checkpoint
from tests.scenarios.one_line import one_line_error

SHORT = KILLED.replace("stop: {versions: 300}", "stop: {versions: 12}").replace(
    "checkpoint_every: 20", "checkpoint_every: 2").replace("evaluation: {every: 10", "evaluation: {every: 4")


def test_a_rerun_into_an_old_folder_loses_nothing(tmp_path: Path) -> None:
    """The old run (12 versions, per-client metrics, checkpoints 10 and 12) and a new one (6
    versions) into the same folder: refused without --overwrite (the old files untouched);
    with it, no file of the old run is left and the new run's checkpoints 4 and 6 are kept
    (before, the old run's 10 and 12 outranked them and each new one was deleted as written)."""
    file, out = tmp_path / "run.yaml", tmp_path / "out"
    file.write_text(SHORT.replace("personalized: false", "personalized: true, per_client: true"))
    assert main(["run", str(file), "--out", str(out), "--quiet"]) == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert (out / "client_metrics.parquet").is_file()
    new = tmp_path / "new.yaml"
    new.write_text(SHORT.replace("stop: {versions: 12}", "stop: {versions: 6}"))
    one_line_error(["run", str(new), "--out", str(out), "--quiet"], str(out), "finished run", "--overwrite", "--resume")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    assert main(["run", str(new), "--out", str(out), "--quiet", "--overwrite"]) == 0
    assert not (out / "client_metrics.parquet").exists()
    assert sorted(p.name for p in checkpoint_dir(out).iterdir()) == ["4", "6"]
    assert pd.read_parquet(out / "metrics.parquet").version.max() == 6


def test_a_folder_that_is_not_a_run_is_never_emptied(tmp_path: Path) -> None:
    file, out = tmp_path / "run.yaml", tmp_path / "mine"
    file.write_text(SHORT)
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    one_line_error(["run", str(file), "--out", str(out), "--quiet", "--overwrite"], "notes.txt",
                   "not a file a fedclock run writes")
    assert (out / "notes.txt").read_text() == "keep me"


def test_retention_touches_only_this_runs_checkpoints(tmp_path: Path) -> None:
    for version in (90, 100):
        c = _checkpoint()
        c.version = version
        write_checkpoint(tmp_path, c, "abc", run_id="old")
    for version in (2, 4, 6):
        c = _checkpoint()
        c.version = version
        write_checkpoint(tmp_path, c, "abc", run_id="new")
    assert sorted(int(p.name) for p in checkpoint_dir(tmp_path).iterdir()) == [4, 6, 90, 100]


def test_the_folder_says_how_the_run_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """finished, failed (with the error), interrupted (Ctrl-C); compare shows the status of
    the runs that did not finish, and plot names them."""
    file = tmp_path / "run.yaml"
    file.write_text(SHORT)
    assert main(["run", str(file), "--out", str(tmp_path / "runs" / "done"), "--quiet"]) == 0
    status = read_status(tmp_path / "runs" / "done")
    assert status is not None and status.status == "finished" and status.reason == "versions"

    original = Session.apply

    def broken(self: Session, tasks: object) -> int:
        version = original(self, tasks)  # type: ignore[arg-type]
        if version >= 5:
            raise RuntimeError("disk on fire")
        return version

    monkeypatch.setattr(Session, "apply", broken)
    with pytest.raises(RuntimeError):
        main(["run", str(file), "--out", str(tmp_path / "runs" / "broken"), "--quiet"])

    def interrupt(self: Session, tasks: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(Session, "apply", interrupt)
    assert main(["run", str(file), "--out", str(tmp_path / "runs" / "stopped"), "--quiet"]) == 130
    monkeypatch.undo()
    failed, stopped = read_status(tmp_path / "runs" / "broken"), read_status(tmp_path / "runs" / "stopped")
    assert failed is not None and failed.status == "failed" and "RuntimeError: disk on fire" in failed.reason
    assert stopped is not None and stopped.status == "interrupted"
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "runs"), "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "compare.csv").set_index("run")
    assert table.loc["done", "status"] == "finished"
    assert table.loc["broken", "status"].startswith("failed: RuntimeError: disk on fire")
    assert table.loc["stopped", "status"].startswith("interrupted")
    assert "interrupted" in capsys.readouterr().out
    assert main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "plots")]) == 0
    err = capsys.readouterr().err
    assert "broken: failed" in err and "stopped: interrupted" in err and "done" not in err


def test_a_killed_run_reads_as_interrupted(tmp_path: Path) -> None:
    """SIGKILL leaves ``running``; when that process is gone it reads as interrupted."""
    gone = os.fork()
    if gone == 0:
        os._exit(0)
    os.waitpid(gone, 0)
    status = RunStatus(run_id="x", status="running", pid=gone, host=os.uname().nodename)
    write_status(tmp_path, status)
    read = read_status(tmp_path)
    assert read is not None and read.status == "interrupted" and "killed" in read.reason
    assert json.loads((tmp_path / STATUS_FILE).read_text())["status"] == "running"
    write_status(tmp_path, RunStatus(run_id="x", status="running", pid=os.getpid(), host=os.uname().nodename))
    with pytest.raises(FolderInUse, match="still running"):
        from fedclock.scenarios.runstatus import claim
        claim(tmp_path, resume=True)
    assert Runtime  # the inline runtime is what main uses above
