"""The server: holds the global state and runs the algorithm's server hooks."""
from __future__ import annotations

from typing import Any

import torch

from fedclock.actors.transport import picked
from fedclock.algorithms.base import Algorithm, Arrival, Failure, ServerState, Tensors
from fedclock.scheduling.rng import Stream, torch_rng


class Server:
    """Global state of one run. Every random draw is seeded by (seed, receive count)."""

    def __init__(self, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self.algorithm: Algorithm | None = None
        self.state: ServerState | None = None
        self.seed = 0
        self.receives = 0

    def setup(self, algorithm: Algorithm, seed: int) -> int:
        """Start a run: initial state from the algorithm; returns the version (0)."""
        self.algorithm = algorithm
        self.seed = seed
        self.receives = 0
        self.state = algorithm.init_server(torch_rng(seed, Stream.INIT))
        return self.state.version

    def payload_for(self, client: int) -> Tensors:
        assert self.algorithm is not None and self.state is not None, "server used before setup()"
        return self.algorithm.payload_for(self.state, client)

    def receive(self, meta: list[tuple[int, int, int, int, int | None]], *uploads: Tensors) -> int:
        """Apply arrivals, given as (client, num_samples, version_dispatched, staleness, steps)
        and their uploads in the same order; return the server version."""
        assert self.algorithm is not None and self.state is not None, "server used before setup()"
        arrivals = [Arrival(client=c, upload=u, num_samples=n, version_dispatched=v, staleness=s, steps=k)
                    for (c, n, v, s, k), u in zip(meta, uploads)]
        rng = torch_rng(self.seed, Stream.SERVER, self.receives)
        self.receives += 1
        self.state, _ = self.algorithm.receive(self.state, arrivals, rng)  # the version moves here only
        return self.state.version

    def receive_parts(self, meta: list[tuple[int, int, int, int, int | None]], picks: list[tuple[int, int]],
                      *values: Any) -> int:
        """:meth:`receive` of the uploads at ``picks`` in ``values`` (each group's list of uploads
        passed once, :func:`fedclock.actors.transport.gathered`)."""
        return self.receive(meta, *picked(picks, values))

    def task_failed(self, client: int, version_dispatched: int, reason: str) -> int:
        """The clock gave up on a task of ``client`` (``reason``: lost or timed_out): the
        algorithm's failure hook updates the state; the version stays. Returns it."""
        assert self.algorithm is not None and self.state is not None, "server used before setup()"
        new = self.algorithm.server_task_failed(self.state, Failure(client, version_dispatched, reason))
        self.state = ServerState(tensors=new.tensors, version=self.state.version, extra=new.extra)
        return self.state.version

    def metrics(self) -> dict[str, float]:
        """The algorithm's numbers about the global state (:meth:`Algorithm.server_metrics`)."""
        assert self.algorithm is not None and self.state is not None, "server used before setup()"
        return self.algorithm.server_metrics(self.state)

    def snapshot(self) -> tuple[ServerState, int]:
        """The global state and the receive count (what a checkpoint keeps of the server)."""
        assert self.state is not None, "server used before setup()"
        return self.state, self.receives

    def restore(self, state: ServerState, receives: int) -> int:
        """Go back to a checkpoint's state and receive count (after :meth:`setup` with the
        run's algorithm and seed); later draws continue the (seed, receive count) sequence.
        Returns the version."""
        assert self.algorithm is not None, "server used before setup()"
        self.state = state
        self.receives = receives
        return state.version

    def current_state(self) -> ServerState:
        """The global state (global evaluation runs on the executors; end-of-run evaluations
        such as linear evaluation read it too)."""
        assert self.state is not None, "server used before setup()"
        return self.state

