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
