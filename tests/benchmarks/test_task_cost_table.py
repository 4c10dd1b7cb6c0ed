"""The per-round column of ``benchmarks/task_cost_table.py`` (FedReCo Table 2's header):
a sync round over every client is the slowest task (download, compute, upload) plus the
server's step, by hand."""
from __future__ import annotations

from fractions import Fraction

import pytest

from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.spfl import SPFL
from fedclock.algorithms.task_cost import TaskCost
from tests.benchmarks.scripts import load_script
from tests.conftest import scenario

P = 64 * 8 + 8 + 8 * 10 + 10
"""The digits MLP's parameters (64 features -> 8 hidden -> 10 classes)."""
DEVICES = {"compute": 2.0, "down_mbps": 8.0, "up_mbps": 2.0, "latency_s": 0.1}


def test_round_is_the_slowest_task_plus_the_server_step() -> None:
    """Three clients, the second at half the compute: the round is its task, ``4 P`` bytes
    each way over 8 and 2 Mbit/s plus 0.1 s latency each, its counted GFLOP over 1 GFLOP/s,
    plus FedAvg's step on three uploads, ``(2 * 3 P + 2 P)`` FLOPs over 1 MFLOP/s
    (tests/algorithms/test_server_cost.py). A cohort of part of the population has no such
    round ("-")."""
    table = load_script("task_cost_table")
    population = {"num_clients": 3, "compute_unit": "gflops", "devices": DEVICES,
                  "clients": [{"ids": [1], "compute": 1.0}]}
    algorithm = {"name": "fedavg", "local_steps": 2, "batch_size": 8}
    run = scenario(population=population, algorithm=algorithm, server={"compute_gflops": 1e-3})
    alg = FedAvg(run.algorithm.params, ModelFactory("mlp", (64,), 10, (8,)))
    cost = TaskCost(alg)
    task = (4 * P * 8 / 8e6 + 0.1) + float(cost.flops(40)) / 1e9 / 1.0 + (4 * P * 8 / 2e6 + 0.1)
    assert table.round_seconds(run, alg, cost, 40) == pytest.approx(task + (2 * 3 * P + 2 * P) / 1e6, rel=1e-12)
    part = scenario(population=population, algorithm=algorithm, mode={"type": "sync", "cohort_size": 2})
    assert table.round_seconds(part, alg, cost, 40) is None


def test_the_server_step_is_charged_as_a_run_follows_it() -> None:
    """Sync SPFL (Xie et al., Algorithm 1), Gamma = 2, three clients, three rounds: a
    similarity refresh (``27 P + 36`` FLOPs), then two model updates (``21 P + 18`` each),
    counted by hand in tests/algorithms/test_server_cost.py. The round's server part is their
    mean over the run's three rounds, at 1 MFLOP/s; followed over one round it is the refresh.
    Counting every round's step from the initial state, as the column did, charged the
    refresh (with every upload shaped like a refresh's) to all three. About 5 s under load:
    the table counts the file's tasks and follows the server through three rounds."""
    table = load_script("task_cost_table")
    population = {"num_clients": 3, "compute_unit": "gflops", "devices": DEVICES}
    algorithm = {"name": "spfl", "local_steps": 2, "batch_size": 8, "gamma": 2}
    run = scenario(population=population, algorithm=algorithm, stop={"rounds": 3}, server={"compute_gflops": 1e-3})
    plain = scenario(population=population, algorithm=algorithm, stop={"rounds": 3})
    alg = SPFL(run.algorithm.params, ModelFactory("mlp", (64,), 10, (8,)))
    alg.num_clients = 3
    cost = TaskCost(alg)
    refresh, update = 27 * P + 36, 21 * P + 18
    assert table.server_flops_per_round(alg, 3, 40, 3) == Fraction(refresh + 2 * update, 3)
    assert table.server_flops_per_round(alg, 3, 40, 1) == refresh
    server = table.round_seconds(run, alg, cost, 40) - table.round_seconds(plain, alg, cost, 40)
    assert server == pytest.approx((refresh + 2 * update) / 3 / 1e6, rel=1e-9)
