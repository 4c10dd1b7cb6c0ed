"""What a checkpoint holds: the state a resumed run restores (written and read by
:mod:`fedclock.scenarios.checkpoints`, restored by :mod:`fedclock.actors.replay`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fedclock.algorithms.base import ServerState, Tensors


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable or belongs to another scenario (one line)."""


@dataclass
class RunningTask:
    """A task started and not yet applied or released at the checkpoint: enough to start it
    again (its index, which also names it in the replayed clock, and its inputs)."""

    index: int
    client: int
    payload: int
    """Index into :attr:`Checkpoint.payloads`."""
    state: Tensors | None


@dataclass
class Checkpoint:
    """Everything a resumed run restores at the moment of the ``len(applies)``-th apply."""

    version: int
    server: ServerState
    receives: int
    clients: dict[int, Tensors | None]
    payloads: list[Tensors]
    tasks: list[RunningTask]
    rows: dict[str, int]
    applies: list[int]
    evaluations: list[dict[str, float]] = field(default_factory=list)
    applied: list[dict[str, float]] = field(default_factory=list)
    """Training metrics of the tasks of the checkpointed ``apply`` (recorded after it)."""
    applied_steps: list[int | None] = field(default_factory=list)
    """The local steps each of those tasks reported."""
    losses: list[float | None] | None = None
    """With a selector that reads reported losses: the ``train_loss`` of every task applied
    so far, in the order applied (None: not logged)."""
    row_hashes: dict[str, str] | None = None
    """A digest of the rows of each results table that ``rows`` counts (written by the
    scenarios layer, which checks the tables on disk against it before resuming; None: not recorded)."""
    wall_time: float = 0.0
    """Wall-clock seconds the run had taken (a resumed run's ``wall_time`` column goes on from it)."""
