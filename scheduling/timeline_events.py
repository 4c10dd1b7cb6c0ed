"""Scripted timeline events and the client groups they act on (``timeline`` of a scenario file).

Each event carries what it does, :meth:`_Trigger.apply`, on the narrow :class:`EventTarget`
that :class:`fedclock.scheduling.timeline.Timeline` gives it; when and to whom is the
timeline's job (:mod:`fedclock.scheduling.timeline`).
"""
from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Protocol, Union

import numpy as np
from pydantic import Field, model_validator

from fedclock.scheduling.model_base import Fraction, NonNegativeFloat, PositiveFloat, StrictModel
from fedclock.scheduling.population import PopulationConfig, Tag



class ModeType(Protocol):
    """What an event's mode check reads of the run's mode (:mod:`fedclock.scheduling.modes`)."""

    @property
    def type(self) -> str: ...

class ClientGroup(StrictModel):
    """Which clients an event acts on: all clients, or those named by ``ids``, ``range``
    ([start, stop), half-open), ``tag`` or ``device_class`` (at most one of these);
    ``fraction`` then keeps a random subset of that many of them (rounded half up), drawn
    once per event from the scenario seed."""

    ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = None
    range: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]] | None = None
    tag: Tag | None = None
    device_class: str | None = None
    fraction: Fraction | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> "ClientGroup":
        given = [k for k in ("ids", "range", "tag", "device_class") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"{given[1]}: choose one of ids, range, tag, device_class (got {', '.join(given)})")
        if self.range is not None and self.range[1] <= self.range[0]:
            raise ValueError(f"range: [start, stop) needs stop > start (got {list(self.range)})")
        return self


class EventTarget(Protocol):
    """What an event may change: the devices, the offline mask and the mode's limits."""

    def scale_devices(self, field: str, ids: np.ndarray, factor: float) -> None:
        """Multiply the group's ``field`` (a device column) by ``factor``."""

    def set_devices(self, field: str, ids: np.ndarray, value: float) -> None:
        """Set the group's ``field`` to ``value``."""

    def set_offline(self, ids: np.ndarray, offline: bool) -> None:
        """Take the group offline (or back online)."""

    def cap_uplink(self, mbps: float | None) -> None:
        """Cap every download from now on at ``mbps`` (None: no cap)."""

    def set_mode_limits(self, *, concurrency: int | None = None, cohort_size: int | None = None,
                        cohort_fraction: float | None = None) -> None:
        """The async slot count or the sync cohort rule, for dispatches from now on."""


class _Trigger(StrictModel):
    """When an event fires: once at ``at_s``; every ``every_s`` seconds from ``start_s``
    (default: ``every_s``) up to ``until_s`` (inclusive, default: forever); or once when the
    server version first reaches ``at_version``."""

    gates: ClassVar[bool] = False
    """True for events that switch clients offline or online (the timeline then gates
    every client's availability)."""
    dormant_from_start: ClassVar[bool] = False
    """True when the event's group is offline from the start of the run until it fires."""

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        """Make the change on ``target`` for the group ``ids`` (None: the event names no
        group); the detail recorded in ``timeline.parquet``."""
        raise NotImplementedError(f"{type(self).__name__}.apply")

    def mode_problem(self, mode: "ModeType", num_clients: int) -> str | None:
        """Why the event does not fit the run's mode (relative to the event), or None."""
        return None

    at_s: NonNegativeFloat | None = None
    every_s: PositiveFloat | None = None
    start_s: NonNegativeFloat | None = None
    until_s: NonNegativeFloat | None = None
    at_version: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _one_trigger(self) -> "_Trigger":
        given = [k for k in ("at_s", "every_s", "at_version") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"at_s: give exactly one of at_s, every_s, at_version (got {', '.join(given) or 'none'})")
        if self.every_s is None and (self.start_s is not None or self.until_s is not None):
            raise ValueError("start_s: start_s and until_s go with every_s")
        return self


class _DeviceFields(_Trigger):
    clients: ClientGroup = Field(default_factory=ClientGroup)
    compute: PositiveFloat | None = None
    down_mbps: PositiveFloat | None = None
    up_mbps: PositiveFloat | None = None
    latency_s: NonNegativeFloat | None = None

    @model_validator(mode="after")
    def _some_field(self) -> "_DeviceFields":
        if all(getattr(self, f) is None for f in DEVICE_FIELDS):
            raise ValueError(f"compute: give at least one of {', '.join(DEVICE_FIELDS)}")
        return self

    def given(self) -> list[tuple[str, float]]:
        """The device fields this event sets, with their values, in ``DEVICE_FIELDS`` order."""
        return [(f, v) for f in DEVICE_FIELDS if (v := getattr(self, f)) is not None]


DEVICE_FIELDS = ("compute", "down_mbps", "up_mbps", "latency_s")


class ScaleEvent(_DeviceFields):
    """Multiply the group's device values (compute: 0.1 makes them ten times slower)."""

    type: Literal["scale"]

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        assert ids is not None  # device events always name a group
        for field, value in self.given():
            target.scale_devices(field, ids, value)
        return ", ".join(f"{field} x{value:g}" for field, value in self.given())


