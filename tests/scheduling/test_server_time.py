"""The server's step in virtual time (``server.compute_gflops``,
:mod:`fedclock.scheduling.server_device`): the new version is published the step's counted
FLOPs over the server's speed after its arrivals are in; without the setting nothing moves."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import simpy

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scheduling.devices import TaskTiming
from fedclock.scheduling.server_device import ServerDevice
from fedclock.scheduling.task import Task
from tests.conftest import scenario

P = 64 * 8 + 8 + 8 * 10 + 10
"""The digits MLP's parameters (64 features -> 8 hidden -> 10 classes)."""
SPEED = 1e-3
"""GFLOP/s: a server slow enough that a step takes seconds (1 MFLOP/s)."""
DEVICES = [{"ids": [0, 1, 2], "compute": 100.0, "down_mbps": 8.0, "up_mbps": 2.0, "latency_s": 0.1}]


def _metrics(tmp_path: Path, name: str, **sections: object) -> pd.DataFrame:
    run_scenario(scenario(**sections), Runtime("inline"), tmp_path / name)
    return pd.read_parquet(tmp_path / name / "metrics.parquet").set_index("version")


def test_step_seconds_by_hand() -> None:
    task = Task(index=0, client=0, client_task=0, round=0, version=0, dispatched_at=0.0,
                timing=TaskTiming(0.0, 0.0, 0.0), bytes_down=0, bytes_up=0, num_samples=1, env=simpy.Environment())
    assert ServerDevice().step_seconds(lambda tasks: 10**9) is None
    seconds = ServerDevice(compute_gflops=2.0).step_seconds(lambda tasks: len(tasks) * 10**9)
    assert seconds is not None and seconds([task] * 3) == 1.5


def test_sync_round_publishes_after_the_server_step(tmp_path: Path) -> None:
    """Sync FedAvg, three identical clients, two rounds: each round's version is published
    (and evaluated) ``(2 k P + 2 P) / speed`` seconds later than without a server speed (k = 3
    arrivals, FedAvg's averaging counted by hand in tests/algorithms/test_server_cost.py),
    and the second round starts that much later too. Fails if the clock ignores the setting."""
    common = dict(population={"num_clients": 3, "clients": DEVICES}, algorithm={"name": "fedavg", "local_steps": 2,
                                                                                  "batch_size": 8})
    plain = _metrics(tmp_path, "plain", **common)
    slow = _metrics(tmp_path, "slow", **common, server={"compute_gflops": SPEED})
    step = (2 * 3 * P + 2 * P) / (SPEED * 1e9)
    assert slow.loc[1, "virtual_time"] == pytest.approx(plain.loc[1, "virtual_time"] + step, rel=1e-12)
    assert slow.loc[2, "virtual_time"] == pytest.approx(plain.loc[2, "virtual_time"] + 2 * step, rel=1e-12)
    assert list(slow.global_accuracy) == list(plain.global_accuracy)


def test_async_arrival_publishes_after_the_server_step(tmp_path: Path) -> None:
    """Async FedAsync, one slot: each arrival's step (``(1 - a) w + a w_k``: two multiplies
    and an add, ``3 P``, counted by hand in tests/algorithms/test_server_cost.py) delays its
    version by ``3 P / speed``; the next dispatch waits for it, so version v comes ``v`` steps
    later."""
    common = dict(population={"num_clients": 3, "clients": DEVICES}, algorithm={"name": "fedasync", "local_steps": 2,
                                                                                  "batch_size": 8},
                  mode={"type": "async", "concurrency": 1}, stop={"versions": 2})
    plain = _metrics(tmp_path, "plain", **common)
    slow = _metrics(tmp_path, "slow", **common, server={"compute_gflops": SPEED})
    assert slow.loc[2, "virtual_time"] - plain.loc[2, "virtual_time"] == pytest.approx(
        2 * (slow.loc[1, "virtual_time"] - plain.loc[1, "virtual_time"]), rel=1e-9)
    assert slow.loc[1, "virtual_time"] - plain.loc[1, "virtual_time"] == pytest.approx(3 * P / (SPEED * 1e9),
                                                                                       rel=1e-9)


def test_fedbuff_flush_is_charged_where_it_runs(tmp_path: Path) -> None:
    """Async FedBuff, buffer K = 2, one slot, identical clients: version 1 comes after two
    arrivals, the first only appended (``buffer + c(s) delta``: 2 P), the second appended
    and flushed (``w + (eta / K) buffer``: 2 P more; counted by hand in
    tests/algorithms/test_server_cost.py). Each step delays the next dispatch, so version 1
    is published ``(2 P + 4 P) / speed`` later than without a server speed. Charging every
    arrival the first step's cost (the append, as before per-step counting) gives 4 P."""
    common = dict(population={"num_clients": 3, "clients": DEVICES},
                  algorithm={"name": "fedbuff", "local_steps": 2, "batch_size": 8, "buffer_size": 2},
                  mode={"type": "async", "concurrency": 1}, stop={"versions": 1})
    plain = _metrics(tmp_path, "plain", **common)
    slow = _metrics(tmp_path, "slow", **common, server={"compute_gflops": SPEED})
    assert slow.loc[1, "virtual_time"] - plain.loc[1, "virtual_time"] == pytest.approx(6 * P / (SPEED * 1e9),
                                                                                       rel=1e-9)


@pytest.mark.parametrize("value", ["0", "-1", ".nan", "fast"])
def test_bad_server_speed_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ndataset: {name: digits}\nalgorithm: {name: fedavg}\nstop: {rounds: 1}\n"
                    f"server: {{compute_gflops: {value}}}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "server.compute_gflops" in err and "Traceback" not in err, err


def test_spfl_refresh_and_model_updates_are_each_charged_their_own_step(tmp_path: Path) -> None:
    """Sync SPFL (Xie et al., Algorithm 1), Gamma = 2, three identical clients: a similarity
    refresh round (no new version), then two model updates. Each task uploads what it was
    sent for (the refresh tasks ``refresh``, the others ``update``), so the refresh step costs
    ``27 P + 36`` and each update ``21 P + 18`` (both counted by hand, over the digits MLP's
    two stages, in tests/algorithms/test_server_cost.py): version 1 comes ``48 P + 54``
    FLOPs of server time later than without a server speed, version 2 ``21 P + 18`` more.
    Shaping every upload like the first task's (a refresh) charged version 1 ``57 P + 72``."""
    common = dict(population={"num_clients": 3, "clients": DEVICES},
                  algorithm={"name": "spfl", "local_steps": 1, "batch_size": 8, "gamma": 2}, stop={"versions": 2})
    plain = _metrics(tmp_path, "plain", **common)
    slow = _metrics(tmp_path, "slow", **common, server={"compute_gflops": SPEED})
    delay = slow.virtual_time - plain.virtual_time
    assert delay.loc[1] == pytest.approx((48 * P + 54) / (SPEED * 1e9), rel=1e-12)
    assert delay.loc[2] - delay.loc[1] == pytest.approx((21 * P + 18) / (SPEED * 1e9), rel=1e-9)
