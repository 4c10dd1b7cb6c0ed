"""Distributions a client's device values are drawn from (``population.devices``).

Each distribution carries its own draw, :meth:`DeviceDistribution.sample`; a user's own is a
subclass in a file beside the scenario, named by ``dist: module:Class`` (its other keys are
its fields; :mod:`fedclock.scheduling.variants`). Who draws which field from which stream is
:meth:`fedclock.scheduling.devices.Devices.draw`.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from fedclock.scheduling.model_base import NonNegativeFloat, OrderedRange, PositiveFloat, StrictModel
from fedclock.scheduling.variants import open_union


class DeviceDistribution(StrictModel):
    """A distribution of one device value; :meth:`sample` draws every client's value."""

    dist: str

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` values (float64), drawn from ``rng`` only (one stream per field, given)."""
        raise NotImplementedError(f"{type(self).__name__}.sample")


class ConstantDist(DeviceDistribution):
    dist: Literal["constant"]
    value: PositiveFloat

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value)


class UniformDist(OrderedRange, DeviceDistribution):
    dist: Literal["uniform"]
    low: PositiveFloat
    high: PositiveFloat

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)


class LogUniformDist(UniformDist):
    dist: Literal["loguniform"]  # type: ignore[assignment]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.exp(rng.uniform(np.log(self.low), np.log(self.high), n))


class LogNormalDist(DeviceDistribution):
    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.median * np.exp(self.sigma * rng.standard_normal(n))


class ChoiceDist(DeviceDistribution):
    dist: Literal["choice"]
    values: Annotated[list[PositiveFloat], Field(min_length=1)]
    weights: list[NonNegativeFloat] | None = None

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        p = None if self.weights is None else np.asarray(self.weights) / np.sum(self.weights)
        return rng.choice(np.asarray(self.values, dtype=np.float64), size=n, p=p)

    @model_validator(mode="after")
    def _weights_match(self) -> "ChoiceDist":
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(f"weights: has {len(self.weights)} entries, values has {len(self.values)}")
            if not math.fsum(self.weights) > 0:
                raise ValueError("weights: must not all be zero")
        return self


class UnresolvedDist(DeviceDistribution):
    """A user's distribution named in a scenario validated without imports (``fedclock
    validate --no-import``): its fields are kept as given, unchecked; it cannot draw."""

    model_config = {**DeviceDistribution.model_config, "extra": "allow"}

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise RuntimeError(f"distribution {self.dist!r} was validated without imports and cannot draw")


BUILTIN = (ConstantDist, UniformDist, LogUniformDist, LogNormalDist, ChoiceDist)
_OPEN = open_union(DeviceDistribution, "dist", "sample", "sample(n, rng)", BUILTIN, UnresolvedDist)
DistributionModel = Annotated[
    Annotated[Union[ConstantDist, UniformDist, LogUniformDist, LogNormalDist, ChoiceDist], Field(discriminator="dist")],
    _OPEN[0], _OPEN[1]]
"""A shipped distribution (by its ``dist``) or a user's :class:`DeviceDistribution` subclass."""

Distribution = Union[PositiveFloat, DistributionModel]


class DeviceDistributions(StrictModel):
    """How each client's device is drawn. ``compute`` is in GFLOP/s (the FLOPs of a task are
    counted from the algorithm's real local work, so a step with two passes takes twice as
    long), or in training samples per second with ``population.compute_unit: samples_per_s``;
    bandwidths in megabits per second; latency in seconds, paid once each way;
    ``memory_gb``: memory a device gives to training (unset: not limited)."""

    compute: Distribution = 200.0
    down_mbps: Distribution = 50.0
    up_mbps: Distribution = 10.0
    latency_s: Union[NonNegativeFloat, DistributionModel] = 0.05
    memory_gb: Distribution | None = None
