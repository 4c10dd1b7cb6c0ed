"""Scripted lateness for windowed aggregation: a client's results reach the server a fixed
number of windows late, whatever its compute.

Stragglers normally *emerge* from slow devices and links (:func:`fedclock.scheduling.windowed.windowed_rounds`):
a result is applied at the close of the window in which it arrives. A reproduction that must
make the same clients late by the same number of rounds for every method (the SPFL/PLGA
paper's Sec. 4.2: stragglers miss 1, 2, ..., |S| server rounds periodically, fixed for every
method) scripts it instead, with ``mode.aggregation.late_windows: [{ids: [c, ...], windows: k}]``:

* a task of client ``c`` dispatched at the close that opens window ``r`` is applied no earlier
  than the close of window ``r + k`` (``k`` of the group listing ``c``, 0 for unlisted clients), so with
  a new server version every window its staleness is exactly ``k``;
* the client stays busy until then (it "participates in one server round and misses k"), and
  is sent the new model at the close that applies its result;
* a result whose own transfer and compute take longer still waits for its arrival: the
  lateness is ``max(k, emergent lateness)``, so size the window for the slowest task to be
  exactly ``k`` windows late.
"""
from __future__ import annotations

from typing import Annotated, Mapping, Protocol, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt


class Task(Protocol):
    """What lateness reads of a :class:`~fedclock.scheduling.clock.Task` (a protocol, so this
    module does not import the clock that imports it)."""

    client: int
    round: int


T = TypeVar("T", bound=Task)


class LateClients(BaseModel):
    """One group of ``late_windows``: these clients' results are held back ``windows`` windows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ids: Annotated[list[NonNegativeInt], Field(min_length=1)]
    windows: NonNegativeInt = Field(description="windows the results of these clients are applied late")


def late_map(groups: Sequence[LateClients]) -> dict[int, int]:
    """``{client: windows}`` of the groups; a one-line error for a client listed twice."""
    out: dict[int, int] = {}
    for i, group in enumerate(groups):
        for client in group.ids:
            if client in out:
                raise ValueError(f"mode.aggregation.late_windows[{i}].ids: client {client} is listed twice")
            out[client] = group.windows
    return out


def due_window(task: Task, late: Mapping[int, int]) -> int:
    """The window whose close may apply ``task``: the one it was dispatched in, plus its
    client's scripted lateness."""
    return task.round + late.get(task.client, 0)


def split_due(inbox: list[T], closing: int, late: Mapping[int, int]) -> tuple[list[T], list[T]]:
    """Tasks of ``inbox`` the close of window ``closing`` applies, and those it holds back."""
    due = [t for t in inbox if due_window(t, late) <= closing]
    held = [t for t in inbox if due_window(t, late) > closing]
    return due, held


def check_clients(late: Mapping[int, int], num_clients: int) -> None:
    """A one-line error for a client id that does not exist."""
    for client in late:
        if client >= num_clients:
            raise ValueError(f"mode.aggregation.late_windows: client {client} does not exist "
                             f"(allowed: 0..{num_clients - 1})")
