"""HeldObject: one put per object while the same object comes back (actors/held_object.py)."""
from __future__ import annotations

import gc
from typing import Any

from fedclock.actors.held_object import HeldObject
from fedclock.actors.transport import InlineTransport


class CountingTransport(InlineTransport):
    """Inline calls; each put gives a new handle and is counted."""

    def __init__(self) -> None:
        self.puts: list[Any] = []

    def put(self, value: Any) -> Any:
        self.puts.append(value)
        return ("handle", len(self.puts))


class Data:
    """A stand-in for a federation (weakly referable, compared by identity only)."""

    def __eq__(self, other: object) -> bool:  # equal by value to every other Data: must not matter
        return isinstance(other, Data)

    __hash__ = object.__hash__


def test_the_same_object_is_put_once() -> None:
    transport = CountingTransport()
    held = HeldObject(transport)
    data = Data()
    assert held.handle(data) == ("handle", 1)
    assert held.handle(data) == ("handle", 1)
    assert len(transport.puts) == 1


def test_another_object_equal_by_value_is_put_again_and_replaces_the_first() -> None:
    transport = CountingTransport()
    held = HeldObject(transport)
    first, second = Data(), Data()
    held.handle(first)
    assert held.handle(second) == ("handle", 2)
    assert held.handle(first) == ("handle", 3)  # only the last object's handle is kept
    assert len(transport.puts) == 3


def test_a_dead_object_is_not_kept_alive_nor_mistaken_for_a_new_one() -> None:
    transport = CountingTransport()
    held = HeldObject(transport)
    data = Data()
    held.handle(data)
    transport.puts.clear()  # the fake's own reference
    del data
    gc.collect()
    assert held._held is not None and held._held[0]() is None
    assert held.handle(Data()) == ("handle", 1)


def test_release_lets_go_of_the_handle() -> None:
    transport = CountingTransport()
    held = HeldObject(transport)
    data = Data()
    held.handle(data)
    held.release()
    assert held.handle(data) == ("handle", 2)
