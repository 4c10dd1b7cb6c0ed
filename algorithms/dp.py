"""The Gaussian mechanism for local differential privacy of client uploads.

A client clips the vector it sends to L2 norm ``C`` and adds i.i.d. Gaussian noise of
standard deviation ``sigma * C`` per coordinate, with the classical calibration of Dwork
and Roth (2014, Theorem A.1)::

    sigma = sqrt(2 ln(1.25 / delta)) / epsilon

so that each upload is (epsilon, delta)-differentially private with respect to the client's
data (the clipping bounds the L2 sensitivity by C; one release per round, as in the FedReCo
paper's privacy table). Used by FedAvg-DP (noise on the model difference) and FedReCo-DP
(noise on the penalty gradient).
"""
from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field


class DPParams(BaseModel):
    """Privacy budget and clipping norm of the Gaussian mechanism (mixed into an algorithm's
    Params)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(default=0.2, gt=0, description="privacy budget epsilon per upload")
    delta: float = Field(default=0.1, gt=0, lt=1, description="privacy parameter delta per upload")
    dp_clip: float = Field(default=1.0, gt=0, description="L2 norm C the upload is clipped to before noising")


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """Noise multiplier ``sqrt(2 ln(1.25/delta)) / epsilon`` of the Gaussian mechanism."""
    if epsilon <= 0 or not 0 < delta < 1:
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1 (got epsilon={epsilon}, delta={delta})")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def clip_to_norm(vector: torch.Tensor, clip: float) -> torch.Tensor:
    """``vector * min(1, clip / ||vector||)`` (a copy; the zero vector stays zero)."""
    norm = float(vector.norm())
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return vector * scale


def privatize(vector: torch.Tensor, clip: float, epsilon: float, delta: float,
              rng: torch.Generator) -> torch.Tensor:
    """Clip ``vector`` to norm ``clip``, then add ``N(0, (sigma * clip)^2 I)`` drawn from
    ``rng`` (a CPU generator; the result is a float32 CPU tensor)."""
    clipped = clip_to_norm(vector.detach().to("cpu", torch.float32), clip)
    noise = torch.randn(clipped.shape, generator=rng, dtype=torch.float32)
    return clipped + gaussian_sigma(epsilon, delta) * clip * noise
