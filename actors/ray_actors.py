"""The executor and the server as Ray actors: what differs from the in-process classes is
only how values cross the process boundary (:mod:`fedclock.actors.wire`, :class:`ByReference`)."""
from __future__ import annotations

from typing import Any, Sequence

from fedclock.actors.executor import ClientExecutor
from fedclock.actors.server import Server
from fedclock.actors.task_io import TaskInputs, TaskReport
from fedclock.actors.transport import ByReference, picked
from fedclock.actors.wire import from_held, to_held, to_wire
from fedclock.algorithms.base import EvalResult, ServerState, Tensors


def _resolve(values: list[Any]) -> list[Any]:
    """Fetch the object references in a list (each distinct one once)."""
    import ray

    refs = {v for v in values if isinstance(v, ray.ObjectRef)}
    if not refs:
        return values
    order = list(refs)
    fetched = dict(zip(order, ray.get(order)))
    return [fetched[v] if isinstance(v, ray.ObjectRef) else v for v in values]


class RayClientExecutor(ClientExecutor):
    """The executor as a Ray actor: payloads come :class:`ByReference`; client states inside
    :class:`TaskInputs` and nested object references in evaluation lists are fetched; uploads
    and states leave as :func:`~fedclock.actors.wire.to_wire` (one copy each way), a group's
    list of uploads as :func:`~fedclock.actors.wire.to_held` (the server copies out those it applies).

    A cached payload is handed to every task that names the same reference, as the inline
    backend hands one payload object to every task: algorithms never modify a payload
    (their purity contract, and the inline/Ray equality tests check it)."""

    def __init__(self, threads: int = 1) -> None:
        super().__init__(threads)
        self._cached: tuple[Any, Any] | None = None

    def _shared(self, value: Any) -> Any:
        """A :class:`ByReference`'s value (fetched once per distinct reference); other
        values as they are."""
        if not isinstance(value, ByReference):
            return value
        if self._cached is None or self._cached[0] != value.ref:
            import ray

            self._cached = (value.ref, ray.get(value.ref))
        return self._cached[1]

    def _fetched(self, tasks: Sequence[TaskInputs]) -> list[TaskInputs]:
        """The tasks with their payloads and client states as values."""
        states = _resolve([t.state for t in tasks])
        return [t._replace(payload=self._shared(t.payload), state=s) for t, s in zip(tasks, states)]

    def train(self, inputs: TaskInputs) -> tuple[Tensors, Tensors | None, TaskReport]:
        upload, state, report = super().train(self._fetched((inputs,))[0])
        return to_wire(upload), to_wire(state), report

    def train_many(self, tasks: Sequence[TaskInputs]) -> tuple[object, ...]:
        return _on_wire(super().train_many(self._fetched(tasks)))

    def train_each(self, tasks: Sequence[TaskInputs]) -> tuple[object, ...]:
        return _on_wire(super().train_each(self._fetched(tasks)))

    def evaluate(self, clients: list[int], payloads: list[Tensors], states: list[Tensors | None],
                 batch_size: int) -> list[EvalResult]:
        return super().evaluate(clients, _resolve(payloads), _resolve(states), batch_size)


def _on_wire(results: tuple[Any, ...]) -> tuple[object, ...]:
    """A group's results (:func:`~fedclock.actors.task_io.grouped`) with the uploads as
    :func:`to_held` and the states as :func:`to_wire`."""
    uploads, reports, *states = results
    return [to_held(u) for u in uploads], reports, *(to_wire(s) for s in states)


class RayServer(Server):
    """The server as a Ray actor: payloads and the global state leave as
    :func:`~fedclock.actors.wire.to_wire` (one copy each way); of a group's list of uploads
    only those applied are copied out (:func:`~fedclock.actors.wire.from_held`)."""

    def payload_for(self, client: int) -> Tensors:
        return to_wire(super().payload_for(client))

    def current_state(self) -> ServerState:
        return to_wire(super().current_state())

    def receive_parts(self, meta: list[tuple[int, int, int, int, int | None]], picks: list[tuple[int, int]],
                      *values: Any) -> int:
        return self.receive(meta, *(from_held(u) for u in picked(picks, values)))
