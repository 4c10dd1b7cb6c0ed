"""End-to-end learning on sklearn's digits with a plain-Python protocol loop (no Ray, no
SimPy): the hooks are called in the order the runtime calls them, with hand-made staleness.
"""
from __future__ import annotations

from collections import deque

import pytest
import torch
from sklearn.datasets import load_digits

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ServerState
from fedclock.algorithms.fedasync import FedAsync, FedAsyncParams
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_async import FedAvgAsync, FedAvgAsyncParams
from fedclock.algorithms.fedbuff import FedBuff, FedBuffParams
from fedclock.algorithms.models import ModelFactory
from tests.algorithms.straggled_rounds import run_straggled_rounds

NUM_CLIENTS = 5
FACTORY = ModelFactory("mlp", (64,), 10, hidden=(64,))


class Federation:
    """Digits split IID among clients, plus a global test set."""

    def __init__(self) -> None:
        digits = load_digits()
        x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        x, y = x[order], y[order]
        n_test = 360
        self.x_test, self.y_test = x[:n_test], y[:n_test]
        parts = torch.arange(n_test, len(y)).chunk(NUM_CLIENTS)
        self.clients = [ClientData(c, x[idx], y[idx], x[:0], y[:0]) for c, idx in enumerate(parts)]

    def accuracy(self, alg: Algorithm, state: ServerState) -> float:
        return alg.evaluate_global(state, self.x_test, self.y_test, batch_size=512).accuracy


@pytest.fixture(scope="module")
def fed() -> Federation:
    return Federation()


def task_rng(client: int, task: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 * client + task)


def run_rounds(alg: Algorithm, fed: Federation, rounds: int, straggler_delay: dict[int, int]) -> ServerState:
    """Sync rounds over every idle client; client c's result arrives ``straggler_delay[c]``
    rounds late (0 = punctual) and joins the round in which it arrives."""
    state = alg.init_server(torch.Generator().manual_seed(42))
    return run_straggled_rounds(alg, state, fed.clients, rounds, straggler_delay, task_rng)


def run_async(alg: Algorithm, fed: Federation, arrivals: int, concurrency: int) -> tuple[ServerState, list[int]]:
    """``concurrency`` tasks in flight, completing first-in first-out; each completion is
    handed to the server alone and frees its slot for the next client in turn."""
    state = alg.init_server(torch.Generator().manual_seed(42))
    in_flight: deque[tuple[int, int, dict[str, torch.Tensor]]] = deque()
    next_client, task = 0, 0
    stalenesses: list[int] = []

    def dispatch() -> None:
        nonlocal next_client
        in_flight.append((next_client, state.version, alg.payload_for(state, next_client)))
        next_client = (next_client + 1) % NUM_CLIENTS

    for _ in range(concurrency):
        dispatch()
    for _ in range(arrivals):
        client, version, payload = in_flight.popleft()
        result = alg.client_update(payload, None, fed.clients[client], task_rng(client, task))
        task += 1
        arrival = Arrival(client, result.upload, result.num_samples, version, state.version - version)
        stalenesses.append(arrival.staleness)
        state, _ = alg.receive(state, [arrival], torch.Generator().manual_seed(task))
        dispatch()
    return state, stalenesses


def test_fedavg_learns_digits(fed: Federation) -> None:
    alg = FedAvg(FedAvgParams(lr=0.2, batch_size=32, local_epochs=2), FACTORY)
    assert fed.accuracy(alg, alg.init_server(torch.Generator().manual_seed(42))) < 0.3
    state = run_rounds(alg, fed, rounds=10, straggler_delay={})
    assert state.version == 10
    assert fed.accuracy(alg, state) >= 0.85


def test_fedavg_async_learns_with_stale_models(fed: Federation) -> None:
    alg = FedAvgAsync(FedAvgAsyncParams(lr=0.2, batch_size=32, local_epochs=2), FACTORY)
    state = run_rounds(alg, fed, rounds=10, straggler_delay={3: 1, 4: 2})
    assert state.version == 10
    assert fed.accuracy(alg, state) >= 0.8


def test_fedasync_learns(fed: Federation) -> None:
    alg = FedAsync(FedAsyncParams(lr=0.2, batch_size=32, local_epochs=2, alpha=0.6), FACTORY)
    state, stalenesses = run_async(alg, fed, arrivals=50, concurrency=3)
    assert state.version == 50 and max(stalenesses) == 2
    assert fed.accuracy(alg, state) >= 0.8


def test_fedbuff_learns(fed: Federation) -> None:
    params = FedBuffParams(lr=0.2, batch_size=32, local_epochs=2, buffer_size=2, staleness_weighting=True)
    alg = FedBuff(params, FACTORY)
    state, stalenesses = run_async(alg, fed, arrivals=40, concurrency=3)
    assert state.version == 20 and max(stalenesses) >= 1
    assert fed.accuracy(alg, state) >= 0.8
