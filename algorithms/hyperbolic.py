"""The Lorentz (hyperboloid) model used by FedMRUR's manifold regularizer.

Points of the hyperboloid of parameter ``beta`` satisfy ``<x, x>_L = -beta`` with the
Lorentzian inner product ``<x, y>_L = -x_0 y_0 + sum_{i>=1} x_i y_i``. The exponential map
at the origin ``(sqrt(beta), 0, ..., 0)`` sends a Euclidean feature ``z`` to
``(sqrt(beta) cosh(|z|/sqrt(beta)), sqrt(beta) sinh(|z|/sqrt(beta)) z/|z|)`` and the squared
Lorentzian distance is ``d_L^2(x, y) = -2 beta - 2 <x, y>_L``.

For two mapped features, with ``a = |z_p|/sqrt(beta)``, ``b = |z_g|/sqrt(beta)`` and the
angle ``theta`` between them, ``-<x, y>_L = beta (cosh a cosh b - sinh a sinh b cos theta)``,
so ``d_L^2 = 2 beta (cosh(a - b) - 1 + sinh a sinh b (1 - cos theta))``: a sum of
non-negative terms. :func:`feature_sq_distance` uses that form, which avoids the
catastrophic cancellation of ``-2 beta - 2 <x, y>_L`` when the features are long (both
``cosh`` terms are then huge and nearly equal).
"""
from __future__ import annotations

import math

import torch

_TINY = 1e-12
_MAX_RADIUS = 40.0
"""Hyperbolic radii ``|z|/sqrt(beta)`` are clamped here in :func:`feature_sq_distance`, so
``sinh`` products stay inside float32 range (such distances saturate the regularizer anyway)."""


def lorentz_inner(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``<x, y>_L`` over the last dimension."""
    prod = x * y
    return prod[..., 1:].sum(dim=-1) - prod[..., 0]


def lorentz_sq_distance(x: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """``-2 beta - 2 <x, y>_L`` for points on the hyperboloid of parameter ``beta``."""
    return -2.0 * beta - 2.0 * lorentz_inner(x, y)


def exp_map_origin(z: torch.Tensor, beta: float) -> torch.Tensor:
    """Map Euclidean vectors ``z`` (last dimension d) onto the hyperboloid (last dimension
    d + 1) by the exponential map at the origin; ``z = 0`` goes to the origin."""
    k = math.sqrt(beta)
    norm = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    r = norm / k
    direction = z / norm.clamp_min(_TINY)
    return torch.cat([k * torch.cosh(r), k * torch.sinh(r) * direction], dim=-1)


def feature_sq_distance(zp: torch.Tensor, zg: torch.Tensor, beta: float) -> torch.Tensor:
    """``d_L^2(exp_0(zp), exp_0(zg))`` per row, computed in the cancellation-free form
    (see the module docstring); differentiable in ``zp`` and ``zg``."""
    k = math.sqrt(beta)
    np_, ng = torch.linalg.vector_norm(zp, dim=-1), torch.linalg.vector_norm(zg, dim=-1)
    a, b = (np_ / k).clamp_max(_MAX_RADIUS), (ng / k).clamp_max(_MAX_RADIUS)
    cos = (zp * zg).sum(dim=-1) / (np_ * ng).clamp_min(_TINY)
    one_minus_cos = (1.0 - cos).clamp_min(0.0)
    # cosh(u) - 1 = 2 sinh(u/2)^2 keeps small differences accurate
    return 2.0 * beta * (2.0 * torch.sinh((a - b) / 2) ** 2 + torch.sinh(a) * torch.sinh(b) * one_minus_cos)


def manifold_regularizer(zp: torch.Tensor, zg: torch.Tensor, beta: float, sigma: float,
                         max_exponent: float = 5.0) -> torch.Tensor:
    """FedMRUR's ``R = exp(d_L^2 / sigma)`` between local and global features of the same
    batch, averaged over the batch (rows; features beyond the first dimension are
    flattened). The exponent is clamped at ``max_exponent`` so very distant features give
    a large finite value (with no gradient) instead of infinity."""
    zp = zp.reshape(zp.shape[0], -1)
    zg = zg.reshape(zg.shape[0], -1)
    exponent = (feature_sq_distance(zp, zg, beta) / sigma).clamp_max(max_exponent)
    return torch.exp(exponent).mean()
