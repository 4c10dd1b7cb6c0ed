"""FedNova's normalized averaging against hand-computed numbers, FedAvg's step weighting,
partial work honoured by every registered algorithm, and a short FedNova run that learns."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedclock.actors.executor import ClientExecutor
from fedclock.actors.task_io import TaskInputs
from fedclock.actors.runtime import Runtime
from fedclock.algorithms.base import Arrival, ClientData, ClientResult, ServerState
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fednova import FedNova, FedNovaParams, normalizer
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.registry import ALGORITHMS
from fedclock.algorithms.training import local_sgd
from fedclock.scenarios.experiment import run_scenario
from tests.algorithms.server_rules import TINY, gen
from tests.conftest import scenario

PLAIN_SGD = {"fedavg", "fedavg_async", "fedasync", "fedbuff", "fednova"}
"""Algorithms whose client step is plain local SGD (their partial task is checked weight by weight)."""


def arrival(client: int, delta: list[float], n: int, steps: int | None, staleness: int = 0) -> Arrival:
    return Arrival(client=client, upload={"delta": torch.tensor(delta)}, num_samples=n, version_dispatched=3,
                   staleness=staleness, steps=steps)


def test_normalizer_vanilla_and_momentum() -> None:
    assert normalizer(7, 0.0) == 7.0
    assert normalizer(0, 0.5) == 0.0
    assert normalizer(1, 0.9) == pytest.approx(1.0)
    # rho = 0.5, tau = 3: per-step counters 1, 1.5, 1.75 -> 4.25
    assert normalizer(3, 0.5) == pytest.approx(4.25)
    assert normalizer(2, 0.2) == pytest.approx(2.2)
    with pytest.raises(ValueError):
        normalizer(-1, 0.0)


def test_fednova_matches_hand_computation_for_different_step_counts() -> None:
    alg = FedNova(FedNovaParams(), TINY)
    state = ServerState(tensors={"weights": torch.tensor([1.0, -1.0])}, version=3)
    # client 0: n=1, tau=2, delta [2, 4]; client 1: n=3, tau=8, delta [8, -16]
    arrivals = [arrival(0, [2, 4], 1, 2), arrival(1, [8, -16], 3, 8)]
    new, changed = alg.receive(state, arrivals, gen())
    # p = (1/4, 3/4); tau_eff = 1/4*2 + 3/4*8 = 6.5
    # direction = 1/4*[2,4]/2 + 3/4*[8,-16]/8 = [0.25, 0.5] + [0.75, -1.5] = [1, -1]
    # w = [1, -1] + 6.5 * [1, -1] = [7.5, -7.5]
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([7.5, -7.5]))
    assert changed and new.version == 4 and new.extra["tau_eff"] == pytest.approx(6.5)
    # FedAvg on the same arrivals: 1/4*[2,4] + 3/4*[8,-16] = [6.5, -11]
    avg, _ = FedAvg(FedAvgParams(), TINY).receive(state, arrivals, gen())
    torch.testing.assert_close(avg.tensors["weights"], torch.tensor([7.5, -12.0]))


def test_fednova_momentum_server_lr_and_zero_steps() -> None:
    alg = FedNova(FedNovaParams(momentum=0.5, server_lr=0.5), TINY)
    state = ServerState(tensors={"weights": torch.zeros(1)}, version=0)
    # tau=3 with rho=0.5 -> ||a|| = 4.25; tau=1 -> 1; the zero-step client is left out
    arrivals = [arrival(0, [4.25], 2, 3), arrival(1, [3.0], 2, 1), arrival(2, [100.0], 4, 0)]
    new, changed = alg.receive(state, arrivals, gen())
    tau_eff = 0.5 * 4.25 + 0.5 * 1.0
    expected = 0.5 * tau_eff * (0.5 * 4.25 / 4.25 + 0.5 * 3.0 / 1.0)
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([expected]))
    assert changed
    none, changed = alg.receive(state, [arrival(0, [1.0], 1, 0)], gen())
    assert not changed and none is state
    with pytest.raises(ValueError, match="local steps"):
        alg.receive(state, [arrival(0, [1.0], 1, None)], gen())


def test_fedavg_weights_by_steps_when_asked() -> None:
    alg = FedAvg(FedAvgParams(weighting="steps"), TINY)
    state = ServerState(tensors={"weights": torch.zeros(2)}, version=0)
    new, _ = alg.receive(state, [arrival(0, [4, 0], 100, 1), arrival(1, [0, 4], 1, 3)], gen())
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([1.0, 3.0]))  # weights 1/4, 3/4


def digits_client(n: int = 40) -> ClientData:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 64, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return ClientData(0, x, y, x[:0], y[:0])


@pytest.mark.parametrize("name", sorted(n for n, c in ALGORITHMS.items() if c.partial_work))
def test_every_algorithm_runs_the_steps_the_clock_assigns(name: str) -> None:
    """A task told to run 3 of its 10 steps reports 3 steps and ends where 3 steps of the
    shared SGD loop end (same batches); without a count it runs all 10."""
    cls = ALGORITHMS[name]
    factory = ModelFactory("mlp", (64,), 10, hidden=(8,))
    alg = cls(cls.Params(lr=0.1, batch_size=8, local_steps=10), factory)
    payload = alg.payload_for(alg.init_server(gen()), 0)
    data = digits_client()
    part = alg.client_update(payload, None, dataclasses.replace(data, steps=3), gen())
    full = alg.client_update(payload, None, data, gen())

    def steps_of(r: ClientResult) -> int:
        return r.steps if r.steps is not None else int(r.metrics["steps"])

    assert steps_of(part) == 3 and steps_of(full) == 10
    if name in PLAIN_SGD:
        reference, _ = local_sgd(factory.build(), factory, payload["weights"], data, alg.params, gen(), 3)
        local = part.upload["weights"] if "weights" in part.upload else payload["weights"] + part.upload["delta"]
        torch.testing.assert_close(local, reference)


def test_executor_reports_the_step_counter() -> None:
    from fedclock.scenarios.data.federation import build_federation
    from fedclock.scenarios.schema import DatasetConfig

    fed = build_federation(DatasetConfig(name="digits"), 2, seed=0)
    alg = FedNova(FedNovaParams(local_steps=6, batch_size=8), ModelFactory("mlp", fed.input_shape, 10, (8,)))
    ex = ClientExecutor()
    ex.setup(fed, alg, seed=0)
    payload = alg.payload_for(alg.init_server(gen()), 0)
    assert ex.train(TaskInputs(0, 0, payload, None, 3))[2].steps == 3
    assert ex.train(TaskInputs(0, 0, payload, None, None))[2].steps == 6


def test_fednova_learns_digits_under_heterogeneous_completeness(tmp_path: Path) -> None:
    s = scenario(population={"num_clients": 4, "clients": [
                     {"ids": [0, 1], "completeness": {"type": "fraction", "value": 0.25}}]},
                 dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
                 algorithm={"name": "fednova", "lr": 0.1, "local_steps": 8, "batch_size": 16},
                 model={"name": "mlp", "hidden": [32]}, stop={"rounds": 12}, evaluation={"every": 12},
                 runtime={"backend": "inline"})
    summary = run_scenario(s, Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    assert set(events[events.client < 2].steps) == {2} and set(events[events.client >= 2].steps) == {8}
    assert summary.global_accuracy > 0.6, summary.global_accuracy  # chance is 0.1
