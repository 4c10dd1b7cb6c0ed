"""When clients can accept work.

Availability gates dispatch: an unavailable client is never sampled into a cohort or given
an async slot. Models answer ``available(client, now, round_index)``, where ``round_index``
is the sync round (or, in async mode, the server version), and ``next_change(client, now)``,
the next virtual time the answer may change by itself (infinity for round-driven models).
"""
from __future__ import annotations

import bisect
import math
from typing import Protocol

import numpy as np

from fedclock.scenarios.schema import AlwaysAvailable, AvailabilityConfig, MarkovOnOff, PeriodicMissing, PopulationConfig
from fedclock.scheduling.rng import Stream, numpy_rng


class Availability(Protocol):
    """One client's availability."""

    def available(self, now: float, round_index: int) -> bool: ...

    def next_change(self, now: float) -> float: ...


class Always:
    """Always available."""

    def available(self, now: float, round_index: int) -> bool:
        return True

    def next_change(self, now: float) -> float:
        return math.inf


class Periodic:
    """Available in one round, then missing ``period`` rounds (the SPFL/PLGA schedule):
    available in rounds r with (r + offset) mod (period + 1) == 0."""

    def __init__(self, period: int, offset: int = 0) -> None:
        self.period = period
        self.offset = offset

    def available(self, now: float, round_index: int) -> bool:
        return (round_index + self.offset) % (self.period + 1) == 0

    def next_change(self, now: float) -> float:
        return math.inf


class Markov:
    """Two-state on/off process: up periods ~ Exp(mean_up_s), down periods ~ Exp(mean_down_s).
    The switching times are drawn lazily from the client's own generator, so a query at any
    time is deterministic and costs O(log switches)."""

    def __init__(self, mean_up_s: float, mean_down_s: float, start: str, rng: np.random.Generator) -> None:
        self.mean_up_s = mean_up_s
        self.mean_down_s = mean_down_s
        self._rng = rng
        if start == "stationary":
            self._up_at_zero = bool(rng.random() < mean_up_s / (mean_up_s + mean_down_s))
        else:
            self._up_at_zero = start == "up"
        self._switches: list[float] = []
        self._extend(0.0)

    def _extend(self, until: float) -> None:
        t = self._switches[-1] if self._switches else 0.0
        while t <= until:
            up = self._up_at_zero ^ (len(self._switches) % 2 == 1)
            t += float(self._rng.exponential(self.mean_up_s if up else self.mean_down_s))
            self._switches.append(t)

    def available(self, now: float, round_index: int) -> bool:
        self._extend(now)
        flips = bisect.bisect_right(self._switches, now)
        return self._up_at_zero ^ (flips % 2 == 1)

    def next_change(self, now: float) -> float:
        self._extend(now)
        return self._switches[bisect.bisect_right(self._switches, now)]


def make_availability(cfg: AvailabilityConfig, seed: int, client: int) -> Availability:
    """The availability model of one client."""
    if isinstance(cfg, AlwaysAvailable):
        return Always()
    if isinstance(cfg, PeriodicMissing):
        return Periodic(cfg.period, cfg.offset)
    if isinstance(cfg, MarkovOnOff):
        return Markov(cfg.mean_up_s, cfg.mean_down_s, cfg.start, numpy_rng(seed, Stream.AVAILABILITY, client))
    raise TypeError(f"unknown availability {cfg!r}")


def population_availability(population: PopulationConfig, seed: int) -> list[Availability]:
    """Availability of every client: the population default, overridden per client."""
    per_client: dict[int, AvailabilityConfig] = {}
    for group in population.clients:
        if group.availability is not None:
            for cid in group.ids:
                per_client[cid] = group.availability
    shared_always = Always()
    out: list[Availability] = []
    for cid in range(population.num_clients):
        cfg = per_client.get(cid, population.availability)
        out.append(shared_always if isinstance(cfg, AlwaysAvailable) else make_availability(cfg, seed, cid))
    return out
