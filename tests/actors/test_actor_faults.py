"""Faults: a client executor killed mid-task is replaced and its tasks re-run with the same
inputs, so the results equal an undisturbed run's; the server dying ends the run with one line,
or, with checkpoints, the run goes on from the last one on a fresh server, with the same results."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from fedclock.actors import calls as calls_mod
from fedclock.actors.calls import ActorLost, ActorUnplaced
from fedclock.actors.respawn import fitted_count
from fedclock.actors.runtime import Runtime
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.actors.session import Session
from fedclock.actors.transport import actor_id
from fedclock.scenarios.experiment import run_scenario
from fedclock.scheduling.clock import Task
from tests.actors.test_determinism import ASYNC_HETEROGENEOUS
from tests.conftest import scenario

SHORT = {**ASYNC_HETEROGENEOUS, "stop": {"versions": 8}}


def _run(runtime: Runtime, out: Path, **output: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    cfg = {"backend": runtime.backend, "num_actors": 2, "placement": "pooled"}
    run_scenario(scenario(**SHORT, runtime=cfg, output={"progress": False, **output}), runtime, out)
    return (pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(out / "events.parquet"))


def _sessions(monkeypatch: pytest.MonkeyPatch, runtime: Runtime) -> list[Session]:
    """Record the sessions the runtime hands out."""
    made: list[Session] = []
    original = runtime.session

    def session(*args: Any, **kwargs: Any) -> Session:
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(runtime, "session", session)
    return made


def _kill_on_start(monkeypatch: pytest.MonkeyPatch, when: Callable[[int, Task], bool],
                   victim: Callable[[Session, Task], Any]) -> list[int]:
    """After the n-th task start for which ``when(n, task)`` holds, kill ``victim``; return the
    list of start counts at which a kill happened."""
    import ray

    original = Session.start
    starts, kills = [0], []

    def start(self: Session, task: Task) -> None:
        original(self, task)
        starts[0] += 1
        if when(starts[0], task):
            ray.kill(victim(self, task), no_restart=True)
            kills.append(starts[0])

    monkeypatch.setattr(Session, "start", start)
    return kills


def test_a_killed_executor_is_replaced_and_results_are_unchanged(ray_runtime: Runtime, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calm_m, calm_e = _run(Runtime("inline"), tmp_path / "calm")  # equal to an undisturbed Ray run (test_determinism)
    sessions = _sessions(monkeypatch, ray_runtime)
    # kill an executor right after it is handed a task (so it dies with tasks in flight), twice
    kills = _kill_on_start(monkeypatch, lambda n, task: n in (3, 7), lambda s, task: s.executors[s.slot_of(task)])
    hit_m, hit_e = _run(ray_runtime, tmp_path / "hit")
    assert len(kills) == 2 and sessions[0].respawns == 2
    pd.testing.assert_frame_equal(calm_m, hit_m, check_exact=True)
    pd.testing.assert_frame_equal(calm_e, hit_e, check_exact=True)
    assert all(actor_id(a) for a in ray_runtime._pool[:2])  # the runtime keeps the fresh actors
    assert ray_runtime._pool[:2] == sessions[0].executors


def test_an_executor_that_keeps_dying_ends_the_run_with_one_line(ray_runtime: Runtime, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    original = Runtime._respawn

    def doomed(self: Runtime, *args: Any) -> Any:
        fresh = original(self, *args)
        ray.kill(fresh, no_restart=True)
        return fresh

    monkeypatch.setattr(Runtime, "_respawn", doomed)
    monkeypatch.setattr(calls_mod, "MAX_TASK_RETRIES", 1)
    _kill_on_start(monkeypatch, lambda n, task: n == 2, lambda s, task: s.executors[s.slot_of(task)])
    with pytest.raises(ActorLost, match=r"executor died 2 times in a row \(at most 1 re-runs\)") as info:
        _run(ray_runtime, tmp_path / "doomed")
    assert "\n" not in str(info.value)


def test_the_server_dying_is_a_one_line_error(ray_runtime: Runtime, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _kill_on_start(monkeypatch, lambda n, task: n == 2, lambda s, task: s.server)
    with pytest.raises(ActorLost, match=r"^the server actor died; .*checkpoint") as info:
        _run(ray_runtime, tmp_path / "server")
    assert "\n" not in str(info.value)
    monkeypatch.undo()
    _run(ray_runtime, tmp_path / "after")  # the next run starts a fresh server


def test_a_killed_server_is_survived_from_the_last_checkpoint(ray_runtime: Runtime, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calm_m, calm_e = _run(Runtime("inline"), tmp_path / "calm")
    sessions = _sessions(monkeypatch, ray_runtime)
    kills = _kill_on_start(monkeypatch, lambda n, task: n == 9, lambda s, task: s.server)
    restarted: list[int] = []
    original = Session.restart
    monkeypatch.setattr(Session, "restart", lambda self, task, *a: (restarted.append(task.index),
                                                                      original(self, task, *a))[-1])
    hit_m, hit_e = _run(ray_runtime, tmp_path / "hit", checkpoint_every=2)
    assert kills == [9] and len(sessions) == 2  # a second session, on a fresh server, after the death
    assert len(restarted) == 2  # replayed up to version 6, then its two running tasks started again
    assert sessions[1].server is not sessions[0].server
    assert sorted(int(p.name) for p in (tmp_path / "hit" / "checkpoints").iterdir()) == [6, 8]
    pd.testing.assert_frame_equal(calm_m, hit_m, check_exact=True)
    pd.testing.assert_frame_equal(calm_e, hit_e, check_exact=True)


def test_the_cli_reports_a_lost_actor_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import fedclock.scenarios.api as api
    from fedclock.scenarios.cli import main

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise ActorLost("the server actor died; the run cannot go on")

    monkeypatch.setattr(api, "run_scenario", lost)  # the CLI runs scenarios through the Python API
    code = main(["run", "quickstart", "--backend", "inline", "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err == "fedclock: error: the server actor died; the run cannot go on\n"


def test_a_server_killed_after_the_clock_finished_is_survived(ray_runtime: Runtime, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The post-run analysis reads the server's payloads: a server lost there is survived
    from the last checkpoint too, with the same tables and analysis."""
    import ray

    import fedclock.scenarios.experiment as experiment

    def run(runtime: Runtime, out: Path) -> dict[str, pd.DataFrame]:
        cfg = {"backend": runtime.backend, "num_actors": 2, "placement": "pooled"}
        sections = {**SHORT, "algorithm": {"name": "fedavg", "lr": 0.1, "local_epochs": 1, "batch_size": 16},
                    "mode": {"type": "sync", "cohort_size": 3}, "stop": {"rounds": 6}}
        run_scenario(scenario(**sections, runtime=cfg, analysis={"type": "cka", "samples": 16, "clients": [0, 1]},
                              output={"progress": False, "checkpoint_every": 4}), runtime, out)
        return {name: pd.read_parquet(out / f"{name}.parquet") for name in ("metrics", "events", "cka")}

    calm = run(Runtime("inline"), tmp_path / "calm")
    sessions = _sessions(monkeypatch, ray_runtime)
    original = experiment.run_analysis

    def analysis_after_a_kill(*args: Any) -> Any:
        if len(sessions) == 1:  # the first time only
            ray.kill(sessions[0].server, no_restart=True)
        return original(*args)

    monkeypatch.setattr(experiment, "run_analysis", analysis_after_a_kill)
    hit = run(ray_runtime, tmp_path / "hit")
    assert len(sessions) == 2 and len(calm["cka"]) > 0
    pd.testing.assert_frame_equal(calm["metrics"].drop(columns=["wall_time"]),
                                  hit["metrics"].drop(columns=["wall_time"]), check_exact=True)
    pd.testing.assert_frame_equal(calm["events"], hit["events"], check_exact=True)
    pd.testing.assert_frame_equal(calm["cka"], hit["cka"], check_exact=False, atol=1e-6)


