"""Synchronous rounds in which every client trains, for learning tests of the pure
algorithm API (no runtime): the hooks in the order the runtime calls them."""
from __future__ import annotations

import torch

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ServerState, Tensors


def rounds_with_every_client(alg: Algorithm, clients: list[ClientData], rounds: int, seed: int
                             ) -> tuple[ServerState, list[Tensors | None]]:
    """``rounds`` synchronous rounds with every client, each task with its own generator
    (seeded by seed, round and client); the final server state and each client's kept state."""
    state = alg.init_server(torch.Generator().manual_seed(seed))
    kept: list[Tensors | None] = [None] * len(clients)
    for t in range(rounds):
        arrivals = []
        for c, data in enumerate(clients):
            rng = torch.Generator().manual_seed(seed * 100_003 + t * 101 + c)
            result = alg.client_update(alg.payload_for(state, c), kept[c], data, rng)
            kept[c] = result.state
            arrivals.append(Arrival(c, result.upload, result.num_samples, state.version, 0))
        state, _ = alg.server_receive(state, arrivals, torch.Generator().manual_seed(t))
    return state, kept
