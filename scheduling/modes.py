"""The protocol's modes (sync rounds, async slots, windowed aggregation) and stop rules.

Each mode carries its behaviour (as the other config variants do): :meth:`Mode.protocol`
makes the clock's protocol (:mod:`fedclock.scheduling.protocols`), and the mode answers what
the rest of the run asks of it (its round deadline, whether late results are dropped, whether
the selector's history counts rounds), so nobody tests the mode's class.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Generator, Literal, TypeVar, Union

import simpy
from pydantic import Field, model_validator

from fedclock.scheduling.lateness import LateClients, late_map
from fedclock.scheduling.model_base import Fraction, PositiveFloat, StrictModel
from fedclock.scheduling.protocols import AsyncSlots, ProtocolClock, sync_rounds
from fedclock.scheduling.selection import overcommitted
from fedclock.scheduling.windowed import windowed_rounds


M = TypeVar("M", bound="Mode")


class Mode(StrictModel):
    """The base of the modes: the protocol a mode runs and what it tells the rest of the run."""

    def protocol(self, clock: ProtocolClock) -> Generator[simpy.Event, Any, None]:
        """The clock's protocol in this mode (a SimPy process body)."""
        raise NotImplementedError

    @property
    def round_deadline_s(self) -> float | None:
        """A sync round's deadline (None: no deadline, or not sync rounds)."""
        return None

    @property
    def drops_late(self) -> bool:
        """Results arriving after their round's deadline are dropped (sync, ``late_results: drop``)."""
        return False

    @property
    def counts_rounds(self) -> bool:
        """The selector's history keys a pick by round (sync rounds, windows), not by version."""
        return True

    def with_limits(self: M, concurrency: int | None = None, cohort_size: int | None = None,
                    cohort_fraction: float | None = None) -> M:
        """This mode with a new async concurrency, or a new sync cohort rule (size or fraction,
        the other cleared), as timeline events change them."""
        mode = self
        if concurrency is not None:
            mode = mode.model_copy(update={"concurrency": concurrency})
        if cohort_size is not None or cohort_fraction is not None:
            mode = mode.model_copy(update={"cohort_size": cohort_size, "cohort_fraction": cohort_fraction})
        return mode


class SyncMode(Mode):
    """Barrier rounds over a sampled cohort of available, idle clients."""

    type: Literal["sync"] = "sync"
    cohort_size: Annotated[int, Field(ge=1)] | None = None
    cohort_fraction: Fraction | None = None
    deadline_s: PositiveFloat | None = Field(default=None, description="round closes this long after it opens")
    late_results: Literal["drop", "include"] = Field(
        default="drop", description="a result arriving after its round closed: dropped, or averaged into the round "
        "that closes after it arrives")
    task_timeout_s: PositiveFloat | None = Field(
        default=None, description="the server gives up on a task not back this long after its dispatch")
    overcommit: Annotated[float, Field(ge=1, le=10)] | None = Field(
        default=None, description="dispatch ceil(overcommit x cohort) clients; the round closes at the cohort-th "
        "arrival (or the deadline) and cancels the rest (their training is not computed)")

    @model_validator(mode="after")
    def _one_cohort_rule(self) -> "SyncMode":
        if self.cohort_size is not None and self.cohort_fraction is not None:
            raise ValueError("cohort_size: set cohort_size or cohort_fraction, not both")
        if self.late_results == "include" and self.deadline_s is None:
            raise ValueError("late_results: 'include' needs deadline_s (without a deadline nothing is late)")
        if self.late_results == "include" and self.overcommit is not None:
            raise ValueError("late_results: 'include' does not apply with overcommit (every task not in by the close "
                             "is cancelled); remove one of them")
        return self

    def protocol(self, clock: ProtocolClock) -> Generator[simpy.Event, Any, None]:
        return sync_rounds(clock)

    @property
    def round_deadline_s(self) -> float | None:
        return self.deadline_s

    @property
    def drops_late(self) -> bool:
        return self.deadline_s is not None and self.late_results == "drop"

    def cohort_rule(self, num_clients: int) -> tuple[int, int | None]:
        """(clients dispatched for a round, the results it waits for: None without over-commitment)."""
        if self.cohort_size is not None:
            want = self.cohort_size
        elif self.cohort_fraction is not None:
            want = max(1, math.ceil(self.cohort_fraction * num_clients))
        else:
            want = num_clients
        if self.overcommit is None:
            return want, None
        return overcommitted(want, self.overcommit), want


class WindowAggregation(StrictModel):
    """Periodic aggregation in virtual time: the server folds in, every ``window_s`` seconds,
    everything that arrived during the window, then sends the new model to idle clients
    (see :func:`fedclock.scheduling.windowed.windowed_rounds`)."""

    window_s: PositiveFloat = Field(description="length of one aggregation window (one server round)")
    late_windows: list[LateClients] = Field(
        default_factory=list, description="scripted stragglers [{ids: [...], windows: k}]: those clients' results are "
        "applied k windows after the window they were dispatched in, whatever their compute (at least; see "
        "fedclock.scheduling.lateness); default: lateness emerges from devices")

    @model_validator(mode="after")
    def _each_client_once(self) -> "WindowAggregation":
        late_map(self.late_windows)
        return self


class AsyncMode(Mode):
    """A fixed number of tasks in flight; each completion frees a slot for an idle client.
    With ``aggregation``, arrivals are instead collected and applied once per time window."""

    type: Literal["async"]
    concurrency: Annotated[int, Field(ge=1)] = 4
    task_timeout_s: PositiveFloat | None = Field(
        default=None, description="the server gives up on a task not back this long after its dispatch (its slot "
        "is freed then)")
    aggregation: WindowAggregation | None = Field(
        default=None, description="windowed aggregation: {window_s: ...}; default applies each arrival at once")

    def protocol(self, clock: ProtocolClock) -> Generator[simpy.Event, Any, None]:
        if self.aggregation is not None:
            return windowed_rounds(clock, self.aggregation.window_s, late_map(self.aggregation.late_windows))
        return AsyncSlots(clock).run()

    @property
    def counts_rounds(self) -> bool:
        return self.aggregation is not None


ModeConfig = Annotated[Union[SyncMode, AsyncMode], Field(discriminator="type")]


class StopConfig(StrictModel):
    """The run stops at the first condition met."""

    rounds: Annotated[int, Field(ge=1)] | None = Field(default=None, description="sync rounds")
    versions: Annotated[int, Field(ge=1)] | None = Field(default=None, description="server versions")
    virtual_time_s: PositiveFloat | None = None
    target_accuracy: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _bounded(self) -> "StopConfig":
        if self.rounds is None and self.versions is None and self.virtual_time_s is None:
            raise ValueError("set at least one of rounds, versions, virtual_time_s")
        return self
