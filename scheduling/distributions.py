"""Distributions a client's device values are drawn from (``population.devices``).

The drawing itself is :mod:`fedclock.scheduling.devices`.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from fedclock.scheduling.model_base import NonNegativeFloat, OrderedRange, PositiveFloat, StrictModel


class ConstantDist(StrictModel):
    dist: Literal["constant"]
    value: PositiveFloat


class UniformDist(OrderedRange, StrictModel):
    dist: Literal["uniform"]
    low: PositiveFloat
    high: PositiveFloat


class LogUniformDist(UniformDist):
    dist: Literal["loguniform"]  # type: ignore[assignment]


class LogNormalDist(StrictModel):
    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat


class ChoiceDist(StrictModel):
    dist: Literal["choice"]
    values: Annotated[list[PositiveFloat], Field(min_length=1)]
    weights: list[NonNegativeFloat] | None = None

    @model_validator(mode="after")
    def _weights_match(self) -> "ChoiceDist":
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(f"weights: has {len(self.weights)} entries, values has {len(self.values)}")
            if not math.fsum(self.weights) > 0:
                raise ValueError("weights: must not all be zero")
        return self


Distribution = Union[
    PositiveFloat,
    Annotated[
        Union[ConstantDist, UniformDist, LogUniformDist, LogNormalDist, ChoiceDist],
        Field(discriminator="dist"),
    ],
]


class DeviceDistributions(StrictModel):
    """How each client's device is drawn. ``compute`` is in GFLOP/s (the FLOPs of a task are
    counted from the algorithm's real local work, so a step with two passes takes twice as
    long), or in training samples per second with ``population.compute_unit: samples_per_s``;
    bandwidths in megabits per second; latency in seconds, paid once each way;
    ``memory_gb``: memory a device gives to training (unset: not limited)."""

    compute: Distribution = 200.0
    down_mbps: Distribution = 50.0
    up_mbps: Distribution = 10.0
    latency_s: Union[NonNegativeFloat, Annotated[
        Union[ConstantDist, UniformDist, LogUniformDist, LogNormalDist, ChoiceDist],
        Field(discriminator="dist")]] = 0.05
    memory_gb: Distribution | None = None
