"""Availability models of ``population.availability``: each config class carries its own
behaviour, :meth:`AvailabilityModel.build` (the runtime models are in
:mod:`fedclock.scheduling.availability`).

A user's own model is a subclass of :class:`AvailabilityModel` in a file beside the scenario,
named by ``type: module:Class`` (``docs/own_availability.md``, ``examples/weibull_availability``):
its other keys are its own fields (the union is opened by :func:`fedclock.scheduling.variants.open_union`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, Field, ValidationInfo

import numpy as np

from fedclock.scheduling.availability import (Always, Availability, Diurnal, DiurnalClients, Markov, Periodic,
                                              RepeatingTrace, TraceReplay)
from fedclock.scheduling.fedscale_traces import is_pickle
from fedclock.scheduling.model_base import Fraction, NonNegativeFloat, PositiveFloat, StrictModel
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.variants import open_union
from fedclock.scheduling.traces import (TraceError, check_trace_file, read_availability_trace,
                                        read_fedscale_availability)

FedScaleEntries = list[tuple[list[tuple[float, float]], float]]


class TraceFiles:
    """Availability trace files read once each, however many clients use them."""

    def __init__(self) -> None:
        self._tables: dict[Path, dict[int, list[tuple[float, float]]]] = {}
        self._fedscale: dict[Path, FedScaleEntries] = {}

    def table(self, path: Path) -> dict[int, list[tuple[float, float]]]:
        """A CSV/Parquet trace: each client's [start, end) intervals."""
        if path not in self._tables:
            self._tables[path] = read_availability_trace(path)
        return self._tables[path]

    def fedscale(self, path: Path) -> FedScaleEntries:
        """A FedScale ``client_behave_trace`` pickle: (intervals, period) entries."""
        if path not in self._fedscale:
            self._fedscale[path] = read_fedscale_availability(path)
        return self._fedscale[path]


class AvailabilityModel(StrictModel):
    """An availability model's settings; :meth:`build` makes one client's model."""

    type: str

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        """Client ``client``'s model; random draws come from
        ``numpy_rng(seed, Stream.AVAILABILITY, client)``, trace files through ``traces``."""
        raise NotImplementedError(f"{type(self).__name__}.build")

    def build_population(self, seed: int, num_clients: int) -> DiurnalClients | None:
        """Every client's model at once as flat arrays, for models that can (None: build each
        client's with :meth:`build`)."""
        return None

    def memory_kind(self) -> str:
        """How its clients are kept, for the memory estimate (:mod:`fedclock.scenarios.memory_estimate`):
        ``always`` (no per-client state), ``arrays`` or ``objects`` (one model object a client)."""
        return "objects"


class AlwaysAvailable(AvailabilityModel):
    type: Literal["always"] = "always"

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        return Always()

    def memory_kind(self) -> str:
        return "always"


class PeriodicMissing(AvailabilityModel):
    """SPFL/PLGA schedule: available for one server round, then missing ``period`` rounds."""

    type: Literal["periodic_missing"]
    period: Annotated[int, Field(ge=1)]
    offset: Annotated[int, Field(ge=0)] = 0

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        return Periodic(self.period, self.offset)

    def memory_kind(self) -> str:
        return "always"  # one shared-by-class model, indexed without per-client objects


class MarkovOnOff(AvailabilityModel):
    """Two-state on/off process in virtual time with exponential up and down durations."""

    type: Literal["markov"]
    mean_up_s: PositiveFloat
    mean_down_s: PositiveFloat
    start: Literal["up", "down", "stationary"] = "stationary"

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        return Markov(self.mean_up_s, self.mean_down_s, self.start, numpy_rng(seed, Stream.AVAILABILITY, client))


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


class DiurnalAvailability(AvailabilityModel):
    """Daily cycle in virtual time: online during ``on_fraction`` of every ``period_s``,
    from the client's phase on. Without ``phase_s`` each client draws its phase uniformly in
    [0, period_s) (clients in different time zones): from its own seeded stream
    (``phases: client``, one generator per client, about 60 µs each) or all at once from the
    population's stream (``phases: population``: other draws, one vectorized call; the clock then
    keeps the population's availability in flat arrays,
    :class:`~fedclock.scheduling.availability.DiurnalClients`, the way for millions of clients)."""

    type: Literal["diurnal"]
    period_s: PositiveFloat = 86400.0
    on_fraction: Fraction = 0.5
    phase_s: NonNegativeFloat | None = None
    phases: Literal["client", "population"] = Field(
        default="client", description="draw each client's phase from its own stream (client) or every phase "
        "at once from the population's (population: flat arrays, for millions of clients)")

    def memory_kind(self) -> str:
        return "arrays" if self.phases == "population" else "objects"

    def build_population(self, seed: int, num_clients: int) -> DiurnalClients | None:
        """Every client's model at once with ``phases: population`` (None otherwise): phases
        drawn by one call of ``numpy_rng(seed, Stream.AVAILABILITY)`` (or all ``phase_s``)."""
        if self.phases != "population":
            return None
        phases = np.full(num_clients, self.phase_s) if self.phase_s is not None else \
            numpy_rng(seed, Stream.AVAILABILITY).uniform(0.0, self.period_s, num_clients)
        return DiurnalClients(self.period_s, self.on_fraction, phases)

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        phase = self.phase_s if self.phase_s is not None else \
            float(numpy_rng(seed, Stream.AVAILABILITY, client).uniform(0.0, self.period_s))
        return Diurnal(self.period_s, self.on_fraction, phase)


class TraceAvailability(AvailabilityModel):
    """Replay of an availability trace (CSV or Parquet with columns client, start, end):
    a client is online during its [start, end) intervals. Clients the file does not list are
    offline (``missing: offline``) or always online (``missing: always``). A FedScale
    ``client_behave_trace`` pickle is read as published and repeats every ``finish_time``
    (:mod:`fedclock.scheduling.fedscale_traces`; every client takes an entry)."""

    type: Literal["trace"]
    path: TracePath
    missing: Literal["offline", "always"] = "offline"

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        if is_pickle(self.path):
            entries = traces.fedscale(self.path)
            return RepeatingTrace(*entries[client % len(entries)])
        table = traces.table(self.path)
        if client not in table:
            return Always() if self.missing == "always" else TraceReplay([])
        return TraceReplay(table[client])


class UnresolvedAvailability(AvailabilityModel):
    """A plugin model named in a scenario validated without imports (``fedclock validate
    --no-import``): its fields are kept as given, unchecked; it cannot be built."""

    model_config = {**AvailabilityModel.model_config, "extra": "allow"}

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        raise RuntimeError(f"availability type {self.type!r} was validated without imports and cannot be built")


BUILTIN = (AlwaysAvailable, PeriodicMissing, MarkovOnOff, DiurnalAvailability, TraceAvailability)

_OPEN = open_union(AvailabilityModel, "type", "build", "build(seed, client, traces)", BUILTIN, UnresolvedAvailability)

AvailabilityConfig = Annotated[
    Annotated[Union[AlwaysAvailable, PeriodicMissing, MarkovOnOff, DiurnalAvailability, TraceAvailability],
              Field(discriminator="type")],
    _OPEN[0], _OPEN[1]]
"""A shipped model (by its ``type``) or a user's :class:`AvailabilityModel` subclass."""
