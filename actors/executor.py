"""Client executor: runs client tasks for whichever logical clients it is given.

An executor holds resources (a CPU/GPU share, the federation's tensors, a model workspace),
never truth: a client's persistent state comes in with each task and goes back with the
result, so any executor can serve any client and a lost executor costs only a retry.
"""
from __future__ import annotations

import dataclasses

import torch

from fedclock.algorithms.base import Algorithm, ClientData, EvalResult, ServerState, Tensors
from fedclock.scenarios.federation import Federation
from fedclock.scheduling.rng import Stream, torch_rng


class ClientExecutor:
    """Runs ``client_update`` and client-side evaluation for logical clients."""

    def __init__(self, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self.federation: Federation | None = None
        self.algorithm: Algorithm | None = None
        self.seed = 0
        self.device = torch.device("cpu")

    def setup(self, federation: Federation, algorithm: Algorithm, seed: int, device: str = "cpu") -> bool:
        """Load one run's data and algorithm."""
        self.device = torch.device(device)
        self.federation = federation
        self.algorithm = algorithm.to(self.device)
        self.seed = seed
        return True

    def _data(self, client: int) -> ClientData:
        assert self.federation is not None, "executor used before setup()"
        return self.federation.client_data(client, device=self.device)

    def train(self, client: int, client_task: int, payload: Tensors, client_state: Tensors | None,
              steps: int | None = None) -> tuple[Tensors, Tensors | None, dict[str, float]]:
        """One task: local work from the payload, seeded by (seed, client, task index).
        ``steps`` is the number of local steps the clock assigned (None: the full count).
        The returned metrics always hold ``"steps"``, the steps the client reports it ran."""
        assert self.algorithm is not None, "executor used before setup()"
        rng = torch_rng(self.seed, Stream.TASK, client, client_task)
        data = self._data(client)
        if steps is not None:
            data = dataclasses.replace(data, steps=steps)
        result = self.algorithm.client_update(payload, client_state, data, rng)
        metrics = dict(result.metrics)
        done = result.steps if result.steps is not None else metrics.get("steps")
        metrics["steps"] = float(self.algorithm.task_steps(data) if done is None else done)
        return result.upload, result.state, metrics

    def evaluate_global(self, state: ServerState, start: int, stop: int, batch_size: int) -> EvalResult:
        """The global model (per the algorithm) on samples ``start:stop`` of the global test set."""
        assert self.algorithm is not None and self.federation is not None, "executor used before setup()"
        fed = self.federation
        return self.algorithm.evaluate_global(state, fed.x_test[start:stop].to(self.device),
                                              fed.y_test[start:stop].to(self.device), batch_size)

    def evaluate(self, clients: list[int], payloads: list[Tensors], states: list[Tensors | None],
                 batch_size: int) -> list[EvalResult]:
        """Each client's model (per the algorithm) on its own test split."""
        assert self.algorithm is not None, "executor used before setup()"
        return [self.algorithm.evaluate_client(p, s, self._data(c), batch_size)
                for c, p, s in zip(clients, payloads, states)]
