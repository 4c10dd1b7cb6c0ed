"""How calls reach actors: at once in this process (inline), or as Ray actor tasks.

A *handle* is what a call returns and what a later call may take: the value itself inline,
an object reference on Ray, or a :class:`Part` of either. The session never tells them apart;
it asks the transport.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, Sequence


class Transport(Protocol):
    """How calls reach actors."""

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any: ...

    def by_reference(self, handle: Any) -> Any:
        """``handle`` as a call argument that the callee resolves itself (see
        :class:`ByReference`), instead of having it resolved before the call."""
        ...

    def get(self, handle: Any) -> Any:
        """The value of a handle, or the values of a list of handles (in one round trip)."""
        ...

    def put(self, value: Any) -> Any: ...

    def lost_actor(self, exc: BaseException) -> str | None:
        """The id of the actor whose death ``exc`` reports ("" when unknown), or None when
        ``exc`` is not an actor's death."""
        ...


class InlineTransport:
    """Calls run at once in this process; handles are the values themselves."""

    def lost_actor(self, exc: BaseException) -> str | None:
        return None

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
        return getattr(actor, method)(*args)

    def by_reference(self, handle: Any) -> Any:
        return handle

    def get(self, handle: Any) -> Any:
        if isinstance(handle, list):
            return [self.get(h) for h in handle]
        return handle.handle[handle.at] if isinstance(handle, Part) else handle

    def put(self, value: Any) -> Any:
        return value


class RayTransport:
    """Calls are Ray actor tasks; handles are object references."""

    def __init__(self) -> None:
        import ray

        self._ray = ray

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
        return getattr(actor, method).options(num_returns=num_returns).remote(*args)

    def by_reference(self, handle: Any) -> Any:
        return ByReference(handle) if isinstance(handle, self._ray.ObjectRef) else handle

    def get(self, handle: Any) -> Any:
        if isinstance(handle, list):
            return fetched(handle, self._ray.get)
        if isinstance(handle, Part):
            return self._ray.get(handle.handle)[handle.at]
        return self._ray.get(handle)

    def put(self, value: Any) -> Any:
        return self._ray.put(value)

    def lost_actor(self, exc: BaseException) -> str | None:
        if isinstance(exc, self._ray.exceptions.RayActorError):
            return exc.actor_id or ""
        return None


def actor_id(actor: Any) -> str:
    """A Ray actor handle's id in hex ("" for in-process objects)."""
    ident = getattr(actor, "_actor_id", None)
    return ident.hex() if ident is not None else ""


class ByReference(NamedTuple):
    """An object reference passed to an actor inside a tuple, so that Ray does not fetch and
    unpickle it before the call; the executor resolves it through a one-entry cache
    (:meth:`fedclock.actors.ray_actors.RayClientExecutor._shared`). The runtime passes every
    task's payload this way: in sync mode all tasks of a round share one payload reference, so
    an executor unpickles the global model once per round instead of once per task (Ray's
    timeline of the MLP workload of ``benchmarks/e2e.py`` on a loaded machine: argument
    unpickling went from 3.5 to 2.4 ms per task, beside 6 ms of training)."""

    ref: Any


class Part(NamedTuple):
    """The handle of element ``at`` of the list that ``handle`` resolves to: one task's
    upload or report among the results of its group's call, which returns each kind in one
    object for the whole group (:func:`fedclock.actors.task_io.grouped`) instead of one object
    per task (on Ray, each object costs the driver, the raylet and the receiver a round of
    bookkeeping: ``benchmarks/RESULTS.md``, issue 34)."""

    handle: Any
    at: int


def fetched(handles: Sequence[Any], get_many: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """The values of ``handles`` (handles and :class:`Part` s), each distinct underlying
    handle fetched once, all in one ``get_many`` call."""
    distinct: dict[int, Any] = {}
    for h in handles:
        base = h.handle if isinstance(h, Part) else h
        distinct.setdefault(id(base), base)
    values = dict(zip(distinct, get_many(list(distinct.values()))))
    return [values[id(h.handle)][h.at] if isinstance(h, Part) else values[id(h)] for h in handles]


def gathered(handles: Sequence[Any]) -> tuple[list[Any], list[tuple[int, int]]]:
    """``handles`` (handles and :class:`Part` s) as call arguments: each distinct underlying
    handle once (so that Ray resolves it before the call), and for each handle where its value
    is: (argument, index in it; -1 for the argument itself). :func:`picked` undoes it."""
    args: list[Any] = []
    where: dict[int, int] = {}
    picks = []
    for h in handles:
        base, index = (h.handle, h.at) if isinstance(h, Part) else (h, -1)
        k = where.setdefault(id(base), len(args))
        if k == len(args):
            args.append(base)
        picks.append((k, index))
    return args, picks


def picked(picks: Sequence[tuple[int, int]], values: Sequence[Any]) -> list[Any]:
    """The values :func:`gathered` passed: for each (argument, index), ``values[argument]``
    itself (index -1) or its element ``index``."""
    return [values[k] if i < 0 else values[k][i] for k, i in picks]
