"""One large object put into the object store once, while the same object keeps coming back.

The runtime puts a run's federation (its sample tensors and index arrays) into Ray's object
store for the executors, which map it without copying. A second run on the *same* federation
object (a study through the Python API that builds the data once, or the same run set up again
after its server actor was lost) would put a second copy beside the first, which the pooled
executors still hold until their next set-up: at a million clients that was 375 MiB more in
the object store at the second run's start (``benchmarks/RESULTS.md``, "Issue 34 ...: Ray
at a million clients"). :class:`HeldObject` keeps the handle of the last object put and hands
it out again for that object.

The object is recognised by identity, followed by a weak reference (so the handle never
keeps a dead object's memory for the next one, and an object built anew at the same address
is not taken for the old one); it is never compared by value.
"""
from __future__ import annotations

import weakref
from typing import Any

from fedclock.actors.transport import Transport


class HeldObject:
    """The handle of the last object :meth:`handle` put through ``transport``."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._held: tuple[weakref.ref[Any], Any] | None = None

    def handle(self, value: Any) -> Any:
        """The handle of ``value``: the one given out before if ``value`` is that same
        object, otherwise a fresh put (and the earlier handle is let go)."""
        if self._held is not None and self._held[0]() is value:
            return self._held[1]
        self._held = None  # the earlier object's handle first: its store entry can go before the put
        handle = self.transport.put(value)
        self._held = (weakref.ref(value), handle)
        return handle

    def release(self) -> None:
        """Let go of the handle held."""
        self._held = None
