"""The plain-Python protocol loop that the hook-level learning tests share: sync rounds over
every idle client, with scripted lateness (no clock, no run directory)."""
from __future__ import annotations

from typing import Callable

import torch

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ServerState, Tensors


def run_straggled_rounds(alg: Algorithm, state: ServerState, clients: list[ClientData], rounds: int,
                         delay: dict[int, int], task_rng: Callable[[int, int], torch.Generator],
                         states: dict[int, Tensors | None] | None = None) -> ServerState:
    """``rounds`` server rounds from ``state`` over every idle client; client c's result
    arrives ``delay[c]`` rounds late (0 or absent: punctual) and joins the round it arrives in,
    with its staleness (the windowed async mode with ``late_windows``). ``task_rng(client,
    round)`` gives each task's generator; round r's server step draws from seed r. ``states``:
    each client's state, passed to its tasks and replaced by their results as the runtime keeps
    them (None: every task starts without one)."""
    pending: list[tuple[int, Arrival]] = []  # (round it arrives in, arrival)
    busy: set[int] = set()
    for r in range(rounds):
        for d in clients:
            if d.client in busy:
                continue
            result = alg.client_update(alg.payload_for(state, d.client),
                                       None if states is None else states.get(d.client), d, task_rng(d.client, r))
            if states is not None:
                states[d.client] = result.state
            pending.append((r + delay.get(d.client, 0),
                            Arrival(d.client, result.upload, result.num_samples, state.version, 0)))
            busy.add(d.client)
        due = [a for when, a in pending if when == r]
        pending = [(when, a) for when, a in pending if when != r]
        for a in due:
            a.staleness = state.version - a.version_dispatched
            busy.discard(a.client)
        state, _ = alg.receive(state, due, torch.Generator().manual_seed(r))
    return state
