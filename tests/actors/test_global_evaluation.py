"""The global evaluation's chunks (:class:`fedclock.actors.evaluation.Evaluation`): each executor
gets its share of the chunks in one call, and the results are added up in chunk order, so the
sums do not depend on the number of executors."""
from __future__ import annotations

from typing import Any

from fedclock.actors.evaluation import GLOBAL_EVAL_CHUNK, Evaluation
from fedclock.algorithms.base import EvalResult


LOSSES = (1e16, -1e16, 1.0, 1e16, -1e16, 1.0)
"""Chunk k's summed loss: added in chunk order 1.0; added executor by executor, 3 executors (chunks
0, 3 | 1, 4 | 2, 5) give 2.0 and 4 executors (0, 4 | 1, 5 | 2 | 3) give 0.0 (float64 loses a 1
beside 1e16)."""


class _Executor:
    """Answers a chunk with numbers whose float sum depends on the order they are added in."""

    def __init__(self, log: list[tuple[int, list[tuple[int, int]]]], me: int) -> None:
        self.log, self.me = log, me

    def evaluate_global_spans(self, state: Any, spans: list[tuple[int, int]], batch_size: int) -> list[EvalResult]:
        self.log.append((self.me, spans))
        return [EvalResult(float(stop - start), stop - start, LOSSES[start // GLOBAL_EVAL_CHUNK])
                for start, stop in spans]


class _Transport:
    def call(self, actor: Any, method: str, *args: Any) -> Any:
        return getattr(actor, method)(*args)


class _Calls:
    def __init__(self, executors: int) -> None:
        self.log: list[tuple[int, list[tuple[int, int]]]] = []
        self.executors = [_Executor(self.log, k) for k in range(executors)]
        self.t = _Transport()

    def distinct_slots(self) -> list[int]:
        return list(range(len(self.executors)))

    def on_executors(self, what: str, work: list[tuple[int, Any]], call: Any) -> list[Any]:
        return [call(slot, item) for slot, item in work]


def test_one_call_per_executor_and_the_chunk_order_sum_whatever_the_executors() -> None:
    n = 5 * GLOBAL_EVAL_CHUNK + 7  # six chunks, the last of 7 samples
    grouped = 0.0
    for k in (0, 3, 1, 4, 2, 5):
        grouped += LOSSES[k]
    assert grouped == 2.0  # what summing executor by executor would give with 3 executors
    for executors in (1, 2, 3, 4, 8):
        calls = _Calls(executors)
        evaluation = Evaluation(calls, num_clients=3, num_test=n, batch_size=16)  # type: ignore[arg-type]
        total = evaluation.global_result(state_ref="s")
        used = min(executors, 6)
        assert len(calls.log) == used  # one call each (none for an executor without a chunk)
        assert {k: [a // GLOBAL_EVAL_CHUNK for a, _ in spans] for k, spans in calls.log} == \
            {k: list(range(k, 6, executors)) for k in range(used)}  # chunk k to executor k mod S
        assert (total.count, total.correct, total.loss_sum) == (n, n, 1.0)
