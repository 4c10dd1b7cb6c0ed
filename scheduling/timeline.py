"""Scripted events in virtual time: the scenario's ``timeline`` (and a device trace's replay).

A :class:`Timeline` owns the copies of the population's devices and availability that the
clock uses, and changes them when an event fires:

* ``scale`` / ``set``: the group's compute, bandwidth or latency arrays change. A task's
  duration is fixed when it is dispatched, so **a change at T affects tasks dispatched at
  or after T; tasks already in flight keep the duration they were dispatched with.**
* ``offline`` / ``online``: a mask over the group; an offline client is never dispatched
  (its availability model still applies once it is back online). Tasks in flight finish.
* ``join``: the group is offline (dormant) from the start of the run until the event.
* ``server_uplink``: every download dispatched from then on moves at
  ``min(client down_mbps, cap)`` (a cap per download, not shared among concurrent ones).
* ``concurrency`` / ``cohort``: the async slot count or the sync cohort rule changes for
  dispatches (rounds) from then on; lowering concurrency lets tasks in flight finish.

**Ordering.** Time-triggered events fire at exactly their time, *before* any arrival,
round close or dispatch at that same instant (they are scheduled with SimPy's urgent
priority), in timeline order (device-trace rows first). Events at ``t = 0`` apply before
the first dispatch. ``at_version`` events fire inside the server update that reaches the
version, before the next dispatch. Groups (with their random ``fraction``) are drawn once
per event when the run starts, from (scenario seed, TIMELINE stream, event index).

Every firing is reported to ``record`` (results: ``timeline.parquet``).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Protocol, Sequence

import numpy as np
import simpy

from fedclock.scheduling.availability import Availability
from fedclock.scheduling.devices import DeviceProfile, Devices
from fedclock.scheduling.kernel import UrgentTimeout
from fedclock.scheduling.population import PopulationConfig, client_classes
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.timeline_events import ClientGroup, TimelineEvent
from fedclock.scheduling.traces import DEVICE_COLUMNS, read_device_trace

DEVICE_TRACE = -1
"""``event`` index recorded for device-trace rows."""
RETIRED = -2
"""``event`` index recorded for clients the clock retired (:meth:`Timeline.retire`)."""


@dataclass(frozen=True)
class TimelineRecord:
    """One firing of a timeline event."""

    time: float
    version: int
    round: int
    event: int
    type: str
    clients: tuple[int, ...]
    detail: str


class ClockControl(Protocol):
    """What the timeline reads of the clock and may change: the virtual time and counters it
    records, the mode's limits (through its events) and a refill after a change."""

    env: simpy.Environment
    version: int
    round: int

    def set_mode_limits(self, *, concurrency: int | None = None, cohort_size: int | None = None,
                        cohort_fraction: float | None = None) -> None:
        """The async slot count or the sync cohort rule, for dispatches from now on."""

    def refill(self) -> None:
        """Dispatch into the slots a change may have opened."""


class ScriptedDevices(Devices):
    """The devices the clock uses: arrays the timeline changes, and the server's uplink cap
    applied to every download."""

    def __init__(self, devices: Devices) -> None:
        # the population's arrays, shared until an event first changes one (:meth:`writable`):
        # a run without scale/set events or device-trace rows keeps one copy, not two (40 bytes a client)
        super().__init__(devices.compute, devices.down_mbps, devices.up_mbps, devices.latency_s, devices.memory_gb,
                         copy=False)
        self._shared = True
        self.uplink_mbps: float | None = None

    def writable(self, field: str) -> np.ndarray:
        """The array of ``field`` (``compute``, ``down_mbps``, ...) to change in place; the
        first call copies every array, so the population's own stay as drawn."""
        if self._shared:
            for name in (*DEVICE_COLUMNS, "memory_gb"):
                setattr(self, name, getattr(self, name).copy())
            self._shared = False
        array: np.ndarray = getattr(self, field)
        return array

    def __getitem__(self, client: int) -> DeviceProfile:
        profile = super().__getitem__(client)
        if self.uplink_mbps is not None and self.uplink_mbps < profile.down_mbps:
            profile = replace(profile, down_mbps=self.uplink_mbps)
        return profile


class ScriptedAvailability:
    """A client's availability model gated by the timeline's offline mask; its next change
    includes the timeline's next availability event."""

    def __init__(self, inner: Availability, timeline: "Timeline", client: int) -> None:
        self.inner = inner
        self.timeline = timeline
        self.client = client

    def available(self, now: float, round_index: int) -> bool:
        return not self.timeline.offline[self.client] and self.inner.available(now, round_index)

    def next_change(self, now: float) -> float:
        return min(self.inner.next_change(now), self.timeline.next_availability_change(now))


