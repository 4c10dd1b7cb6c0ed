"""Checkpoints and resumption: checkpoint files hold tensors and JSON only; a run that crashes
after a checkpoint and is resumed (replayed up to it, then computed) ends with the same tables
as an uninterrupted run, in sync, async and windowed modes, with partial work, lost
connections and timeline events; ``fedclock run --resume DIR`` after a SIGKILL does the same."""
from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from fedclock.actors.runtime import Runtime, Session
from fedclock.algorithms.base import ServerState
from fedclock.scenarios.checkpoints import (Checkpoint, CheckpointError, RunningTask, latest_checkpoint,
                                            load_tensors, read_checkpoint, write_checkpoint, write_hashes)
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError
from fedclock.scenarios.run_costs import CountedCosts
from tests.actors.test_determinism import ASYNC_HETEROGENEOUS
from tests.actors.test_heterogeneity_determinism import FLAKY_PARTIAL
from tests.conftest import scenario
from tests.numerics import assert_close_events, assert_close_metrics, run_bounds
from tests.user_runs import kill_run_when

TABLES = ("metrics", "events", "clients", "timeline")

SYNC = dict(  # control variates kept per client, sampled cohorts, a deadline with late results folded in
    population={"num_clients": 5, "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200}}},
    dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
    algorithm={"name": "scaffold", "lr": 0.1, "local_steps": 4, "batch_size": 16},
    mode={"type": "sync", "cohort_size": 3, "deadline_s": 2.0, "late_results": "include"},
    stop={"rounds": 12}, evaluation={"every": 2, "personalized": True}, seed=3,
)
SYNC_DROP = {**SYNC, "mode": {**SYNC["mode"], "late_results": "drop"}}  # late tasks' computations deferred
ASYNC = {**ASYNC_HETEROGENEOUS, "stop": {"versions": 24}}
WINDOWED = {**ASYNC_HETEROGENEOUS, "mode": {"type": "async", "concurrency": 3, "aggregation": {"window_s": 1.5}},
            "stop": {"versions": 14}}
FLAKY = {**FLAKY_PARTIAL, "stop": {"versions": 14},  # buffered: not every apply makes a version
         "timeline": [{"at_version": 3, "type": "concurrency", "value": 3},
                      {"at_s": 4.0, "type": "scale", "compute": 0.5, "clients": {"ids": [0, 1]}}]}


class Crash(Exception):
    """Stands for the driver dying."""


def _tables(out: Path) -> dict[str, pd.DataFrame]:
    frames = {name: pd.read_parquet(out / f"{name}.parquet") for name in TABLES}
    frames["metrics"] = frames["metrics"].drop(columns=["wall_time"])
    return frames


def _assert_same(a: Path, b: Path) -> None:
    left, right = _tables(a), _tables(b)
    for name in TABLES:
        pd.testing.assert_frame_equal(left[name], right[name], check_exact=True, obj=name)


def _crash_at(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    original = Session.apply

    def apply(self: Session, tasks: Any) -> int:
        got = original(self, tasks)
        if got >= version:
            raise Crash(f"version {got}")
        return got

    monkeypatch.setattr(Session, "apply", apply)


@pytest.mark.parametrize("sections, every, crash", [(SYNC, 3, 8), (SYNC_DROP, 3, 8), (ASYNC, 5, 17), (WINDOWED, 4, 10),
                                                    (FLAKY, 3, 10)],
                         ids=["sync", "sync-drop-deferred", "async", "windowed", "partial-lost-timeline"])
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   sections: dict[str, Any], every: int, crash: int) -> None:
    inline = Runtime("inline")
    costs = CountedCosts()  # counted once for the three runs before the crash, as a session's runs share them
    run_scenario(scenario(**sections), inline, tmp_path / "plain", costs=costs)
    with_ckpt = scenario(**sections, output={"checkpoint_every": every, "progress": False})
    run_scenario(with_ckpt, inline, tmp_path / "checkpointed", costs=costs)
    _assert_same(tmp_path / "plain", tmp_path / "checkpointed")  # writing checkpoints changes nothing

    _crash_at(monkeypatch, crash)
    with pytest.raises(Crash):
        run_scenario(with_ckpt, inline, tmp_path / "crashed", costs=costs)
    monkeypatch.undo()
    kept = sorted(int(p.name) for p in (tmp_path / "crashed" / "checkpoints").iterdir())
    assert len(kept) == 2 and all(v % every == 0 and v < crash for v in kept)  # the newest two
    ckpt = read_checkpoint(tmp_path / "crashed" / "checkpoints" / str(kept[-1]))
    assert ckpt.rows["events"] < len(pd.read_parquet(tmp_path / "plain" / "events.parquet"))
    run_scenario(with_ckpt, inline, tmp_path / "crashed", resume=True)
    _assert_same(tmp_path / "plain", tmp_path / "crashed")
    if sections is SYNC_DROP:
        assert (pd.read_parquet(tmp_path / "plain" / "events.parquet").status == "dropped").sum() >= 3
    if sections is FLAKY:
        events = pd.read_parquet(tmp_path / "plain" / "events.parquet")
        assert (events.status == "lost").any() and events.steps.nunique() > 1
        assert len(pd.read_parquet(tmp_path / "plain" / "timeline.parquet")) == 2


def _checkpoint(**tensors: Any) -> Checkpoint:
    return Checkpoint(version=4, server=ServerState({"weights": torch.arange(3.0)}, 4, {"buffered": 1}), receives=6,
                      clients={0: {"c": torch.ones(2, dtype=torch.float64)}, 2: None},
                      payloads=[{"weights": torch.zeros(3)}],
                      tasks=[RunningTask(7, 1, 0, {"c": torch.full((2,), 0.5)}), RunningTask(8, 2, 0, None)],
                      rows={"events": 5, "metrics": 2, "timeline": 0}, applies=[1, 2, 2, 3, 4],
                      evaluations=[{"global_accuracy": 0.25}], applied=[{"train_loss": 1.5, "steps": 3.0}])


def test_a_checkpoint_round_trips_through_tensors_and_json(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path, _checkpoint(), "abc")
    assert sorted(p.name for p in folder.iterdir()) == ["hashes.json", "meta.json", "tensors.pt"]
    assert set(torch.load(folder / "tensors.pt", weights_only=True)) == {
        "server/weights", "client/0/c", "payload/0/weights", "task/7/c"}
    json.loads((folder / "meta.json").read_text())  # plain JSON
    back = read_checkpoint(folder, "abc")
    assert back.server.version == 4 and back.server.extra == {"buffered": 1} and back.receives == 6
    assert torch.equal(back.server.tensors["weights"], torch.arange(3.0))
    assert back.clients[2] is None and back.clients[0]["c"].dtype == torch.float64
    assert [(t.index, t.client, t.payload, t.state is None) for t in back.tasks] == [(7, 1, 0, False), (8, 2, 0, True)]
    assert back.applies == [1, 2, 2, 3, 4] and back.applied == [{"train_loss": 1.5, "steps": 3.0}]
    with pytest.raises(CheckpointError, match="different scenario"):
        read_checkpoint(folder, "xyz")


def test_only_the_newest_two_checkpoints_are_kept(tmp_path: Path) -> None:
    for version in (2, 4, 6, 4):
        c = _checkpoint()
        c.version = version
        write_checkpoint(tmp_path, c, "abc")
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["4", "6"]
    found = latest_checkpoint(tmp_path, "abc")
    assert found is not None and found.version == 6


def test_a_non_tensor_object_in_the_file_is_refused(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path, _checkpoint(), "abc")
    torch.save({"server/weights": torch.zeros(1), "evil": Crash("pickled object")}, folder / "tensors.pt")
    write_hashes(folder)  # hashes rewritten to match: the file itself is still refused
    with pytest.raises(CheckpointError, match=r"tensors.pt: not a readable checkpoint tensor file") as info:
        read_checkpoint(folder)
    assert "\n" not in str(info.value)
    torch.save({"server/weights": torch.zeros(1), "count": 3}, folder / "tensors.pt")  # loadable, but not a tensor
    with pytest.raises(CheckpointError, match="something other than named tensors"):
        load_tensors(folder / "tensors.pt")
    with pytest.raises(CheckpointError, match="not a tensor"):
        bad = Checkpoint(1, ServerState({"w": [1.0]}), 0, {}, [], [], {}, [])  # type: ignore[dict-item]
        write_checkpoint(tmp_path, bad, "abc")


def test_bad_checkpoint_every_is_a_one_line_error() -> None:
    for bad in (0, "often"):
        with pytest.raises(ScenarioError, match=r"output.checkpoint_every") as info:
            scenario(output={"checkpoint_every": bad})
        assert "\n" not in str(info.value)


def test_resume_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--resume", str(tmp_path / "nowhere"), "--quiet"]) == 2
    assert "no scenario.resolved.yaml there" in capsys.readouterr().err
    out, file = tmp_path / "plain", tmp_path / "plain.yaml"
    file.write_text(KILLED.replace("checkpoint_every: 20", "tensorboard: false"))
    assert main(["run", str(file), "--quiet", "--out", str(out), "--set", "stop.versions=2"]) == 0
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedclock: error: --resume") and "no checkpoint" in err and err.count("\n") == 1
    assert main(["run", "quickstart", "--resume", str(out)]) == 2
    assert "give no FILE" in capsys.readouterr().err
    assert main(["run"]) == 2 and "give a scenario FILE" in capsys.readouterr().err


def test_a_checkpoint_of_another_scenario_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = scenario(**{**ASYNC, "stop": {"versions": 4}}, output={"checkpoint_every": 4, "progress": False})
    run_scenario(s, Runtime("inline"), tmp_path)
    resolved = tmp_path / "scenario.resolved.yaml"
    resolved.write_text(resolved.read_text().replace("seed: 7", "seed: 8"))
    assert main(["run", "--resume", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "different scenario" in err and err.count("\n") == 1


KILLED = """\
name: killed
seed: 5
dataset: {name: digits, partition: {type: dirichlet_by_class, alpha: 0.5}}
model: {name: mlp, hidden: [8]}
population:
  num_clients: 6
  devices: {compute: {dist: loguniform, low: 20, high: 200}}
algorithm: {name: fedasync, lr: 0.1, local_epochs: 1, batch_size: 16}
mode: {type: async, concurrency: 3}
stop: {versions: 300}
evaluation: {every: 10, personalized: false}
runtime: {backend: inline}
output: {flush_every_s: 0.5, progress: false, checkpoint_every: 20}
"""


def test_resume_after_sigkill_of_the_driver_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Killed as soon as its first checkpoint (version 20) is on disk: 100 versions leave the
    child 80 more to be killed in (the kill lands long before its end)."""
    file = tmp_path / "killed.yaml"
    file.write_text(KILLED.replace("stop: {versions: 300}", "stop: {versions: 100}"))
    out = tmp_path / "killed"
    code = kill_run_when(file, out, lambda: any(p.name.isdigit() for p in (out / "checkpoints").glob("*")))
    assert code == -signal.SIGKILL
    resumed_from = max(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert main(["run", str(file), "--out", str(tmp_path / "whole"), "--quiet"]) == 0
    _assert_same(out, tmp_path / "whole")
    assert not (out / "events.parts").exists()
    assert len(pd.read_parquet(out / "events.parquet")) >= 100 and resumed_from < 100
    wall = pd.read_parquet(out / "metrics.parquet").wall_time
    assert wall.is_monotonic_increasing  # the resumed rows go on from the checkpoint's wall time


@pytest.mark.numerics
@pytest.mark.parametrize("sections, crash", [
    ({**ASYNC, "mode": {"type": "async", "concurrency": 4}}, 13),
    ({**SYNC, "algorithm": {"name": "fedavg", "lr": 0.1, "local_steps": 4, "batch_size": 16}}, 8),
], ids=["async", "sync-late-results"])
def test_a_resumed_vectorized_run_equals_an_uninterrupted_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              sections: dict[str, Any], crash: int) -> None:
    """Vectorized clients (tasks of one instant trained as one group): the resumed run has the
    same client and timeline rows and the same event times, and its losses and accuracies
    equal the uninterrupted run's within float rounding (restarted in-flight tasks may be
    grouped differently)."""
    inline = Runtime("inline")
    with_ckpt = scenario(**sections, runtime={"backend": "inline", "vectorize": 4},
                         output={"checkpoint_every": 3, "progress": False})
    costs = CountedCosts()  # counted once for the two runs before the crash, as a session's runs share them
    run_scenario(with_ckpt, inline, tmp_path / "plain", costs=costs)
    _crash_at(monkeypatch, crash)
    with pytest.raises(Crash):
        run_scenario(with_ckpt, inline, tmp_path / "crashed", costs=costs)
    monkeypatch.undo()
    run_scenario(with_ckpt, inline, tmp_path / "crashed", resume=True)
    left, right = _tables(tmp_path / "plain"), _tables(tmp_path / "crashed")
    for name in ("clients", "timeline"):
        pd.testing.assert_frame_equal(left[name], right[name], check_exact=True, obj=name)
    # restarted tasks may be grouped with others: the same sums in other orders (tests/numerics.py)
    bounds = run_bounds(with_ckpt, left["clients"])
    assert_close_events(left["events"], right["events"], bounds)
    assert_close_metrics(left["metrics"], right["metrics"], bounds)
    assert len(left["metrics"]) > 3
