"""The protocol's modes (sync rounds, async slots, windowed aggregation) and stop rules.

The protocols themselves are :mod:`fedclock.scheduling.clock`.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from fedclock.scheduling.lateness import LateClients, late_map
from fedclock.scheduling.model_base import Fraction, PositiveFloat, StrictModel


class SyncMode(StrictModel):
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


class WindowAggregation(StrictModel):
    """Periodic aggregation in virtual time: the server folds in, every ``window_s`` seconds,
    everything that arrived during the window, then sends the new model to idle clients
    (see :meth:`fedclock.scheduling.clock.Clock.windowed_rounds`)."""

    window_s: PositiveFloat = Field(description="length of one aggregation window (one server round)")
    late_windows: list[LateClients] = Field(
        default_factory=list, description="scripted stragglers [{ids: [...], windows: k}]: those clients' results are "
        "applied k windows after the window they were dispatched in, whatever their compute (at least; see "
        "fedclock.scheduling.lateness); default: lateness emerges from devices")

    @model_validator(mode="after")
    def _each_client_once(self) -> "WindowAggregation":
        late_map(self.late_windows)
        return self


class AsyncMode(StrictModel):
    """A fixed number of tasks in flight; each completion frees a slot for an idle client.
    With ``aggregation``, arrivals are instead collected and applied once per time window."""

    type: Literal["async"]
    concurrency: Annotated[int, Field(ge=1)] = 4
    task_timeout_s: PositiveFloat | None = Field(
        default=None, description="the server gives up on a task not back this long after its dispatch (its slot "
        "is freed then)")
    aggregation: WindowAggregation | None = Field(
        default=None, description="windowed aggregation: {window_s: ...}; default applies each arrival at once")


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