def client_tags(population: PopulationConfig) -> list[set[str]]:
    """Each client's tags (from ``population.clients[*].tags``)."""
    tags: list[set[str]] = [set() for _ in range(population.num_clients)]
    for group in population.clients:
        for cid in group.ids:
            tags[cid].update(group.tags)
    return tags


def resolve_group(group: ClientGroup, population: PopulationConfig, rng: np.random.Generator) -> np.ndarray:
    """The sorted client ids a group names (see :class:`ClientGroup`)."""
    n = population.num_clients
    if group.ids is not None:
        base = np.unique(np.asarray(group.ids, dtype=np.int64))
    elif group.range is not None:
        base = np.arange(group.range[0], group.range[1], dtype=np.int64)
    elif group.tag is not None:
        base = np.array([c for c, t in enumerate(client_tags(population)) if group.tag in t], dtype=np.int64)
    elif group.device_class is not None:
        base = np.flatnonzero(np.asarray(client_classes(population)) == group.device_class).astype(np.int64)
    else:
        base = np.arange(n, dtype=np.int64)
    if group.fraction is None:
        return base
    k = min(len(base), math.floor(group.fraction * len(base) + 0.5))
    return np.sort(rng.choice(base, size=k, replace=False)).astype(np.int64)


class Timeline:
    """Fires a scenario's timeline events against the clock's devices, availability and mode."""

    def __init__(self, events: Sequence[TimelineEvent], population: PopulationConfig, seed: int, devices: Devices,
                 availability: Sequence[Availability], record: Callable[[TimelineRecord], None] | None = None,
                 retires: bool = False) -> None:
        self.events = list(events)
        self.record = record
        self.devices = ScriptedDevices(devices)
        self.offline = np.zeros(population.num_clients, dtype=bool)
        self.retired_at = np.full(population.num_clients, np.nan)
        """When each client was retired for good (:meth:`retire`; NaN: never)."""
        gates = retires or any(ev.gates for ev in self.events)
        # without offline/online/join events the models are used as they are (no per-client wrapper)
        self.availability: Sequence[Any] = [ScriptedAvailability(a, self, c) for c, a in enumerate(availability)] \
            if gates else availability
        self.groups: list[np.ndarray | None] = []
        for index, ev in enumerate(self.events):
            group = getattr(ev, "clients", None)
            self.groups.append(None if group is None else
                               resolve_group(group, population, numpy_rng(seed, Stream.TIMELINE, index)))
            if ev.dormant_from_start:
                self.offline[self.groups[-1]] = True
        self._heap: list[tuple[float, int, int]] = []  # (time, event index, occurrence)
        self._by_version = sorted((ev.at_version, i) for i, ev in enumerate(self.events) if ev.at_version is not None)
        for i, ev in enumerate(self.events):
            first = self._occurrence(ev, 0)
            if first is not None:
                heapq.heappush(self._heap, (first, i, 0))
        self._trace_rows: dict[float, list[tuple[int, dict[str, float]]]] = {}
        if population.device_trace is not None:
            trace = read_device_trace(population.device_trace)
            for row in trace[trace.time_s > 0].itertuples(index=False):
                values = {f: float(getattr(row, f)) for f in DEVICE_COLUMNS if not math.isnan(getattr(row, f))}
                self._trace_rows.setdefault(float(row.time_s), []).append((int(row.client), values))
            for t in self._trace_rows:
                heapq.heappush(self._heap, (t, DEVICE_TRACE, 0))
        self.clock: ClockControl | None = None
        self._gate_watchers: list[Callable[[np.ndarray], None]] = []
        self._next_availability = self._compute_next_availability()

    # ------------------------------------------------------------------ schedule
    @staticmethod
    def _occurrence(ev: Any, k: int) -> float | None:
        """Time of the k-th firing of a time-triggered event (None: no such firing)."""
        if ev.at_s is not None:
            return ev.at_s if k == 0 else None
        if ev.every_s is None:
            return None
        start = ev.start_s if ev.start_s is not None else ev.every_s
        t = start + k * ev.every_s
        return t if ev.until_s is None or t <= ev.until_s else None

    def _compute_next_availability(self) -> float:
        times = [t for t, i, _ in self._heap
                 if i != DEVICE_TRACE and self.events[i].gates]
        return min(times, default=math.inf)

    def next_availability_change(self, now: float) -> float:
        """The next time an offline/online/join event fires (infinity if none is left)."""
        return self._next_availability if self._next_availability > now else math.inf

    def watch_gates(self, watcher: Callable[[np.ndarray], None]) -> None:
        """Call ``watcher(client ids)`` after every offline/online/join event switches them."""
        self._gate_watchers.append(watcher)

    # ------------------------------------------------------------------ clock hooks
    def start(self, clock: ClockControl) -> None:
        """Apply the events due at the clock's start time and schedule the rest."""
        self.clock = clock
        self._apply_due(clock.env.now)
        if self._heap:
            clock.env.process(self._process(clock))

    def version_reached(self, clock: ClockControl) -> None:
        """Fire the ``at_version`` events the clock's new server version has reached."""
        while self._by_version and self._by_version[0][0] <= clock.version:
            _, index = self._by_version.pop(0)
            self._fire(index)

    def _process(self, clock: ClockControl) -> Generator[simpy.Event, Any, None]:
        env = clock.env
        while self._heap:
            due = self._heap[0][0]
            if due > env.now:
                yield UrgentTimeout(env, due - env.now)
            self._apply_due(env.now)
            clock.refill()

    def _apply_due(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            t, index, k = heapq.heappop(self._heap)
            if index == DEVICE_TRACE:
                self._replay_trace(t)
                continue
            self._fire(index)
            nxt = self._occurrence(self.events[index], k + 1)
            if nxt is not None:
                heapq.heappush(self._heap, (nxt, index, k + 1))
        self._next_availability = self._compute_next_availability()

    # ------------------------------------------------------------------ actions
    def _replay_trace(self, t: float) -> None:
        rows = self._trace_rows.pop(t)
        for client, values in rows:
            for field, value in values.items():
                self.devices.writable(field)[client] = value
        clients = tuple(sorted({c for c, _ in rows}))
        self._report(DEVICE_TRACE, "device_trace", clients, f"{len(rows)} trace rows")

    def _fire(self, index: int) -> None:
        ev = self.events[index]
        ids = self.groups[index]
        detail = ev.apply(self, ids)
        self._report(index, ev.type, tuple(int(c) for c in ids) if ids is not None else (), detail)

    # ------------------------------------------------------------------ what events change (EventTarget)
    def scale_devices(self, field: str, ids: np.ndarray, factor: float) -> None:
        """Multiply the group's device column ``field`` by ``factor``."""
        self.devices.writable(field)[ids] *= factor

    def set_devices(self, field: str, ids: np.ndarray, value: float) -> None:
        """Set the group's device column ``field`` to ``value``."""
        self.devices.writable(field)[ids] = value

    def set_offline(self, ids: np.ndarray, offline: bool) -> None:
        """Switch the group offline (or back online: a retired client stays offline) and tell
        the watchers."""
        self.offline[ids] = np.logical_or(offline, ~np.isnan(self.retired_at[ids]))
        for watcher in self._gate_watchers:
            watcher(ids)

    def retire(self, clients: Sequence[int], reason: str) -> None:
        """Take ``clients`` offline for the rest of the run (no online or join event brings
        them back) and record it, ``type: retired`` with ``reason`` as the detail, at the
        clock's time. Only a timeline built with ``retires`` gates availability for it."""
        assert self.clock is not None, "clients retire only once the clock has started the timeline"
        ids = np.asarray(clients, dtype=np.int64)
        self.retired_at[ids] = float(self.clock.env.now)
        self.set_offline(ids, True)
        self._report(RETIRED, "retired", tuple(int(c) for c in ids), reason)

    def cap_uplink(self, mbps: float | None) -> None:
        """Every download from now on moves at most ``mbps`` (None: no cap)."""
        self.devices.uplink_mbps = mbps

    def set_mode_limits(self, *, concurrency: int | None = None, cohort_size: int | None = None,
                        cohort_fraction: float | None = None) -> None:
        """The clock's async slots or sync cohort rule, from now on."""
        assert self.clock is not None, "mode events fire only once the clock has started the timeline"
        self.clock.set_mode_limits(concurrency=concurrency, cohort_size=cohort_size, cohort_fraction=cohort_fraction)

    def _report(self, index: int, kind: str, clients: tuple[int, ...], detail: str) -> None:
        if self.record is not None:
            clock = self.clock
            assert clock is not None
            self.record(TimelineRecord(time=float(clock.env.now), version=int(clock.version), round=int(clock.round),
                                       event=index, type=kind, clients=clients, detail=detail))
