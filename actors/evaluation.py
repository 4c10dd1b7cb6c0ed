"""Evaluation on the executors: the global model on the global test set, each client's
model on its own test split, and each client's adapted copy of the global model on its own
test split (``evaluation.adapted``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedclock.actors.calls import ActorCalls
from fedclock.algorithms.adapted import AdaptedEvaluation
from fedclock.algorithms.base import EvalResult

GLOBAL_EVAL_CHUNK = 512
"""Global-test-set samples per evaluation chunk (a constant, so the summed results do not
depend on how many executors share the chunks)."""


class Evaluation:
    """Spreads one run's evaluations over its executors."""

    def __init__(self, calls: ActorCalls, num_clients: int, num_test: int, batch_size: int,
                 adaptation: AdaptedEvaluation | None = None) -> None:
        self.calls = calls
        self.num_clients = num_clients
        self.num_test = num_test
        """Size of the global test set."""
        self.batch_size = batch_size
        self.adaptation = adaptation
        """``evaluation.adapted`` (None: off)."""

    def global_state(self) -> Any:
        """A handle of the server's current global state, for :meth:`global_result` and
        :meth:`adapted` of one evaluation."""
        return self.calls.t.put(self.calls.on_server("current_state"))

    def global_result(self, state_ref: Any = None) -> EvalResult:
        """The global model (``state_ref``, default the server's current state) on the global
        test set, in fixed chunks of :data:`GLOBAL_EVAL_CHUNK` samples dealt over the
        executors (idle at an evaluation in sync mode; chunk ``k`` to the ``k mod S``-th of
        ``S``), each executor's chunks in one call, and added up in chunk order: the same sums
        whatever the number of executors, each chunk computed single-threaded as everywhere
        else. (One call a chunk was 20,000 actor calls an evaluation for ten million test
        samples: ~250 MB of Ray's bookkeeping in each executor and seconds of calls;
        ``benchmarks/RESULTS.md``, "Ten million clients, second pass".)"""
        calls = self.calls
        if state_ref is None:
            state_ref = self.global_state()
        slots = calls.distinct_slots()
        spans = [(a, min(a + GLOBAL_EVAL_CHUNK, self.num_test)) for a in range(0, self.num_test, GLOBAL_EVAL_CHUNK)]
        dealt = [spans[i::len(slots)] for i in range(len(slots))]
        work = [(slot, chunks) for slot, chunks in zip(slots, dealt) if chunks]
        parts: list[list[EvalResult]] = calls.on_executors(
            "global evaluation", work,
            lambda slot, chunks: calls.t.call(calls.executors[slot], "evaluate_global_spans", state_ref, chunks,
                                              self.batch_size))
        in_order: list[EvalResult] = [EvalResult(0.0, 0, 0.0)] * len(spans)
        for i, results in enumerate(parts):  # executor i's j-th chunk is chunk i + j S
            in_order[i::len(slots)] = results
        total = EvalResult(0.0, 0, 0.0)
        for part in in_order:
            total = EvalResult(total.correct + part.correct, total.count + part.count, total.loss_sum + part.loss_sum)
        return total

    def personalized(self, payloads: list[Any], states: list[Any]) -> list[EvalResult]:
        """Every client's model (from its payload and state handles, in client order) on its
        own test split, the clients cut into one consecutive chunk per executor."""
        calls = self.calls
        clients = list(range(len(payloads)))
        slots = calls.distinct_slots()
        chunks = [c for c in np.array_split(np.arange(len(clients)), len(slots)) if len(c)]
        parts = calls.on_executors(
            "personalized evaluation", list(zip(slots, chunks)),
            lambda slot, chunk: calls.t.call(calls.executors[slot], "evaluate", [clients[i] for i in chunk],
                                             [payloads[i] for i in chunk], [states[i] for i in chunk],
                                             self.batch_size))
        return [r for part in parts for r in part]

    def adapted(self, state_ref: Any) -> list[EvalResult]:
        """Every client's adapted copy of the global model (``state_ref``) on its own test
        split (client order), the clients cut into one consecutive chunk per executor; each
        client's result is the same whichever executor computes it
        (:meth:`~fedclock.actors.executor.ClientExecutor.evaluate_adapted`)."""
        assert self.adaptation is not None, "adapted evaluation without evaluation.adapted"
        calls, adaptation = self.calls, self.adaptation
        slots = calls.distinct_slots()
        chunks = [c for c in np.array_split(np.arange(self.num_clients), len(slots)) if len(c)]
        parts = calls.on_executors(
            "adapted evaluation", list(zip(slots, chunks)),
            lambda slot, chunk: calls.t.call(calls.executors[slot], "evaluate_adapted", state_ref,
                                             [int(c) for c in chunk], adaptation, self.batch_size))
        return [r for part in parts for r in part]
