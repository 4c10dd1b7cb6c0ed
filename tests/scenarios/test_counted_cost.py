"""Counted task costs in a run: GFLOP/s devices charge each model its own FLOPs, and a
client whose device memory cannot fit the task is never dispatched."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scenarios.experiment import run_scenario, task_costs
from fedclock.scheduling.devices import DeviceProfile, task_timing
from tests.conftest import scenario


@pytest.mark.slow
def test_mlp_and_resnet18_differ_by_their_flop_ratio() -> None:
    """The same task (2 steps of 8 samples of 3x32x32) on the same 10 GFLOP/s device: the
    compute seconds of a ResNet-18 and of an MLP are in the ratio of their counted FLOPs
    (about 2,000x here), where the old declared cost charged both the same."""
    params = FedAvg.Params(batch_size=8, local_steps=2)
    device = DeviceProfile(compute=10.0, down_mbps=100.0, up_mbps=100.0, latency_s=0.0)
    seconds, flops = [], []
    for name in ("mlp", "resnet18_gn"):
        alg = FedAvg(params, ModelFactory(name, (3, 32, 32), 10, (64,)))
        cost = TaskCost(alg)
        costs = task_costs(alg, cost, "gflops")
        seconds.append(task_timing(device, 0, 0, costs.work(100)).compute_s)
        flops.append(float(cost.flops(100)))
    assert seconds[1] / seconds[0] == pytest.approx(flops[1] / flops[0], rel=1e-12)
    assert flops[1] / flops[0] > 1000
    assert seconds[0] == pytest.approx(flops[0] / 1e9 / 10.0)


def test_infeasible_client_is_never_dispatched(tmp_path: Path) -> None:
    """Client 0's device gives training 1 kB, less than the MLP's parameters alone: it is
    infeasible, never dispatched, and recorded as such; with room for the task it trains.
    (Fails if the clock ignores feasibility: client 0 would be in every sync round.)"""
    s = scenario(population={"num_clients": 3, "clients": [{"ids": [0], "memory_gb": 1e-6}],
                             "compute_unit": "gflops"},
                 algorithm={"name": "fedavg", "local_steps": 2, "batch_size": 8}, stop={"rounds": 3})
    summary = run_scenario(s, Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    clients = pd.read_parquet(tmp_path / "clients.parquet")
    assert 0 not in set(events.client) and set(events.client) == {1, 2} and len(events) == 6
    assert list(clients.feasible) == [False, True, True] and summary.clients_infeasible == 1
    roomy = scenario(population={"num_clients": 3, "clients": [{"ids": [0], "memory_gb": 1.0}],
                                 "compute_unit": "gflops"},
                     algorithm={"name": "fedavg", "local_steps": 2, "batch_size": 8}, stop={"rounds": 1})
    run_scenario(roomy, Runtime("inline"), tmp_path / "roomy")
    assert 0 in set(pd.read_parquet(tmp_path / "roomy" / "events.parquet").client)
