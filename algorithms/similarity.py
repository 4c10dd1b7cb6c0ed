"""Gradient-similarity helpers of the SPFL/PLGA family (pure tensor functions, and the
:class:`ModelStages` mixin that gives an algorithm its model's stages).

* :func:`stage_cosines`: per stage, the cosine similarity matrix of clients' updates
  ``S_s(i, j) = cos(g_i^s, g_j^s)`` (SPFL's raw similarity);
* :func:`row_softmax`: ``S~_s(i, j) = softmax_j S_s(i, j)`` (the SNGS);
* :func:`leap_weight`: PLGA's server-client weight ``S~ = e^S / (e^1 + e^S)``.

A zero vector has cosine 0 with everything (no direction, no similarity).
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from fedclock.algorithms.models import ModelFactory


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """``<a, b> / (|a| |b|)``, or 0 when either vector is zero."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(torch.dot(a.double().reshape(-1), b.double().reshape(-1))) / (na * nb)


def cosine_matrix(rows: torch.Tensor) -> torch.Tensor:
    """Pairwise cosines of the rows of an ``[n, d]`` tensor (zero rows give 0)."""
    x = rows.double()
    norms = x.norm(dim=1, keepdim=True)
    unit = torch.where(norms > 0, x / norms.clamp_min(1e-300), torch.zeros_like(x))
    return (unit @ unit.T).to(torch.float32)


def stage_cosines(updates: torch.Tensor, stages: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """For each stage (flat indices into the model vector), the ``[n, n]`` cosine matrix of
    the rows of ``updates`` (``[n, num_params]``) restricted to that stage."""
    return {name: cosine_matrix(updates[:, idx]) for name, idx in stages.items()}


def row_softmax(sim: torch.Tensor) -> torch.Tensor:
    """``softmax_j sim[i, j]`` for every row ``i``."""
    return torch.softmax(sim.double(), dim=1).to(torch.float32)


def leap_weight(similarity: float) -> float:
    """PLGA's normalized server-client similarity ``e^S / (e^1 + e^S)`` (in (0.12, 0.5])."""
    return math.exp(similarity) / (math.e + math.exp(similarity))


def model_stages(factory: "ModelFactory") -> dict[str, torch.Tensor]:
    """Flat indices of each of the model's named stages (empty ones left out); parameters in
    no named stage form one more stage, ``_rest``."""
    stages = {k: v for k, v in factory.stage_slices().items() if v.numel()}
    covered = torch.zeros(factory.num_params, dtype=torch.bool)
    for idx in stages.values():
        covered[idx] = True
    if not bool(covered.all()):
        stages["_rest"] = torch.nonzero(~covered).reshape(-1)
    return stages


class ModelStages:
    """Mixin of the SPFL/PLGA algorithms: ``stages``, the flat indices of each stage of the
    algorithm's model (:func:`model_stages`), computed once per instance."""

    model_factory: "ModelFactory"

    @cached_property
    def stages(self) -> dict[str, torch.Tensor]:
        """Flat indices of each stage (see :func:`model_stages`)."""
        return model_stages(self.model_factory)
