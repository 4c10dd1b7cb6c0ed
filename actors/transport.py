"""How calls reach actors: at once in this process (inline), or as Ray actor tasks.

A *handle* is what a call returns and what a later call may take: the value itself inline,
an object reference on Ray. The session never tells the two apart; it asks the transport.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol


class Transport(Protocol):
    """How calls reach actors."""

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any: ...

    def by_reference(self, handle: Any) -> Any:
        """``handle`` as a call argument that the callee resolves itself (see
        :class:`ByReference`), instead of having it resolved before the call."""
        ...

    def get(self, handle: Any) -> Any: ...

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
        return handle

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
