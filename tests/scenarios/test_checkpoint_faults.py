"""Checkpoints under faults: a writer killed at any step of checkpointing leaves a run that
resumes bit-identically; a damaged checkpoint is refused and an older one taken, saying so;
a checkpoint that counts rows the tables lack is skipped (:mod:`fedclock.scenarios.checkpoints`)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import pytest
import torch

from fedclock.actors.runtime import Runtime
from fedclock.scenarios import experiment
from fedclock.scenarios.checkpoints import CheckpointError, checkpoint_dir
from fedclock.scenarios.experiment import run_scenario
from tests.actors.test_determinism import ASYNC_HETEROGENEOUS
from tests.conftest import scenario
from tests.scenarios.test_checkpoints import _assert_same

SMALL = {**ASYNC_HETEROGENEOUS, "population": {**ASYNC_HETEROGENEOUS["population"], "num_clients": 4},
         "stop": {"versions": 9}, "evaluation": {"every": 2}, "output": {"checkpoint_every": 3, "progress": False}}
"""Checkpoints at versions 3, 6 and 9; the faults hit the one of version 6."""
TARGET = 6


class Killed(Exception):
    """Stands for the process dying at one step."""


def _steps(monkeypatch: pytest.MonkeyPatch, kill_at: int | None) -> list[str]:
    """Count the file-system steps of the checkpoint of :data:`TARGET` (from making the
    tables durable to pruning old checkpoints); with ``kill_at``, die just before that step."""
    done: list[str] = []
    armed = [False]

    def step(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if armed[0]:
                if kill_at is not None and len(done) == kill_at:
                    raise Killed(f"before step {kill_at}: {name}")
                done.append(name)
            return original(*args, **kwargs)
        return wrapped

    for owner, attr in [(os, "replace"), (os, "fsync"), (os, "unlink"), (os, "rmdir"), (os, "mkdir"),
                        (shutil, "rmtree"), (torch, "save"), (pq, "write_table"), (Path, "write_text")]:
        monkeypatch.setattr(owner, attr, step(f"{getattr(owner, '__name__', owner)}.{attr}", getattr(owner, attr)))
    save = experiment._save_checkpoint

    def saving(writer: Any, out_dir: Path, ckpt: Any, mark: str, run_id: str) -> None:
        armed[0] = ckpt.version == TARGET
        try:
            save(writer, out_dir, ckpt, mark, run_id)
        finally:
            armed[0] = False
    monkeypatch.setattr(experiment, "_save_checkpoint", saving)
    return done


@pytest.mark.slow
def test_a_writer_killed_at_every_step_of_checkpointing_resumes_bit_identically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kill before each step of writing a checkpoint (commit and fsync the tables' rows,
    write and fsync the checkpoint's files and hashes, rename, fsync, prune): every time,
    ``resume`` ends with the tables of an uninterrupted run. Of a run of consecutive fsyncs
    only the first is a kill point (a kill before a later one leaves the same files: fsync
    changes nothing a killed process's successor can see)."""
    inline = Runtime("inline")
    s = scenario(**SMALL)
    steps = _steps(monkeypatch, None)
    run_scenario(s, inline, tmp_path / "whole")
    monkeypatch.undo()
    assert len(steps) >= 10 and "torch.save" in steps and "os.fsync" in steps
    points = [k for k, name in enumerate(steps) if name != "os.fsync" or k == 0 or steps[k - 1] != "os.fsync"]
    for k in points:
        out = tmp_path / f"killed-{k}"
        _steps(monkeypatch, k)
        with pytest.raises(Killed):
            run_scenario(s, inline, out)
        monkeypatch.undo()
        notes: list[str] = []
        run_scenario(s, inline, out, resume=True, on_note=notes.append)
        _assert_same(tmp_path / "whole", out)
        assert all("\n" not in n for n in notes)


def _crashed_run(tmp_path: Path) -> tuple[Any, Path]:
    """A run stopped after its checkpoints 3, 6 and 9 (of which 6 and 9 are kept)."""
    s = scenario(**SMALL)
    out = tmp_path / "run"
    run_scenario(s, Runtime("inline"), out)
    return s, out


def test_a_damaged_checkpoint_is_skipped_for_the_older_one_saying_so(tmp_path: Path) -> None:
    """One flipped byte in the newest checkpoint's tensors (which loaded silently and gave
    wrong numbers before checkpoints were hashed): resume takes the older one and says so."""
    s, out = _crashed_run(tmp_path)
    run_scenario(s, Runtime("inline"), tmp_path / "whole")
    newest = checkpoint_dir(out) / "9" / "tensors.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    notes: list[str] = []
    run_scenario(s, Runtime("inline"), out, resume=True, on_note=notes.append)
    assert any("checkpoint 9 skipped" in n and "tensors.pt differs from hashes.json" in n for n in notes), notes
    assert any("from checkpoint 6" in n for n in notes)
    _assert_same(tmp_path / "whole", out)


def test_every_damaged_checkpoint_is_a_one_line_refusal(tmp_path: Path) -> None:
    s, out = _crashed_run(tmp_path)
    for version in ("6", "9"):
        with (checkpoint_dir(out) / version / "meta.json").open("a") as f:
            f.write(" ")
    with pytest.raises(CheckpointError, match="no usable checkpoint") as info:
        run_scenario(s, Runtime("inline"), out, resume=True)
    assert "\n" not in str(info.value) and "meta.json differs" in str(info.value)


def test_a_checkpoint_counting_rows_the_tables_lack_is_skipped(tmp_path: Path) -> None:
    """What a kill right after a checkpoint did before its rows were made durable: the newest
    checkpoint counts more event rows than are on disk; resume goes back to the older one."""
    s, out = _crashed_run(tmp_path)
    run_scenario(s, Runtime("inline"), tmp_path / "whole")
    events = pq.read_table(out / "events.parquet")
    import json
    meta = json.loads((checkpoint_dir(out) / "9" / "meta.json").read_text())
    pq.write_table(events.slice(0, meta["rows"]["events"] - 1), out / "events.parquet")
    notes: list[str] = []
    run_scenario(s, Runtime("inline"), out, resume=True, on_note=notes.append)
    assert any("checkpoint 9 skipped: it counts" in n and "events" in n for n in notes), notes
    _assert_same(tmp_path / "whole", out)
