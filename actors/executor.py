"""Client executor: runs client tasks for whichever logical clients it is given.

An executor holds resources (a CPU/GPU share, the federation's tensors, a model workspace),
never truth: a client's persistent state comes in with each task and goes back with the
result, so any executor can serve any client and a lost executor costs only a retry.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fedclock.actors.cuda_kernels import exact_cuda_kernels
from fedclock.actors.federation import Federation
from fedclock.actors.wire import map_tensors
from fedclock.algorithms.base import Algorithm, ClientData, ClientResult, EvalResult, ServerState, Tensors
from fedclock.algorithms.vectorized import client_updates
from fedclock.algorithms.vectorized_eval import evaluate_clients, evaluates_vectorized
from fedclock.scheduling.rng import Stream, torch_rng

STATE_KEPT = "state_kept"
"""Metrics key set by :meth:`ClientExecutor.train`: 1.0 when the task returned a client state
to keep, 0.0 when it returned None (stateless algorithms), so the runtime can drop its
reference without fetching the state. The runtime removes the key before recording metrics."""


TRAIN_ARGS = 5
"""Arguments of one task in :meth:`ClientExecutor.train` (and per task in ``train_many``):
client, task index, payload, client state, steps."""

RESULTS_PER_TASK = 3
"""Results of one task: upload, client state, metrics."""


def _owned(tensor: torch.Tensor) -> torch.Tensor:
    larger = tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size()
    return tensor.clone() if larger else tensor


def compact(value: Any) -> Any:
    """``value`` (a tensor, or a dict/list/tuple of them, or anything else) with every tensor
    that is a view into a larger storage replaced by a copy of just its elements (same
    values). Pickling a view ships its whole storage: a state sliced out of a flat vector
    would otherwise travel and be kept at the size of the whole vector."""
    return map_tensors(value, _owned)


class ClientExecutor:
    """Runs ``client_update`` and client-side evaluation for logical clients."""

    def __init__(self, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self.federation: Federation | None = None
        self.algorithm: Algorithm | None = None
        self.seed = 0
        self.device = torch.device("cpu")
        self.vectorize = 1

    def setup(self, federation: Federation, algorithm: Algorithm, seed: int, device: str = "cpu",
              vectorize: int = 1) -> bool:
        """Load one run's data and algorithm; ``vectorize`` > 1 also evaluates up to that many
        clients' models at once when the algorithm can (:mod:`fedclock.algorithms.vectorized_eval`)."""
        self.device = torch.device(device)
        if self.device.type == "cuda":
            exact_cuda_kernels()
        self.vectorize = vectorize
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
        The returned metrics always hold ``"steps"``, the steps the client reports it ran, and
        :data:`STATE_KEPT`; upload and state come back compact (see :func:`compact`)."""
        assert self.algorithm is not None, "executor used before setup()"
        rng = torch_rng(self.seed, Stream.TASK, client, client_task)
        data = self._task_data(client, steps)
        result = self.algorithm.client_update(payload, client_state, data, rng)
        return compact(result.upload), compact(result.state), self._reported(result, data)

    def train_many(self, *inputs: Any) -> tuple[object, ...]:
        """K tasks trained at once (vectorized clients, :mod:`fedclock.algorithms.vectorized`).
        ``inputs`` are K consecutive groups of :meth:`train`'s five arguments (flat, so that
        Ray resolves the object references among them); returns the K results flat, as
        ``upload_1, state_1, metrics_1, upload_2, ...``, equal to :meth:`train`'s within
        float rounding; uploads and states come back compact (see :func:`compact`)."""
        assert self.algorithm is not None, "executor used before setup()"
        if len(inputs) % TRAIN_ARGS:
            raise ValueError(f"train_many: expected groups of {TRAIN_ARGS} arguments, got {len(inputs)}")
        clients, task_indices, payloads, states, steps = (inputs[i::TRAIN_ARGS] for i in range(TRAIN_ARGS))
        datas = [self._task_data(int(c), s) for c, s in zip(clients, steps)]
        rngs = [torch_rng(self.seed, Stream.TASK, int(c), int(k))
                for c, k in zip(clients, task_indices)]
        results = client_updates(self.algorithm, list(payloads), list(states), datas, rngs)
        out: list[object] = []
        for result, data in zip(results, datas):
            out += [compact(result.upload), compact(result.state), self._reported(result, data)]
        return tuple(out)

    def train_each(self, *inputs: Any) -> tuple[object, ...]:
        """K tasks run one after the other, each exactly as :meth:`train` runs it (one call
        for several tasks: ``runtime.tasks_per_call``). ``inputs`` and the results are flat
        as in :meth:`train_many`."""
        if len(inputs) % TRAIN_ARGS:
            raise ValueError(f"train_each: expected groups of {TRAIN_ARGS} arguments, got {len(inputs)}")
        out: list[object] = []
        for k in range(0, len(inputs), TRAIN_ARGS):
            out += self.train(*inputs[k:k + TRAIN_ARGS])
        return tuple(out)

    def _task_data(self, client: int, steps: int | None) -> ClientData:
        data = self._data(client)
        return data if steps is None else dataclasses.replace(data, steps=steps)

    def _reported(self, result: ClientResult, data: ClientData) -> dict[str, float]:
        """The result's metrics with ``"steps"``, the steps the client reports it ran."""
        assert self.algorithm is not None
        metrics = dict(result.metrics)
        done = result.steps if result.steps is not None else metrics.get("steps")
        metrics["steps"] = float(self.algorithm.task_steps(data) if done is None else done)
        metrics[STATE_KEPT] = float(result.state is not None)
        return metrics

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
        if self.vectorize > 1 and evaluates_vectorized(self.algorithm):
            out: list[EvalResult] = []
            for start in range(0, len(clients), self.vectorize):
                part = slice(start, start + self.vectorize)
                out += evaluate_clients(self.algorithm, payloads[part], states[part],
                                        [self._data(c) for c in clients[part]], batch_size)
            return out
        return [self.algorithm.evaluate_client(p, s, self._data(c), batch_size)
                for c, p, s in zip(clients, payloads, states)]
