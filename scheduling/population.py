"""The population of clients: how many, their devices, availability, completeness and
connectivity, and explicit values for some of them (``population`` of a scenario file)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Callable, Literal, Sequence, cast

import numpy as np
from pydantic import Field, model_validator

from fedclock.scheduling.availability import Always, Availability
from fedclock.scheduling.availability_config import (AlwaysAvailable, AvailabilityConfig, AvailabilityModel,
                                                     TraceAvailability, TraceFiles, TracePath)
from fedclock.scheduling.completeness_connectivity import CompletenessConfig, ConnectivityConfig, FullWork, Reliable
from fedclock.scheduling.device_library import DEVICE_CLASSES, mix_counts
from fedclock.scheduling.distributions import DeviceDistributions
from fedclock.scheduling.fedscale_traces import is_pickle
from fedclock.scheduling.model_base import Fraction, NonNegativeFloat, PositiveFloat, StrictModel
from fedclock.scheduling.traces import recorded_compute_unit, trace_clients

Tag = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]


class ClientOverride(StrictModel):
    """Explicit values for some clients; unset fields keep the drawn values."""

    ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    compute: PositiveFloat | None = None
    down_mbps: PositiveFloat | None = None
    up_mbps: PositiveFloat | None = None
    latency_s: NonNegativeFloat | None = None
    memory_gb: PositiveFloat | None = None
    availability: AvailabilityConfig | None = None
    completeness: CompletenessConfig | None = None
    connectivity: ConnectivityConfig | None = None
    tags: list[Tag] = Field(default_factory=list, description="labels a timeline group can name (clients: {tag: ...})")


class PopulationConfig(StrictModel):
    num_clients: Annotated[int, Field(ge=1)] = Field(
        default=10, description="no bound but memory: a scenario whose estimated memory exceeds the machine's "
        "is refused (fedclock.scenarios.memory_estimate)")
    devices: DeviceDistributions = Field(default_factory=DeviceDistributions)
    device_mix: dict[str, Fraction] = Field(
        default_factory=dict, description="device classes from the library by fraction of clients, in client-id "
        "order (e.g. {low_end_phone: 0.5, edge_box: 0.5}); clients left over keep `devices`")
    device_trace: TracePath | None = Field(
        default=None, description="CSV/Parquet of per-client device values over time (client, time_s, compute, "
        "down_mbps, up_mbps, latency_s)")
    availability: AvailabilityConfig = Field(default_factory=AlwaysAvailable)
    clients: list[ClientOverride] = Field(default_factory=list)
    completeness: CompletenessConfig = Field(default_factory=FullWork,
                                             description="share of the local work a task does")
    connectivity: ConnectivityConfig = Field(default_factory=Reliable,
                                             description="whether a task's result may be lost")
    compute_unit: Literal["gflops", "samples_per_s"] = Field(
        default="gflops", description="unit of devices.compute: gflops (a task's work is its counted FLOPs) or "
        "samples_per_s (a task's work is its counted FLOPs over those of one plain training sample of the model)")

    @model_validator(mode="after")
    def _ids_in_range(self) -> "PopulationConfig":
        for i, group in enumerate(self.clients):
            for cid in group.ids:
                if cid >= self.num_clients:
                    raise ValueError(
                        f"clients[{i}].ids: client {cid} does not exist (allowed: 0..{self.num_clients - 1})")
        for name in self.device_mix:
            if name not in DEVICE_CLASSES:
                raise ValueError(f"device_mix: unknown device class {name!r} (allowed: {', '.join(DEVICE_CLASSES)})")
        if self.device_mix and self.compute_unit != "gflops":
            raise ValueError("device_mix: library device classes give compute in GFLOP/s (allowed with "
                             "compute_unit: gflops only)")
        if math.fsum(self.device_mix.values()) > 1 + 1e-9:
            raise ValueError(f"device_mix: fractions add up to {math.fsum(self.device_mix.values()):g} (at most 1)")
        traces = [("device_trace", self.device_trace)] + [("availability.path", self.availability)] + [
            (f"clients[{i}].availability.path", g.availability) for i, g in enumerate(self.clients)]
        for where, item in traces:
            path = item.path if isinstance(item, TraceAvailability) else item if isinstance(item, Path) else None
            if path is not None:
                bad = [c for c in trace_clients(path) if c >= self.num_clients]
                if bad:
                    raise ValueError(f"{where}: {path.name} names client {bad[0]}, which does not exist "
                                     f"(allowed: 0..{self.num_clients - 1})")
        trace = self.device_trace if isinstance(self.device_trace, Path) else None
        recorded = recorded_compute_unit(trace) if trace is not None else None
        if trace is not None and recorded is not None and recorded != self.compute_unit:
            raise ValueError(f"device_trace: {trace.name} records compute in {recorded} (allowed with "
                             f"compute_unit: {recorded} only; set population.compute_unit: {recorded})")
        fedscale = isinstance(self.device_trace, Path) and is_pickle(self.device_trace)
        if fedscale and self.compute_unit != "samples_per_s":
            raise ValueError("device_trace: a FedScale device capacity file gives compute in training samples per "
                             "second (allowed with compute_unit: samples_per_s only)")
        return self

    def tag_names(self) -> set[str]:
        """Every tag given to some client."""
        return {t for group in self.clients for t in group.tags}


def client_classes(population: PopulationConfig) -> list[str]:
    """Each client's device class: ``device_mix`` classes take consecutive blocks of client
    ids in the order they are listed; clients left over are ``custom`` (drawn from
    ``population.devices``)."""
    return client_class_rows(population)(0, population.num_clients)


def client_class_rows(population: PopulationConfig) -> Callable[[int, int], list[str]]:
    """The device classes of clients ``start`` to ``stop`` (:func:`client_classes`'s rule)
    a block at a time, without the list of every client's (8 bytes a client)."""
    names = list(population.device_mix)
    labels = names + ["custom"]
    ends = np.cumsum(mix_counts([population.device_mix[k] for k in names], population.num_clients), dtype=np.int64)

    def rows(start: int, stop: int) -> list[str]:
        return [labels[i] for i in np.searchsorted(ends, np.arange(start, stop), side="right")]

    return rows


def population_availability(population: PopulationConfig, seed: int) -> Sequence[Availability]:
    """Availability of every client: the population default, overridden per client (a later
    group wins), each built by its config (:meth:`AvailabilityModel.build`); a trace file
    shared by many clients is read once, and clients always available share one model. A
    diurnal default with ``phases: population`` and no override is one
    :class:`~fedclock.scheduling.availability.DiurnalClients` (flat arrays, no object per client)."""
    per_client: dict[int, AvailabilityModel] = {}
    for group in population.clients:
        if group.availability is not None:
            for cid in group.ids:
                per_client[cid] = group.availability
    default = population.availability
    whole = default.build_population(seed, population.num_clients)
    if whole is not None and not per_client:
        return cast(Sequence[Availability], whole)  # a sequence of models, kept as arrays
    shared_always = Always()
    traces = TraceFiles()
    out: list[Availability] = []
    for cid in range(population.num_clients):
        cfg = per_client.get(cid, default)
        out.append(shared_always if isinstance(cfg, AlwaysAvailable) else whole[cid] if cfg is default and whole
                   is not None else cfg.build(seed, cid, traces))
    return out
