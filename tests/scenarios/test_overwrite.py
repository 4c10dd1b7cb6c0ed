"""``--overwrite`` deletes exactly what a run writes (:mod:`fedclock.scenarios.runfiles`) and
refuses a folder holding anything else, naming it and keeping it; taking a folder is
exclusive (:func:`fedclock.scenarios.runstatus.claim`)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.runfiles import foreign_entry
from fedclock.scenarios.runstatus import FolderInUse, claim, read_status
from tests.conftest import scenario
from tests.scenarios.one_line import one_line_error, run_cli
from tests.scenarios.test_run_folders import SHORT

EVERYTHING = dict(population={"num_clients": 4}, model={"name": "mlp", "hidden": [8]},
                  algorithm={"name": "fedavg", "local_steps": 2, "batch_size": 16}, mode={"type": "sync",
                                                                                           "cohort_size": 2},
                  stop={"rounds": 4}, evaluation={"every": 2, "personalized": True, "per_client": True},
                  analysis={"type": "cka", "samples": 16},
                  privacy={"mode": "central", "clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-3},
                  output={"checkpoint_every": 2, "tensorboard": True, "progress": False, "flush_every_s": 1000})
"""A run that writes every file a run can write but the SSL ones (tables with per-client
metrics, checkpoints, TensorBoard scalars, CKA, privacy accounting)."""


def test_every_entry_a_run_plot_and_compare_write_is_known_and_overwritten(tmp_path: Path) -> None:
    """A run writing (nearly) every kind of file, then ``plot`` and ``compare`` into its folder:
    nothing there is foreign, and ``--overwrite`` with a plain run leaves none of it."""
    out = tmp_path / "run"
    run_scenario(scenario(**EVERYTHING), Runtime("inline"), out)
    assert main(["plot", str(out)]) == 0 and main(["compare", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"checkpoints", "tensorboard", "plots", "cka.parquet", "privacy.json", "client_metrics.parquet",
            "compare.csv", "run.json", "scenario.resolved.yaml"} <= names, names
    assert foreign_entry(out) is None
    file = tmp_path / "plain.yaml"
    file.write_text(SHORT)
    assert main(["run", str(file), "--out", str(out), "--quiet", "--overwrite"]) == 0
    left = {p.name for p in out.iterdir()}
    assert left == {"metrics.parquet", "events.parquet", "clients.parquet", "timeline.parquet", "run.json",
                    "scenario.resolved.yaml", "checkpoints"}, left


def test_ssl_and_diagnostics_files_are_known(tmp_path: Path) -> None:
    """SPFL's diagnostics and an SSL run's linear evaluation are a run's files too."""
    from fedclock.scenarios.runfiles import run_files

    files, _ = run_files()
    assert {"diagnostics.parquet", "linear_eval.parquet", "linear_eval.parquet.tmp"} <= files


