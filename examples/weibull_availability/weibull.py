"""A user's own availability model: on/off periods with Weibull-distributed lengths.

Exponential on/off periods (the shipped ``markov`` model) forget how long a client has been
online; Weibull lengths with a shape below 1 give many short sessions and a few very long
ones, a shape above 1 sessions of a typical length. This file is the whole extension: the
settings class names its fields and builds one client's model, which answers the clock's
three questions (``available``, ``next_change``, ``state``). The scenario beside it names
the class as ``type: weibull:WeibullOnOff`` (``docs/own_availability.md``).
"""
from __future__ import annotations

import bisect
from typing import Literal

import numpy as np
from pydantic import PositiveFloat

from fedclock.scheduling.availability import Availability
from fedclock.scheduling.availability_config import AvailabilityModel, TraceFiles
from fedclock.scheduling.rng import Stream, numpy_rng


class WeibullSwitching:
    """One client's on/off process: period ``k`` lasts ``scale * W`` seconds with ``W`` a
    standard Weibull draw (numpy's ``Generator.weibull``) of the shape of its state; the
    switch times are drawn lazily, in order, from the client's own generator."""

    def __init__(self, up: tuple[float, float], down: tuple[float, float], start_up: bool,
                 rng: np.random.Generator) -> None:
        self.up, self.down, self.start_up, self._rng = up, down, start_up, rng
        self.switches: list[float] = []

    def _extend(self, until: float) -> None:
        t = self.switches[-1] if self.switches else 0.0
        while t <= until:
            shape, scale = self.up if self.start_up ^ (len(self.switches) % 2 == 1) else self.down
            t += scale * float(self._rng.weibull(shape))
            self.switches.append(t)

    def state(self, now: float) -> tuple[bool, float]:
        """(available now, the next time that may change)."""
        self._extend(now)
        flips = bisect.bisect_right(self.switches, now)
        return self.start_up ^ (flips % 2 == 1), self.switches[flips]

    def available(self, now: float, round_index: int) -> bool:
        return self.state(now)[0]

    def next_change(self, now: float) -> float:
        return self.state(now)[1]


class WeibullOnOff(AvailabilityModel):
    """``availability: {type: "weibull:WeibullOnOff", ...}``: Weibull on and off periods."""

    type: str = "weibull:WeibullOnOff"
    up_shape: PositiveFloat = 0.7
    up_scale_s: PositiveFloat = 60.0
    down_shape: PositiveFloat = 0.7
    down_scale_s: PositiveFloat = 60.0
    start: Literal["up", "down"] = "up"

    def build(self, seed: int, client: int, traces: TraceFiles) -> Availability:
        return WeibullSwitching((self.up_shape, self.up_scale_s), (self.down_shape, self.down_scale_s),
                                self.start == "up", numpy_rng(seed, Stream.AVAILABILITY, client))
