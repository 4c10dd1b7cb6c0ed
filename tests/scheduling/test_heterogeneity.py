"""Incomplete work and lost connections in virtual time (inline backend).

Completeness: the clock assigns each task its local steps, the client runs exactly those
(the step counter in its result, recorded in events.parquet) and the task's compute time
follows from them. Connectivity: lost tasks never come back, the server gives up at
dispatch + ``task_timeout_s`` and the task ends ``lost`` at that time.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import simpy

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError
from fedclock.scheduling.modes import AsyncMode, StopConfig, SyncMode
from fedclock.scheduling.clock import LOST, Clock, Task, TaskCosts
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.availability import Always
from fedclock.scheduling.heterogeneity import steps_for_share, steps_within
from fedclock.scheduling.rng import Stream, numpy_rng
from tests.conftest import scenario

MLP_8_BYTES = (64 * 8 + 8 + 8 * 10 + 10) * 4
FAST = {"compute": 100.0, "down_mbps": 100.0, "up_mbps": 100.0, "latency_s": 0.05}


def run(tmp_path: Path, **sections: Any) -> tuple[pd.DataFrame, Any]:
    summary = run_scenario(scenario(**sections), Runtime("inline"), tmp_path)
    return pd.read_parquet(tmp_path / "events.parquet"), summary


def transfers(down: float, up: float, latency: float) -> float:
    return MLP_8_BYTES * 8 / (down * 1e6) + latency + MLP_8_BYTES * 8 / (up * 1e6) + latency


def test_steps_for_share_and_steps_within() -> None:
    assert steps_for_share(0.5, 10) == 5 and steps_for_share(0.3, 10) == 3 and steps_for_share(0.01, 10) == 1
    assert steps_for_share(1.0, 7) == 7 and steps_for_share(0.5, 7) == 3

    def duration(k: int) -> float:
        return 0.25 + 0.1 * k

    assert steps_within(1.0, 20, duration) == 7  # 0.25 + 0.7 = 0.95 <= 1 < 1.05
    assert steps_within(100.0, 20, duration) == 20 and steps_within(0.2, 20, duration) == 0
    assert steps_within(0.55, 20, lambda k: 0.25 + 0.1 * k) == 3  # 0.25 + 0.3 = 0.55 exactly (in floats: <=)


def test_completeness_half_runs_exactly_half_the_local_steps(tmp_path: Path) -> None:
    events, _ = run(tmp_path, population={"num_clients": 3, "clients": [
                        {"ids": [0, 1, 2], **FAST}, {"ids": [1], "completeness": {"type": "fraction", "value": 0.5}}]},
                    algorithm={"name": "fedavg", "local_steps": 10, "batch_size": 10}, stop={"rounds": 2})
    assert len(events) == 6 and set(events.status) == {"applied"}
    half, whole = events[events.client == 1], events[events.client != 1]
    # "steps" is the counter the client returned with its upload
    assert list(half.steps) == [5, 5] and set(half.steps_full) == {10}
    assert set(whole.steps) == {10}
    np.testing.assert_allclose(half.compute_s, 5 * 10 / 100.0, rtol=1e-12)
    np.testing.assert_allclose(whole.compute_s, 10 * 10 / 100.0, rtol=1e-12)


def test_time_budget_runs_the_steps_the_device_allows(tmp_path: Path) -> None:
    slow = {"compute": 30.0, "down_mbps": 2.0, "up_mbps": 1.0, "latency_s": 0.1}
    events, _ = run(tmp_path, population={"num_clients": 2, "clients": [
                        {"ids": [0], **FAST}, {"ids": [1], **slow}],
                        "completeness": {"type": "time_budget", "budget_s": 2.0}},
                    algorithm={"name": "fedavg", "local_steps": 20, "batch_size": 10}, stop={"rounds": 2})
    step_s = 10 / 30.0  # ten samples per step at 30 samples/s
    expected = math.floor((2.0 - transfers(2.0, 1.0, 0.1)) / step_s)
    slow_rows = events[events.client == 1]
    assert expected == 5 and set(slow_rows.steps) == {expected}
    assert (slow_rows.finished_at - slow_rows.dispatched_at <= 2.0).all()
    fast_expected = math.floor((2.0 - transfers(100.0, 100.0, 0.05)) / 0.1)
    assert set(events[events.client == 0].steps) == {min(20, fast_expected)} == {18}


def test_time_budget_defaults_to_the_round_deadline(tmp_path: Path) -> None:
    devices = [{"ids": [0, 1], **FAST}, {"ids": [2], "compute": 10.0, "down_mbps": 100.0, "up_mbps": 100.0,
                                          "latency_s": 0.0}]
    events, _ = run(tmp_path, population={"num_clients": 3, "clients": devices,
                                          "completeness": {"type": "time_budget"}},
                    algorithm={"name": "fedavg", "local_steps": 10, "batch_size": 10},
                    mode={"type": "sync", "deadline_s": 3.0}, stop={"rounds": 3})
    assert set(events.status) == {"applied"}  # nobody is late: everyone fits its work to the deadline
    slow = events[events.client == 2]
    assert set(slow.steps) == {math.floor((3.0 - 2 * MLP_8_BYTES * 8 / 100e6) / 1.0)} == {2}


def test_random_share_per_task_and_per_client_are_reproducible(tmp_path: Path) -> None:
    sections: dict[str, Any] = dict(
        population={"num_clients": 3, "completeness": {"type": "random", "distribution":
                                                       {"dist": "uniform", "low": 0.2, "high": 0.6}},
                    "clients": [{"ids": [2], "completeness": {"type": "random", "per": "client",
                                                              "distribution": {"dist": "beta", "a": 2, "b": 2}}}]},
        algorithm={"name": "fedavg", "local_steps": 10, "batch_size": 10}, stop={"rounds": 6}, seed=3)
    events, _ = run(tmp_path / "a", **sections)
    again, _ = run(tmp_path / "b", **sections)
    pd.testing.assert_frame_equal(events.drop(columns=["train_loss"]), again.drop(columns=["train_loss"]))
    per_task = events[events.client < 2]
    assert per_task.steps.between(2, 6).all() and per_task.steps.nunique() > 1
    for row in per_task.itertuples():
        share = numpy_rng(3, Stream.COMPLETENESS, row.client, row.client_task).uniform(0.2, 0.6)
        assert row.steps == max(1, math.floor(share * 10 + 1e-9))
    assert events[events.client == 2].steps.nunique() == 1


def test_connection_loss_in_async_mode_completes_with_give_up_times(tmp_path: Path) -> None:
    events, summary = run(tmp_path, population={"num_clients": 6, "connectivity": {"type": "per_task",
                                                                                    "probability": 0.3}},
                          algorithm={"name": "fedbuff", "local_steps": 5, "batch_size": 10, "buffer_size": 2},
                          mode={"type": "async", "concurrency": 3, "task_timeout_s": 4.0}, stop={"versions": 12})
    assert summary.stop_reason == "versions" and summary.versions == 12
    lost = events[events.status == "lost"]
    assert len(lost) >= 3 and summary.tasks_lost == len(lost)
    np.testing.assert_allclose(lost.finished_at, lost.dispatched_at + 4.0, rtol=1e-12)
    assert (lost.bytes_up == 0).all() and lost.train_loss.isna().all() and lost.version_applied.isna().all()
    for row in events.itertuples():  # exactly the tasks whose draw says so are lost
        draw = numpy_rng(0, Stream.CONNECTIVITY, row.client, row.client_task).random()
        assert (row.status == "lost") == (draw < 0.3) or row.status == "unfinished"
    # the slot is freed at the give-up: another task starts at that very time
    for t in lost.finished_at:
        assert np.isclose(events.dispatched_at, t, rtol=0, atol=1e-12).any()
    clients = pd.read_parquet(tmp_path / "clients.parquet")
    assert int(clients.tasks_lost.sum()) == len(lost)


def test_connection_loss_in_sync_mode_closes_the_round_at_the_timeout(tmp_path: Path) -> None:
    events, summary = run(tmp_path, population={"num_clients": 3, "clients": [
                              {"ids": [0, 1, 2], **FAST},
                              {"ids": [2], "connectivity": {"type": "per_task", "probability": 0.5}}]},
                          algorithm={"name": "fedavg", "local_steps": 5, "batch_size": 10},
                          mode={"type": "sync", "task_timeout_s": 3.0}, stop={"rounds": 8})
    assert summary.rounds == 8 and summary.versions == 8
    lost = events[events.status == "lost"]
    assert len(lost) >= 1 and set(lost.client) == {2}
    for row in lost.itertuples():
        assert row.finished_at == pytest.approx(row.dispatched_at + 3.0)
        nxt = events[events["round"] == row.round + 1]
        if len(nxt):  # the barrier waited for the server to give up
            assert nxt.dispatched_at.min() == pytest.approx(row.finished_at)
    assert set(events[events.status != "lost"].status) == {"applied"}


def test_per_second_loss_follows_the_exponential_draw(tmp_path: Path) -> None:
    rate = 0.4
    events, _ = run(tmp_path, population={"num_clients": 3, "connectivity": {"type": "per_second", "rate": rate},
                                          "clients": [{"ids": [0, 1, 2], **FAST}]},
                    algorithm={"name": "fedavg", "local_steps": 10, "batch_size": 10},
                    mode={"type": "sync", "task_timeout_s": 5.0}, stop={"rounds": 6})
    duration = transfers(100.0, 100.0, 0.05) + 1.0
    statuses = set()
    for row in events.itertuples():
        failure_at = numpy_rng(0, Stream.CONNECTIVITY, row.client, row.client_task).exponential(1 / rate)
        assert row.status == ("lost" if failure_at < duration else "applied")
        statuses.add(row.status)
    assert statuses == {"lost", "applied"}


def test_slow_task_times_out_and_its_client_stays_busy(tmp_path: Path) -> None:
    devices = [{"ids": [0, 1], **FAST}, {"ids": [2], "compute": 5.0, "down_mbps": 100.0, "up_mbps": 100.0,
                                          "latency_s": 0.0}]
    events, summary = run(tmp_path, population={"num_clients": 3, "clients": devices},
                          algorithm={"name": "fedbuff", "local_steps": 5, "batch_size": 10, "buffer_size": 1},
                          mode={"type": "async", "concurrency": 2, "task_timeout_s": 3.0},
                          stop={"virtual_time_s": 30.0})
    slow = events[events.client == 2].sort_values("dispatched_at")
    timed_out = slow[slow.status == "timed_out"]
    assert len(timed_out) >= 2 and summary.stragglers_dropped == len(timed_out)
    np.testing.assert_allclose(timed_out.finished_at, timed_out.dispatched_at + 3.0)
    assert (timed_out.bytes_up > 0).all()
    real_s = 50 / 5.0 + 2 * MLP_8_BYTES * 8 / 100e6  # the client really needs 10 s
    for a, b in zip(slow.dispatched_at.iloc[:-1], slow.dispatched_at.iloc[1:]):
        assert b >= a + real_s - 1e-9  # not dispatched again before it has really finished
    assert set(events[events.client != 2].status) <= {"applied", "unfinished"}


def test_timeout_no_task_can_meet_is_an_error(tmp_path: Path) -> None:
    s = scenario(population={"num_clients": 2, "clients": [{"ids": [0, 1], **FAST}]},
                 algorithm={"name": "fedavg", "local_steps": 10, "batch_size": 10},
                 mode={"type": "sync", "task_timeout_s": 0.5})
    with pytest.raises(ScenarioError, match=r"^test: mode.task_timeout_s: 0.5 s is shorter than the fastest "
                       r"possible task \(1.1\d* s\)"):
        run_scenario(s, Runtime("inline"), tmp_path)


class FakeBackend:
    def __init__(self) -> None:
        self.version = 0
        self.released: list[tuple[int, bool]] = []
        self.failed_tasks: list[tuple[int, bool]] = []
        self.started: list[int] = []

    def start(self, task: Task) -> None:
        self.started.append(task.index)  # the backend keys its work by task index; it never writes a Task

    def apply(self, tasks: Any) -> int:
        self.version += 1
        return self.version

    def release(self, task: Task, keep_state: bool) -> None:
        self.released.append((task.index, keep_state))

    def failed(self, task: Task) -> None:
        self.failed_tasks.append((task.index, task.lost))

    def evaluate(self) -> dict[str, float]:
        return {}


class FakeRecorder:
    def __init__(self) -> None:
        self.ended: list[Task] = []

    def task_ended(self, task: Task) -> None:
        self.ended.append(task)

    def evaluated(self, *args: Any) -> None: ...

    def progress(self, *args: Any) -> None: ...


def test_scripted_connection_loss_hook() -> None:
    """``Clock.lose_connection`` (for timeline events): the running task never comes back and
    the server gives up at its dispatch + timeout; the slot is refilled then."""
    n = 2
    devices = Devices(np.full(n, 10.0), np.full(n, 1e6), np.full(n, 1e6), np.zeros(n))
    backend, recorder = FakeBackend(), FakeRecorder()
    clock = Clock(devices=devices, availability=[Always()] * n, client_sizes=np.full(n, 10),
                  costs=TaskCosts(0, 0, lambda k: 20.0), mode=AsyncMode(type="async", concurrency=1,
                                                                            task_timeout_s=5.0),
                  stop=StopConfig(virtual_time_s=9.0), eval_every=100, backend=backend, recorder=recorder, seed=0)
    answers: list[bool] = []

    def script(env: simpy.Environment) -> Any:
        yield env.timeout(1.0)
        busy = next(iter(clock.busy))
        answers.append(clock.lose_connection(1 - busy))  # idle client: nothing to lose
        answers.append(clock.lose_connection(busy))
        answers.append(clock.lose_connection(busy))  # already lost

    clock.env.process(script(clock.env))
    clock.run()
    assert answers == [False, True, False]
    first = recorder.ended[0]
    assert first.status == LOST and first.ended_at == pytest.approx(5.0) and first.index == 0
    assert (0, False) in backend.released  # its computation was started, its result discarded
    assert backend.failed_tasks == [(0, True)]  # the algorithm hears of it once, as lost
    second = [t for t in recorder.ended if t.index == 1][0]
    assert second.dispatched_at == pytest.approx(5.0)  # the slot was freed at the give-up

    plain = Clock(devices=devices, availability=[Always()] * n, client_sizes=np.full(n, 10),
                  costs=TaskCosts(0, 0, lambda k: 20.0), mode=AsyncMode(type="async", concurrency=1),
                  stop=StopConfig(virtual_time_s=1.0), eval_every=100, backend=FakeBackend(),
                  recorder=FakeRecorder(), seed=0)
    plain.dispatch(0)  # a running task on a clock without a timeout
    with pytest.raises(ValueError, match="mode.task_timeout_s: required"):
        plain.lose_connection(0)


def test_scripted_connection_loss_in_sync_mode_holds_the_barrier_until_the_timeout() -> None:
    n = 3
    devices = Devices(np.full(n, 10.0), np.full(n, 1e6), np.full(n, 1e6), np.zeros(n))
    recorder = FakeRecorder()
    clock = Clock(devices=devices, availability=[Always()] * n, client_sizes=np.full(n, 10),
                  costs=TaskCosts(0, 0, lambda k: 20.0), mode=SyncMode(task_timeout_s=5.0),
                  stop=StopConfig(rounds=2), eval_every=100, backend=FakeBackend(), recorder=recorder, seed=0)

    def script(env: simpy.Environment) -> Any:
        yield env.timeout(1.0)
        assert clock.lose_connection(0)

    clock.env.process(script(clock.env))
    assert clock.run() == "rounds"
    by_index = {t.index: t for t in recorder.ended}
    assert by_index[0].status == LOST and by_index[0].ended_at == pytest.approx(5.0)
    assert [by_index[i].status for i in (1, 2)] == ["applied", "applied"]
    assert {by_index[i].dispatched_at for i in (3, 4, 5)} == {5.0}  # round 1 opens at the give-up
    assert clock.version == 2