class SetEvent(_DeviceFields):
    """Set the group's device values."""

    type: Literal["set"]

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        assert ids is not None
        for field, value in self.given():
            target.set_devices(field, ids, value)
        return ", ".join(f"{field}={value:g}" for field, value in self.given())


class OfflineEvent(_Trigger):
    """The group stops taking new tasks (tasks in flight still finish)."""

    type: Literal["offline"]
    clients: ClientGroup = Field(default_factory=ClientGroup)
    gates: ClassVar[bool] = True

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        assert ids is not None  # offline, online and join events always name a group
        target.set_offline(ids, True)
        return ""


class OnlineEvent(_Trigger):
    """The group takes tasks again (its availability model still applies)."""

    type: Literal["online"]
    clients: ClientGroup = Field(default_factory=ClientGroup)
    gates: ClassVar[bool] = True

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        assert ids is not None
        target.set_offline(ids, False)
        return ""


class JoinEvent(_Trigger):
    """The group is dormant from the start of the run until this event (new clients arriving
    mid-run); their data is part of the federation from the start."""

    type: Literal["join"]
    clients: ClientGroup
    gates: ClassVar[bool] = True
    dormant_from_start: ClassVar[bool] = True

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        assert ids is not None
        target.set_offline(ids, False)
        return ""

    @model_validator(mode="after")
    def _once(self) -> "JoinEvent":
        if self.every_s is not None:
            raise ValueError("every_s: a join happens once; use at_s or at_version")
        return self


class ServerUplinkEvent(_Trigger):
    """Cap the server's uplink: every download from then on moves at most ``mbps`` (each
    download gets the cap; it is not shared among concurrent downloads); ``mbps: null``
    lifts the cap."""

    type: Literal["server_uplink"]
    mbps: PositiveFloat | None

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        target.cap_uplink(self.mbps)
        return "no cap" if self.mbps is None else f"mbps={self.mbps:g}"


class ConcurrencyEvent(_Trigger):
    """Async mode: change the number of tasks in flight."""

    type: Literal["concurrency"]
    value: Annotated[int, Field(ge=1)]

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        target.set_mode_limits(concurrency=self.value)
        return f"concurrency={self.value}"

    def mode_problem(self, mode: "ModeType", num_clients: int) -> str | None:
        if mode.type != "async":
            return "type: 'concurrency' needs mode.type async (use 'cohort' in sync mode)"
        if self.value > num_clients:
            return f"value: {self.value} exceeds population.num_clients ({num_clients})"
        return None


class CohortEvent(_Trigger):
    """Sync mode: change the cohort size (or fraction) of the rounds that open from then on."""

    type: Literal["cohort"]
    size: Annotated[int, Field(ge=1)] | None = None
    fraction: Fraction | None = None

    @model_validator(mode="after")
    def _one(self) -> "CohortEvent":
        if (self.size is None) == (self.fraction is None):
            raise ValueError("size: give exactly one of size, fraction")
        return self

    def apply(self, target: EventTarget, ids: np.ndarray | None) -> str:
        target.set_mode_limits(cohort_size=self.size, cohort_fraction=self.fraction)
        return f"size={self.size}" if self.size is not None else f"fraction={self.fraction:g}"

    def mode_problem(self, mode: "ModeType", num_clients: int) -> str | None:
        if mode.type != "sync":
            return "type: 'cohort' needs mode.type sync (use 'concurrency' in async mode)"
        if self.size is not None and self.size > num_clients:
            return f"size: {self.size} exceeds population.num_clients ({num_clients})"
        return None


TimelineEvent = Annotated[
    Union[ScaleEvent, SetEvent, OfflineEvent, OnlineEvent, JoinEvent, ServerUplinkEvent, ConcurrencyEvent,
          CohortEvent],
    Field(discriminator="type")]


def timeline_problem(timeline: list, mode: "ModeType", population: PopulationConfig) -> str | None:
    """The first event that does not fit the run's mode or population, as a one-line message."""
    n = population.num_clients
    tags = population.tag_names()
    for i, ev in enumerate(timeline):
        where = f"timeline[{i}]"
        problem = ev.mode_problem(mode, n)
        if problem is not None:
            return f"{where}.{problem}"
        group = getattr(ev, "clients", None)
        if group is None:
            continue
        if group.ids is not None and max(group.ids) >= n:
            return f"{where}.clients.ids: client {max(group.ids)} does not exist (allowed: 0..{n - 1})"
        if group.range is not None and group.range[1] > n:
            return f"{where}.clients.range: stop {group.range[1]} is past the last client (at most {n})"
        if group.tag is not None and group.tag not in tags:
            allowed = ", ".join(sorted(tags)) or "none defined; add tags: [...] under population.clients"
            return f"{where}.clients.tag: no client has tag {group.tag!r} (allowed: {allowed})"
        if group.device_class is not None and group.device_class not in population.device_mix:
            allowed = ", ".join(population.device_mix) or "none; set population.device_mix"
            return f"{where}.clients.device_class: {group.device_class!r} is not in population.device_mix " \
                   f"(allowed: {allowed})"
    return None
