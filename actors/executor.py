"""Client executor: runs client tasks for whichever logical clients it is given.

An executor holds resources (a CPU/GPU share, the federation's tensors, a model workspace),
never truth: a client's persistent state comes in with each task and goes back with the
result, so any executor can serve any client and a lost executor costs only a retry.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from fedclock.actors.cuda_kernels import exact_cuda_kernels
from fedclock.actors.federation import Federation
from fedclock.actors.task_io import TaskInputs, TaskReport, grouped
from fedclock.actors.watchdog import wall_limit
from fedclock.actors.wire import map_tensors
from fedclock.algorithms.adapted import AdaptedEvaluation, adapted_evaluate
from fedclock.algorithms.base import Algorithm, ClientData, ClientResult, EvalResult, ServerState, Tensors
from fedclock.algorithms.vectorized import client_updates
from fedclock.algorithms.vectorized_eval import evaluate_clients, evaluates_vectorized
from fedclock.scheduling.rng import Stream, torch_rng

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
        self.wall_timeout_s: float | None = None

    def setup(self, federation: Federation, algorithm: Algorithm, seed: int, device: str = "cpu",
              vectorize: int = 1, wall_timeout_s: float | None = None) -> bool:
        """Load one run's data and algorithm; ``vectorize`` > 1 also evaluates up to that many
        clients' models at once when the algorithm can (:mod:`fedclock.algorithms.vectorized_eval`)."""
        self.device = torch.device(device)
        if self.device.type == "cuda":
            exact_cuda_kernels()
        self.vectorize = vectorize
        self.wall_timeout_s = wall_timeout_s
        self.federation = federation
        self.algorithm = algorithm.to(self.device)
        self.seed = seed
        return True

    def _data(self, client: int) -> ClientData:
        assert self.federation is not None, "executor used before setup()"
        return self.federation.client_data(client, device=self.device)

    def train(self, inputs: TaskInputs) -> tuple[Tensors, Tensors | None, TaskReport]:
        """One task: local work from the payload, seeded by (seed, client, task index), for the
        steps the clock assigned (None: the full count). Upload and state come back compact
        (see :func:`compact`)."""
        assert self.algorithm is not None, "executor used before setup()"
        rng = torch_rng(self.seed, Stream.TASK, inputs.client, inputs.client_task)
        data = self._task_data(inputs.client, inputs.steps)
        with wall_limit(self.wall_timeout_s, f"client {inputs.client}'s task {inputs.client_task}"):
            result = self.algorithm.client_update(inputs.payload, inputs.state, data, rng)
        return compact(result.upload), compact(result.state), self._reported(result, data)

    def train_many(self, tasks: Sequence[TaskInputs]) -> tuple[object, ...]:
        """K tasks trained at once (vectorized clients, :mod:`fedclock.algorithms.vectorized`);
        returns the K results as :func:`~fedclock.actors.task_io.grouped` lays them out (the
        uploads in one list, the reports in one list, then each state), equal to
        :meth:`train`'s within float rounding; uploads and states come back compact (see
        :func:`compact`)."""
        assert self.algorithm is not None, "executor used before setup()"
        datas = [self._task_data(int(t.client), t.steps) for t in tasks]
        rngs = [torch_rng(self.seed, Stream.TASK, int(t.client), int(t.client_task)) for t in tasks]
        what = ", ".join(f"client {t.client}'s task {t.client_task}" for t in tasks)
        with wall_limit(self.wall_timeout_s, f"{what} (trained at once)"):
            results = client_updates(self.algorithm, [t.payload for t in tasks], [t.state for t in tasks], datas, rngs)
        return grouped([(compact(result.upload), compact(result.state), self._reported(result, data))
                        for result, data in zip(results, datas)])

    def train_each(self, tasks: Sequence[TaskInputs]) -> tuple[object, ...]:
        """K tasks run one after the other, each exactly as :meth:`train` runs it (one call
        for several tasks: ``runtime.tasks_per_call``); the results are laid out as
        :meth:`train_many` lays them out."""
        return grouped([ClientExecutor.train(self, task) for task in tasks])

    def _task_data(self, client: int, steps: int | None) -> ClientData:
        data = self._data(client)
        return data if steps is None else dataclasses.replace(data, steps=steps)

    def _reported(self, result: ClientResult, data: ClientData) -> TaskReport:
        """The result's metrics, the steps the client reports it ran (``result.steps``, else
        the algorithm's ``metrics["steps"]``, else its full count) and whether it left a state."""
        assert self.algorithm is not None
        metrics = dict(result.metrics)
        done = result.steps if result.steps is not None else metrics.get("steps")
        metrics.pop("steps", None)
        steps = int(float(self.algorithm.task_steps(data) if done is None else done))
        return TaskReport(metrics, steps, result.state is not None)

    def evaluate_global(self, state: ServerState, start: int, stop: int, batch_size: int) -> EvalResult:
        """The global model (per the algorithm) on samples ``start:stop`` of the global test set."""
        assert self.algorithm is not None and self.federation is not None, "executor used before setup()"
        fed = self.federation
        return self.algorithm.evaluate_global(state, fed.x_test[start:stop].to(self.device),
                                              fed.y_test[start:stop].to(self.device), batch_size)

    def evaluate_global_spans(self, state: ServerState, spans: list[tuple[int, int]],
                              batch_size: int) -> list[EvalResult]:
        """:meth:`evaluate_global` of each ``(start, stop)`` span, in one call (a run's global
        evaluation sends each executor its share of the chunks at once)."""
        return [self.evaluate_global(state, start, stop, batch_size) for start, stop in spans]

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

    def evaluate_adapted(self, state: ServerState, clients: list[int], adaptation: AdaptedEvaluation,
                         batch_size: int) -> list[EvalResult]:
        """Each client's adapted copy of the global model on its own test split
        (``evaluation.adapted``, :mod:`fedclock.algorithms.adapted`): the batches of client
        ``c`` at server version ``v`` from the stream (seed, ``Stream.ADAPT``, c, v), so
        the results do not depend on which executor computes them, and training draws nothing
        from it. One client at a time, also with ``vectorize`` > 1."""
        assert self.algorithm is not None, "executor used before setup()"
        alg = self.algorithm
        weights = alg.global_weights(state).to(self.device)
        return [adapted_evaluate(alg.workspace, alg.model_factory, weights, self._data(c), alg.params, adaptation,
                                 torch_rng(self.seed, Stream.ADAPT, c, state.version), batch_size)
                for c in clients]
