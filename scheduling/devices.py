"""Device and network profiles, and how long a task takes on them.

A task's duration is computed from the client's profile and the task itself, never from
wall time:

    download = bytes_down * 8 / (down_mbps * 1e6) + latency
    compute  = work / compute
    upload   = bytes_up * 8 / (up_mbps * 1e6) + latency
    duration = download + compute + upload

``work`` is a number the scenario layer gives the clock per task: GFLOP (counted from the
algorithm's real local work) with ``compute`` in GFLOP/s, or plain training samples with
``compute`` in samples per second (``population.compute_unit``). ``memory_gb`` is what a
device can give to training (inf: not limited); a client whose task needs more is
infeasible and never dispatched (:class:`~fedclock.scheduling.clock.Clock`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fedclock.scheduling.device_library import DEVICE_CLASSES
from fedclock.scheduling.distributions import DeviceDistribution, DeviceDistributions
from fedclock.scheduling.population import PopulationConfig, client_classes
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.traces import DEVICE_COLUMNS, read_device_trace


@dataclass(frozen=True)
class DeviceProfile:
    """One client's device: compute speed in GFLOP/s (or samples per second, see the module
    docstring), link speeds in megabits per second, one-way latency in seconds."""

    compute: float
    down_mbps: float
    up_mbps: float
    latency_s: float


class TaskTiming(NamedTuple):
    """Phases of one task in virtual seconds (an immutable named tuple: one is made per task,
    so it is cheap to build)."""

    download_s: float
    compute_s: float
    upload_s: float

    @property
    def comm_s(self) -> float:
        return self.download_s + self.upload_s

    @property
    def total_s(self) -> float:
        return self.download_s + self.compute_s + self.upload_s


def transfer_seconds(nbytes: int, mbps: float, latency_s: float) -> float:
    """Time to move ``nbytes`` over a link of ``mbps`` megabits per second."""
    return nbytes * 8.0 / (mbps * 1e6) + latency_s


def task_timing(profile: DeviceProfile, bytes_down: int, bytes_up: int, work: float) -> TaskTiming:
    """Virtual duration of a task on a device."""
    return TaskTiming(
        download_s=transfer_seconds(bytes_down, profile.down_mbps, profile.latency_s),
        compute_s=work / profile.compute,
        upload_s=transfer_seconds(bytes_up, profile.up_mbps, profile.latency_s),
    )


class Devices:
    """Profiles of the whole population, stored as arrays (cheap for many clients)."""

    def __init__(self, compute: np.ndarray, down_mbps: np.ndarray, up_mbps: np.ndarray, latency_s: np.ndarray,
                 memory_gb: np.ndarray | None = None, copy: bool = True) -> None:
        """``copy=False``: float64 arrays are kept as they are, not copied."""
        self.compute = compute.astype(np.float64, copy=copy)
        self.down_mbps = down_mbps.astype(np.float64, copy=copy)
        self.up_mbps = up_mbps.astype(np.float64, copy=copy)
        self.latency_s = latency_s.astype(np.float64, copy=copy)
        self._len = int(self.compute.shape[0])
        self.memory_gb = (np.full(self._len, np.inf) if memory_gb is None else memory_gb.astype(np.float64, copy=copy))
        """Memory each device can give to training, GB (inf: not limited)."""

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, client: int) -> DeviceProfile:
        return DeviceProfile(float(self.compute[client]), float(self.down_mbps[client]),
                             float(self.up_mbps[client]), float(self.latency_s[client]))

    def transfer_arrays(self, bytes_down: int, bytes_up: int) -> tuple[np.ndarray, np.ndarray]:
        """Every client's download and upload seconds for these sizes: the same float
        operations as :func:`transfer_seconds`, element-wise (so the same numbers)."""
        return (bytes_down * 8.0 / (self.down_mbps * 1e6) + self.latency_s,
                bytes_up * 8.0 / (self.up_mbps * 1e6) + self.latency_s)

    @classmethod
    def draw(cls, population: PopulationConfig, seed: int) -> "Devices":
        """Draw every client's profile from the population's distributions; then clients of
        a ``device_mix`` class redraw from their class; then the device trace's rows at
        ``time_s = 0`` apply; then the explicit per-client values. Each field (and class)
        has its own stream, so changing one distribution leaves the others' draws unchanged."""
        n = population.num_clients
        dists: DeviceDistributions = population.devices
        arrays = {}
        for key, field in enumerate(("compute", "down_mbps", "up_mbps", "latency_s")):
            arrays[field] = sample(getattr(dists, field), n, numpy_rng(seed, Stream.DEVICES, key))
        memory = (np.full(n, np.inf) if dists.memory_gb is None
                  else sample(dists.memory_gb, n, numpy_rng(seed, Stream.DEVICES, len(arrays))))
        if population.device_mix:
            classes = np.asarray(client_classes(population))
            for index, name in enumerate(population.device_mix):
                members = np.flatnonzero(classes == name)
                for key, field in enumerate(("compute", "down_mbps", "up_mbps", "latency_s")):
                    rng = numpy_rng(seed, Stream.DEVICES, key, index + 1)
                    arrays[field][members] = sample(getattr(DEVICE_CLASSES[name], field), len(members), rng)
                memory[members] = DEVICE_CLASSES[name].memory_gb
        if population.device_trace is not None:
            trace = read_device_trace(population.device_trace, n)
            for row in trace[trace.time_s == 0].itertuples(index=False):
                for field in DEVICE_COLUMNS:
                    value = getattr(row, field)
                    if not np.isnan(value):
                        arrays[field][row.client] = value
                if not np.isnan(row.memory_gb):
                    memory[row.client] = row.memory_gb
        for group in population.clients:
            for field in arrays:
                value = getattr(group, field)
                if value is not None:
                    arrays[field][group.ids] = value
            if group.memory_gb is not None:
                memory[group.ids] = group.memory_gb
        return cls(arrays["compute"], arrays["down_mbps"], arrays["up_mbps"], arrays["latency_s"], memory)


def sample(dist: float | DeviceDistribution, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` values from a scenario distribution (a number means a constant)."""
    if isinstance(dist, (int, float)):
        return np.full(n, float(dist))
    if not isinstance(dist, DeviceDistribution):
        raise TypeError(f"unknown distribution {dist!r}")
    return dist.sample(n, rng)