def test_an_executor_with_no_room_for_its_replacement_stops_the_run_in_one_line_and_resumes(
        ray_runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost executor whose replacement cannot be placed (here it asks for more CPUs than the
    cluster has, as after a node's loss) stops the run after ``runtime.respawn_timeout_s``, in
    one line naming what was lost and the way back; the checkpoints stay, and ``--resume``
    finishes the run with the undisturbed tables."""
    calm_m, calm_e = _run(Runtime("inline"), tmp_path / "calm")
    cfg = {"backend": "ray", "num_actors": 2, "placement": "pooled", "respawn_timeout_s": 2}
    run = scenario(**SHORT, runtime=cfg, output={"progress": False, "checkpoint_every": 2})
    original = Runtime._new_executor

    def no_room(self: Runtime, cfg: Any) -> Any:
        return original(self, cfg.model_copy(update={"num_cpus": 64.0}))

    def victim(s: Session, task: Task) -> Any:
        monkeypatch.setattr(Runtime, "_new_executor", no_room)  # the replacement finds no node
        return s.executors[s.slot_of(task)]

    kills = _kill_on_start(monkeypatch, lambda n, task: n == 9, victim)
    with pytest.raises(ActorUnplaced, match=r"^client executor \d was lost and its replacement did not start within "
                                            r"2 s \(runtime.respawn_timeout_s\): the Ray cluster now has 1 node\(s\) "
                                            r"with 2 CPUs .*; the run stopped with its checkpoints: go on with "
                                            r"fedclock run --resume ") as info:
        run_scenario(run, ray_runtime, tmp_path / "hit")
    assert kills == [9] and "\n" not in str(info.value)
    assert json.loads((tmp_path / "hit" / "run.json").read_text())["status"] == "failed"
    monkeypatch.undo()
    patient = run.model_copy(update={"runtime": run.runtime.model_copy(update={"respawn_timeout_s": 120.0})})
    run_scenario(patient, ray_runtime, tmp_path / "hit", resume=True)  # 2 s is too short for an actor's start
    pd.testing.assert_frame_equal(calm_m, pd.read_parquet(tmp_path / "hit" / "metrics.parquet").drop(
        columns=["wall_time"]), check_exact=True)
    pd.testing.assert_frame_equal(calm_e, pd.read_parquet(tmp_path / "hit" / "events.parquet"), check_exact=True)


def test_a_run_from_a_checkpoint_takes_the_executors_the_cluster_fits() -> None:
    notes: list[str] = []
    cfg = RuntimeConfig(num_actors=4, num_cpus=1.5)
    assert fitted_count(cfg, 4, 6.0, notes.append) == 4 and notes == []  # 4 x 1.5 = 6 CPUs: fits
    assert fitted_count(cfg, 4, 5.0, notes.append) == 3  # 5 // 1.5 = 3
    assert notes == ["the Ray cluster has 5 CPUs: this run goes on from its checkpoint with 3 pooled executor(s) of "
                     "1.5 CPU, not the 4 its runtime settings ask for (the results do not change)"]
    assert fitted_count(cfg, 4, 1.0, None) == 1  # none fits: one (the runtime then says the cluster is too small)
