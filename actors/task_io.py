"""What a client task takes and gives back, as the executors and the session pass it."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from fedclock.actors.transport import Part


class TaskInputs(NamedTuple):
    """What a client task is started with (payload and state may be handles: object
    references on Ray, resolved by the executor)."""

    client: int
    client_task: int
    """How many tasks the client had before this one (with the client, it seeds the task)."""
    payload: Any
    state: Any
    steps: int | None
    """Local steps the clock assigned (None: the algorithm's full count)."""


class TaskReport(NamedTuple):
    """What a task tells besides its upload and state (small: fetched at once, while upload
    and state stay handles)."""

    metrics: dict[str, float]
    """The algorithm's training metrics (``train_loss``, ...)."""
    steps: int
    """Local steps the client reports it ran."""
    state_kept: bool
    """The task returned a client state to keep (False: None, e.g. stateless algorithms), so
    the session can drop its reference without fetching the state."""


class TaskResults(NamedTuple):
    """Handles of a task's three results, in the order the executor returns them."""

    upload: Any
    state: Any
    report: Any


RESULTS_PER_TASK = len(TaskResults._fields)
"""Results of one task: upload, client state, report."""


def grouped(results: Sequence[tuple[Any, Any, Any]]) -> tuple[object, ...]:
    """Several tasks' (upload, state, report) as one call for them returns them: the uploads in
    one list, the reports in one list, then each task's state on its own (a client's state may
    be kept for many rounds: alone, it holds no other client's state alive). See
    :func:`group_results`."""
    return [u for u, _, _ in results], [r for _, _, r in results], *(s for _, s, _ in results)


def group_returns(size: int) -> int:
    """How many values :func:`grouped` returns for ``size`` tasks."""
    return 2 + size


def group_results(handles: Sequence[Any], size: int) -> list[TaskResults]:
    """Each task's result handles from the handles of :func:`grouped`'s values (the upload and
    the report as :class:`~fedclock.actors.transport.Part` s of their lists)."""
    uploads, reports, *states = handles
    return [TaskResults(Part(uploads, j), states[j], Part(reports, j)) for j in range(size)]