@pytest.mark.parametrize("foreign", ["precious.txt", "sub/notes.txt", "checkpoints/mine.txt", "plots/data.csv"])
def test_overwrite_refuses_a_folder_with_a_foreign_entry_and_keeps_it(tmp_path: Path, foreign: str) -> None:
    """What the issue found: a folder holding a run's files and ``precious.txt`` (or a
    sub-folder) was emptied recursively. Now one line names the entry; nothing is deleted."""
    file, out = tmp_path / "run.yaml", tmp_path / "out"
    file.write_text(SHORT)
    assert main(["run", str(file), "--out", str(out), "--quiet"]) == 0
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("keep me")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    one_line_error(["run", str(file), "--out", str(out), "--quiet", "--overwrite"],
                   foreign.split("/")[0] if foreign.startswith("sub") else foreign, "not a file a fedclock run writes")
    assert (out / foreign).read_text() == "keep me"
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_an_output_path_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    file, taken = tmp_path / "run.yaml", tmp_path / "taken"
    file.write_text(SHORT)
    taken.write_text("x")
    one_line_error(["run", str(file), "--out", str(taken), "--quiet"], str(taken), "is a file")
    one_line_error(["run", str(file), "--out", str(taken / "below"), "--quiet"], "is a file")
    assert main(["run", str(file), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    one_line_error(["plot", str(tmp_path / "r"), "--out", str(taken)], str(taken), "is a file")
    from tests.scheduling.test_fedscale_traces import CAPACITY, write

    capacity = write(tmp_path / "client_device_capacity", CAPACITY)
    one_line_error(["traces", "convert", str(capacity), str(taken / "t.parquet")], "is a file")
    (tmp_path / "d.parquet").mkdir()
    one_line_error(["traces", "convert", str(capacity), str(tmp_path / "d.parquet")], "d.parquet", "is a folder")


@pytest.mark.parametrize("overwrite", [False, True])
def test_two_claims_of_one_folder_at_the_same_moment_one_wins(tmp_path: Path, overwrite: bool) -> None:
    """Two threads claim a new folder (or, with ``--overwrite``, an old run's folder) at once,
    twenty times: exactly one gets it each time, the other is refused in one line."""
    for attempt in range(20):
        folder = tmp_path / f"f{attempt}"
        if overwrite:
            first = claim(folder)
            from fedclock.scenarios.runstatus import FINISHED, finish
            finish(folder, first, FINISHED, "versions")
        barrier, results = threading.Barrier(2), []

        def take(barrier: threading.Barrier, results: list[object], folder: Path) -> None:
            barrier.wait()
            try:
                results.append(claim(folder, overwrite=overwrite))
            except FolderInUse as exc:
                results.append(exc)

        threads = [threading.Thread(target=take, args=(barrier, results, folder)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        won = [r for r in results if not isinstance(r, Exception)]
        lost = [r for r in results if isinstance(r, Exception)]
        assert len(won) == 1 and len(lost) == 1, results
        assert "\n" not in str(lost[0]) and ("running" in str(lost[0]) or "same moment" in str(lost[0]))
        status = read_status(folder)
        assert status is not None and status.run_id == won[0].run_id


def test_without_a_lock_the_exclusive_run_json_still_lets_one_in(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system without ``flock``: the hard-linked ``run.json`` alone decides."""
    from fedclock.scenarios import runstatus

    monkeypatch.setattr(runstatus, "fcntl", None)
    monkeypatch.setattr(runstatus, "_empty", lambda run_dir, overwrite: None)  # both see the folder empty
    folder = tmp_path / "f"
    assert claim(folder).status == "running"
    with pytest.raises(FolderInUse, match="same moment"):
        claim(folder)


def test_a_full_disk_leaves_no_temporary_status_and_records_the_end(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that refuses every new byte (simulated: writing a new file fails with ENOSPC):
    the run's end still reaches ``run.json`` (written over its reserved bytes) and no
    ``.run.json.*.tmp`` is left."""
    import errno
    import os

    from fedclock.scenarios import runstatus

    folder = tmp_path / "f"
    status = claim(folder)
    original = Path.write_bytes

    def full(self: Path, data: bytes) -> int:
        with self.open("wb") as f:  # the file is created, then the disk is full
            f.write(data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_bytes", full)
    runstatus.finish(folder, status, runstatus.FAILED, "cannot write: no space left on the device")
    monkeypatch.setattr(Path, "write_bytes", original)
    assert sorted(p.name for p in folder.iterdir()) == ["run.json"]
    read = read_status(folder)
    assert read is not None and read.status == "failed" and "no space" in read.reason


def test_a_run_killed_before_its_first_checkpoint_says_so_at_resume(tmp_path: Path) -> None:
    """``run.json`` says interrupted, no checkpoint was written: ``--resume`` says that (it used
    to say "not a fedclock run directory" when the resolved scenario was missing too)."""
    import json

    file, out = tmp_path / "run.yaml", tmp_path / "out"
    file.write_text(SHORT)
    status = claim(out)
    data = json.loads((out / "run.json").read_text())
    data["pid"] = 2 ** 22 + 12345  # a process that is gone
    (out / "run.json").write_text(json.dumps(data))
    assert status.run_id
    code, err = run_cli(["run", "--resume", str(out)])
    assert code == 2 and err.count("\n") == 1 and "before its first checkpoint" in err, err
