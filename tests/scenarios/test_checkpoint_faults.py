"""Checkpoints under faults: a writer killed (``SIGKILL``) at any step of checkpointing leaves
a run that resumes bit-identically; a damaged checkpoint is refused and an older one taken,
saying so; a checkpoint that counts rows the tables lack is skipped
(:mod:`fedclock.scenarios.checkpoints`)."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.checkpoints import CheckpointError, checkpoint_dir
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario
from tests.scenarios.checkpoint_kill import SMALL
from tests.scenarios.test_checkpoints import _assert_same


@pytest.mark.slow
def test_a_writer_sigkilled_at_every_step_of_checkpointing_resumes_bit_identically(tmp_path: Path) -> None:
    """A process (forked from one warm driver, :mod:`tests.scenarios.checkpoint_kill`) sends
    itself ``SIGKILL`` just before each step of writing a checkpoint (commit and fsync the
    tables' rows, write and fsync the checkpoint's files and hashes, rename, fsync, prune), so
    no ``finally`` block, buffered write or exit handler runs; another resumes the folder.
    Every killed child must die of the signal, and every resume must end with the tables of
    the uninterrupted run, its notes one line each. Of a run of consecutive fsyncs only the
    first is a kill point (a kill before a later one leaves the same files). About 20 s of
    CPU (one ``python`` start, then two forks per kill point): marked slow."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "tests.scenarios.checkpoint_kill", str(tmp_path)], cwd=root,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["steps"]) >= 10 and "torch.save" in report["steps"] and "os.fsync" in report["steps"]
    assert len(report["points"]) >= 8
    for point in report["points"]:
        assert point["signal"] == signal.SIGKILL, (point, done.stderr[-3000:])
        assert all("\n" not in n for n in point["notes"])
        _assert_same(tmp_path / "whole", tmp_path / f"killed-{point['point']}")


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of SMALL, run once for the module: the tables a resume must give
    and (copied) the folder each test damages."""
    out = tmp_path_factory.mktemp("whole") / "run"
    run_scenario(scenario(**SMALL), Runtime("inline"), out)
    return out


def _crashed_run(tmp_path: Path, whole: Path) -> tuple[Any, Path]:
    """A run stopped after its checkpoints 3, 6 and 9 (of which 6 and 9 are kept): a copy of
    the module's run folder."""
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    return scenario(**SMALL), out


def test_a_damaged_checkpoint_is_skipped_for_the_older_one_saying_so(tmp_path: Path, whole: Path) -> None:
    """One flipped byte in the newest checkpoint's tensors (which loaded silently and gave
    wrong numbers before checkpoints were hashed): resume takes the older one and says so."""
    s, out = _crashed_run(tmp_path, whole)
    newest = checkpoint_dir(out) / "9" / "tensors.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    notes: list[str] = []
    run_scenario(s, Runtime("inline"), out, resume=True, on_note=notes.append)
    assert any("checkpoint 9 skipped" in n and "tensors.pt differs from hashes.json" in n for n in notes), notes
    assert any("from checkpoint 6" in n for n in notes)
    _assert_same(whole, out)


def test_every_damaged_checkpoint_is_a_one_line_refusal(tmp_path: Path, whole: Path) -> None:
    s, out = _crashed_run(tmp_path, whole)
    for version in ("6", "9"):
        with (checkpoint_dir(out) / version / "meta.json").open("a") as f:
            f.write(" ")
    with pytest.raises(CheckpointError, match="no usable checkpoint") as info:
        run_scenario(s, Runtime("inline"), out, resume=True)
    assert "\n" not in str(info.value) and "meta.json differs" in str(info.value)


def test_a_checkpoint_counting_rows_the_tables_lack_is_skipped(tmp_path: Path, whole: Path) -> None:
    """What a kill right after a checkpoint did before its rows were made durable: the newest
    checkpoint counts more event rows than are on disk; resume goes back to the older one."""
    s, out = _crashed_run(tmp_path, whole)
    events = pq.read_table(out / "events.parquet")
    meta = json.loads((checkpoint_dir(out) / "9" / "meta.json").read_text())
    pq.write_table(events.slice(0, meta["rows"]["events"] - 1), out / "events.parquet")
    notes: list[str] = []
    run_scenario(s, Runtime("inline"), out, resume=True, on_note=notes.append)
    assert any("checkpoint 9 skipped: it counts" in n and "events" in n for n in notes), notes
    _assert_same(whole, out)


def _flip_value_of_row(path: Path, row: int) -> float:
    """Flip the lowest bit of the ``finished_at`` value of ``row`` where its 8 bytes lie in the
    file (a Snappy literal): the file still reads, with one wrong value. Returns the value."""
    import struct

    value = pq.read_table(path).column("finished_at")[row].as_py()
    original = path.read_bytes()
    packed, start = struct.pack("<d", value), 0
    while (where := original.find(packed, start)) >= 0:  # the data page's copy, not the statistics'
        data = bytearray(original)
        data[where] ^= 0x01
        path.write_bytes(bytes(data))
        try:
            if pq.read_table(path).column("finished_at")[row].as_py() != value:  # read silently, wrong
                return value
        except Exception:  # a copy whose flip breaks the file: try the next one
            pass
        start = where + 1
    raise AssertionError("no literal copy of the value in the file")


def test_a_flipped_byte_in_events_is_named_at_resume_and_refused(tmp_path: Path, whole: Path) -> None:
    """The issue's case: one flipped byte inside events.parquet (no Parquet checksum notices)
    in a row both checkpoints count went through --resume with exit 0 and a wrong cell. Now
    each checkpoint's digest of the rows disagrees, and the resume is one line naming the
    table (exit 2); the table is left as it was."""
    from tests.scenarios.one_line import one_line_error

    _, out = _crashed_run(tmp_path, whole)
    _flip_value_of_row(out / "events.parquet", 1)
    damaged = (out / "events.parquet").read_bytes()
    one_line_error(["run", "--resume", str(out), "--quiet"], "events.parquet", "damaged", "no usable checkpoint")
    assert (out / "events.parquet").read_bytes() == damaged


def test_damage_after_the_older_checkpoints_rows_resumes_from_it_bit_identically(tmp_path: Path,
                                                                                 whole: Path) -> None:
    """A flipped value in a row that only checkpoint 9 counts: 9 is skipped naming the table,
    6 is taken, and the rows after it are written again: the tables of the whole run."""
    s, out = _crashed_run(tmp_path, whole)
    six = json.loads((checkpoint_dir(out) / "6" / "meta.json").read_text())["rows"]["events"]
    nine = json.loads((checkpoint_dir(out) / "9" / "meta.json").read_text())["rows"]["events"]
    assert six < nine
    _flip_value_of_row(out / "events.parquet", nine - 1)
    notes: list[str] = []
    run_scenario(s, Runtime("inline"), out, resume=True, on_note=notes.append)
    assert any("checkpoint 9 skipped" in n and "events.parquet" in n for n in notes), notes
    _assert_same(whole, out)
