"""Availability models of ``population.availability`` (the behaviour is
:mod:`fedclock.scheduling.availability`)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, Field, ValidationInfo

from fedclock.scheduling.model_base import Fraction, NonNegativeFloat, PositiveFloat, StrictModel
from fedclock.scheduling.traces import TraceError, check_trace_file


class AlwaysAvailable(StrictModel):
    type: Literal["always"] = "always"


class PeriodicMissing(StrictModel):
    """SPFL/PLGA schedule: available for one server round, then missing ``period`` rounds."""

    type: Literal["periodic_missing"]
    period: Annotated[int, Field(ge=1)]
    offset: Annotated[int, Field(ge=0)] = 0


class MarkovOnOff(StrictModel):
    """Two-state on/off process in virtual time with exponential up and down durations."""

    type: Literal["markov"]
    mean_up_s: PositiveFloat
    mean_down_s: PositiveFloat
    start: Literal["up", "down", "stationary"] = "stationary"


def _trace_path(value: Path, info: ValidationInfo) -> Path:
    """A trace file: a relative path is relative to the scenario file's folder (the loader
    passes it as ``base_dir`` in the validation context), else to the working directory.
    The file must exist and have the columns its ``kind`` needs."""
    base = (info.context or {}).get("base_dir")
    if not value.is_absolute() and base is not None:
        value = Path(base) / value
    try:
        check_trace_file(value, "devices" if info.field_name == "device_trace" else "availability")
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    return value


TracePath = Annotated[Path, AfterValidator(_trace_path)]


class DiurnalAvailability(StrictModel):
    """Daily cycle in virtual time: online during ``on_fraction`` of every ``period_s``,
    from the client's phase on. Without ``phase_s`` each client draws its phase uniformly in
    [0, period_s) (clients in different time zones)."""

    type: Literal["diurnal"]
    period_s: PositiveFloat = 86400.0
    on_fraction: Fraction = 0.5
    phase_s: NonNegativeFloat | None = None


class TraceAvailability(StrictModel):
    """Replay of an availability trace (CSV or Parquet with columns client, start, end):
    a client is online during its [start, end) intervals. Clients the file does not list are
    offline (``missing: offline``) or always online (``missing: always``). A FedScale
    ``client_behave_trace`` pickle is read as published and repeats every ``finish_time``
    (:mod:`fedclock.scheduling.fedscale_traces`; every client takes an entry)."""

    type: Literal["trace"]
    path: TracePath
    missing: Literal["offline", "always"] = "offline"


AvailabilityConfig = Annotated[
    Union[AlwaysAvailable, PeriodicMissing, MarkovOnOff, DiurnalAvailability, TraceAvailability],
    Field(discriminator="type")]
