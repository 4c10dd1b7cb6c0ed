"""A plain-Python sync protocol for the consistency family's learning tests: digits split
non-IID (label-sorted shards), a sampled cohort per round, client state kept
between tasks (SCAFFOLD's control variates) — the hooks in the order the runtime calls them."""
from __future__ import annotations

import torch
from sklearn.datasets import load_digits

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ServerState, Tensors

NUM_CLIENTS = 8


class DigitsFederation:
    """Digits: 360 test images; the rest sorted by label and cut into shards, ``shards_per_client``
    (random) shards per client; ``seed`` draws which shards go to which client (the default, 1,
    is the split every test used before seeds were added)."""

    def __init__(self, shards_per_client: int = 2, seed: int = 1) -> None:
        digits = load_digits()
        x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        x, y = x[order], y[order]
        self.x_test, self.y_test = x[:360], y[:360]
        x_tr, y_tr = x[360:], y[360:]
        by_label = torch.argsort(y_tr, stable=True)
        k = shards_per_client
        shards = by_label.chunk(k * NUM_CLIENTS)
        pick = torch.randperm(k * NUM_CLIENTS, generator=torch.Generator().manual_seed(seed)).tolist()
        self.clients = []
        for c in range(NUM_CLIENTS):
            idx = torch.cat([shards[pick[k * c + j]] for j in range(k)])
            self.clients.append(ClientData(c, x_tr[idx], y_tr[idx], x_tr[:0], y_tr[:0]))

    def accuracy(self, alg: Algorithm, state: ServerState) -> float:
        return alg.evaluate_global(state, self.x_test, self.y_test, batch_size=512).accuracy


def run_sync(alg: Algorithm, fed: DigitsFederation, rounds: int, cohort: int,
             seed: int = 0) -> tuple[ServerState, dict[int, Tensors]]:
    """``rounds`` sync rounds over ``cohort`` clients drawn per round; returns the final
    state and the clients' persistent states. ``seed`` shifts every draw (initial model, cohorts,
    local batches); two algorithms run with one seed see the same draws (paired)."""
    state, states, _ = run_sync_curve(alg, fed, rounds, cohort, seed, curve=False)
    return state, states


def run_sync_curve(alg: Algorithm, fed: DigitsFederation, rounds: int, cohort: int, seed: int = 0,
                   curve: bool = True) -> tuple[ServerState, dict[int, Tensors], list[float]]:
    """:func:`run_sync`, and (``curve``) the global test accuracy before the first round and
    after every round (``rounds + 1`` numbers; their mean is the area under the accuracy curve)."""
    alg.num_clients = len(fed.clients)
    state = alg.init_server(torch.Generator().manual_seed(42 + 7919 * seed))
    states: dict[int, Tensors] = {}
    pick = torch.Generator().manual_seed(7 + 7919 * seed)
    accuracies = [fed.accuracy(alg, state)] if curve else []
    for r in range(rounds):
        chosen = sorted(torch.randperm(len(fed.clients), generator=pick)[:cohort].tolist())
        arrivals = []
        for c in chosen:
            result = alg.client_update(alg.payload_for(state, c), states.get(c), fed.clients[c],
                                       torch.Generator().manual_seed(1000 * c + r + 7919 * seed))
            if result.state is not None:
                states[c] = result.state
            arrivals.append(Arrival(c, result.upload, result.num_samples, state.version, 0))
        state, _ = alg.receive(state, arrivals, torch.Generator().manual_seed(r + 7919 * seed))
        if curve:
            accuracies.append(fed.accuracy(alg, state))
    return state, states, accuracies
