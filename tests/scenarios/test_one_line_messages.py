"""Mistakes and accidents that used to print a traceback, run silently wrong or kill the run
without a word: each is now one line (``fedclock: error: ...`` or ``fedclock: interrupted ...``)."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from fedclock.scenarios.cli import main
from fedclock.scenarios.runstatus import read_status
from tests.scenarios.test_checkpoints import KILLED, _assert_same
from tests.scenarios.one_line import one_line_error

BASE = ("name: p\ndataset: {name: digits}\nmodel: {name: mlp, hidden: [8]}\npopulation: {num_clients: 3}\n"
        "algorithm: {name: fedavg}\nstop: {rounds: 1}\nmode: {type: sync}\nruntime: {backend: inline}\n"
        "output: {progress: false}\n")
SHORT = KILLED.replace("stop: {versions: 300}", "stop: {versions: 12}").replace(
    "checkpoint_every: 20", "checkpoint_every: 4").replace("evaluation: {every: 10", "evaluation: {every: 4")


@pytest.mark.parametrize("override, names", [
    ("name=..", ["name:", "'..'"]),
    ("population.num_clients=true", ["population.num_clients: must be a number (got true)"]),
    ("algorithm.lr=true", ["algorithm.lr: must be a number (got true)"]),
    ("algorithm.name=builtins:dict", ["algorithm.name", "not a subclass"]),
    ("model.name=builtins:dict", ["model.name: builtins:dict is the class dict, not an nn.Module subclass"]),
    ("model.name=collections:OrderedDict", ["model.name: collections:OrderedDict is the class OrderedDict"]),
    ("model.name=builtins:max", ["model.name: builtins:max", "arguments cannot be read"]),
    ("population.availability={type: trace, path: /dev/zero}", ["population.availability.path", "/dev/zero",
                                                                "not a regular file"]),
], ids=["dotdot", "bool-int", "bool-float", "builtin-algorithm", "builtin-model", "class-model",
        "builtin-function-model", "dev-zero"])
def test_validate_gives_one_line(tmp_path: Path, override: str,
                                 names: list[str]) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(BASE)
    one_line_error(["validate", str(file), "--set", override], *names)


def test_a_suite_named_dotdot_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(BASE.replace("name: p", "name: '..'") + "runs: [{name: a}, {name: b}]\n")
    one_line_error(["validate", str(file)], "name:", "results folder")


@pytest.mark.parametrize("override, names", [
    ("mode.deadline_s=0.000001", ["mode.deadline_s", "fastest possible task"]),
    ("runtime.device=cuda", ["runtime.device: cuda", "no GPU"]),
    ("model.name=builtins:dict", ["model.name: builtins:dict is the class dict, not an nn.Module subclass"]),
], ids=["deadline", "cuda", "builtin-model"])
def test_run_gives_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            override: str, names: list[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    file = tmp_path / "p.yaml"
    file.write_text(BASE)
    one_line_error(["run", str(file), "--quiet", "--out", str(tmp_path / "out"), "--set", override], *names)


@pytest.mark.parametrize("fault", ["enospc", "erofs", "arrow-enospc"])
def test_a_full_or_read_only_disk_is_one_line_and_resumable(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The third table write after the first checkpoint fails as a full (or read-only) disk
    makes it fail: one line naming the file and ``--resume``; every file written before still
    reads, and ``--resume`` ends with the tables of an uninterrupted run."""
    file, out = tmp_path / "run.yaml", tmp_path / "out"
    file.write_text(SHORT)
    assert main(["run", str(file), "--out", str(tmp_path / "whole"), "--quiet"]) == 0
    original, calls = pq.ParquetWriter.write_table, [0]

    def failing(writer: pq.ParquetWriter, table: Any, *args: Any, **kwargs: Any) -> Any:
        # every Parquet file is written through a ParquetWriter (pq.write_table opens one)
        calls[0] += (out / "checkpoints" / "4").is_dir()
        if calls[0] == 3:
            if fault == "arrow-enospc":
                raise pa.ArrowIOError(f"error closing file {writer.where}: No space left on device")
            code = errno.ENOSPC if fault == "enospc" else errno.EROFS
            raise OSError(code, os.strerror(code), str(writer.where))
        return original(writer, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", failing)
    err = one_line_error(["run", str(file), "--out", str(out), "--quiet"], "cannot write", f"--resume {out}", status=1)
    monkeypatch.undo()
    assert ("read-only" if fault == "erofs" else "no space left") in err and ".parquet" in err
    for table in out.glob("*.parquet"):
        pq.read_table(table)  # intact
    status = read_status(out)
    assert status is not None and status.status == "failed" and "cannot write" in status.reason
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    _assert_same(tmp_path / "whole", out)


@pytest.mark.slow
def test_sigterm_is_one_line_and_marks_the_run_interrupted(tmp_path: Path) -> None:
    """Before, SIGTERM ended an inline run without a word and left it looking like a running one."""
    file, out = tmp_path / "run.yaml", tmp_path / "out"
    file.write_text(KILLED)
    proc = subprocess.Popen([sys.executable, "-m", "fedclock.scenarios.cli", "run", str(file), "--out", str(out),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "metrics.parquet").is_file():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.startswith("fedclock: interrupted (SIGTERM)") and err.count("\n") == 1, err
    status = read_status(out)
    assert status is not None and status.status == "interrupted" and "SIGTERM" in status.reason
    pd.read_parquet(out / "metrics.parquet")  # complete, readable


def test_validate_no_import_runs_none_of_the_files_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``validate`` imports a module:attribute name's module (its code runs: here it writes a
    file); ``validate --no-import`` does not, checks the rest and names what it left unchecked."""
    (tmp_path / "sneaky.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('ran.txt').write_text('ran')\n"
        "from fedclock.algorithms.fedavg import FedAvg\nclass Mine(FedAvg):\n    name = 'mine'\n")
    file = tmp_path / "p.yaml"
    file.write_text(BASE.replace("algorithm: {name: fedavg}", "algorithm: {name: 'sneaky:Mine', lr: 0.1}"))
    assert main(["validate", str(file), "--no-import"]) == 0
    out = capsys.readouterr().out
    assert "not imported, so unchecked: algorithm.name sneaky:Mine" in out
    assert not (tmp_path / "ran.txt").exists()
    one_line_error(["validate", str(file), "--no-import", "--set", "population.num_clients=0"],
                   "population.num_clients")
    assert main(["validate", str(file)]) == 0
    assert (tmp_path / "ran.txt").exists()


def test_validate_help_says_it_runs_the_files_code(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33: ``validate`` imports the modules a scenario names, so its help must say that it
    runs their code and offer the check that imports nothing."""
    assert main(["validate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "which runs its code" in text and "--no-import" in text and "import nothing" in text


@pytest.mark.parametrize("where", ["file", "runs"])
@pytest.mark.parametrize("value", ["true", "false"])
def test_num_clients_true_in_a_file_is_refused(tmp_path: Path, value: str, where: str) -> None:
    """``population: {num_clients: true}`` (the issue found it taken as 1 client at an older
    commit): refused in one line naming the field, in the file and in a run of ``runs:``."""
    file = tmp_path / "s.yaml"
    text = BASE.replace("num_clients: 3", f"num_clients: {value}") if where == "file" else \
        BASE + f"runs:\n- {{name: a, population: {{num_clients: {value}}}}}\n"
    file.write_text(text)
    one_line_error(["validate", str(file)], "population.num_clients", "(got ")
