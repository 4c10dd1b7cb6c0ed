"""Sharpness-aware minimization (Foret et al. 2021) as a gradient hook for ``local_sgd``.

:func:`sam_grad_fn` returns a ``grad_fn`` for :func:`~fedclock.algorithms.training.local_sgd`:
it evaluates the objective at ``w`` (first forward/backward pass), takes the ascent step
``e = rho * g / ||g||`` (``g`` over every parameter that has a gradient, the global L2 norm),
evaluates the objective again at ``w + e`` (second pass), restores ``w`` exactly (a saved copy) and leaves the
gradient taken at ``w + e`` in ``.grad`` for the optimizer step. With ``||g|| = 0`` the
perturbation is zero. A SAM step's two passes are counted, not declared
(:mod:`fedclock.algorithms.task_cost`).
"""
from __future__ import annotations

from typing import Callable

import torch
from pydantic import Field
from torch import nn

from fedclock.algorithms.training import GradFn



def sam_grad_fn(rho: float) -> GradFn:
    """A ``grad_fn`` computing the SAM gradient with radius ``rho``."""
    if rho < 0:
        raise ValueError(f"sam: rho must be >= 0, got {rho}")

    def grad_fn(model: nn.Module, closure: Callable[[], torch.Tensor]) -> None:
        closure().backward()
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return
        with torch.no_grad():
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
            scale = rho / norm.clamp_min(1e-12)  # a zero gradient gives a zero perturbation
            saved = [p.detach().clone() for p in params]
            for p in params:
                p.add_(p.grad * scale)
        for p in params:
            p.grad = None
        try:
            closure().backward()
        finally:
            with torch.no_grad():
                for p, w in zip(params, saved):
                    p.copy_(w)

    return grad_fn


def rho_field(default: float = 0.5) -> float:
    """The pydantic field of the SAM radius (shared by the SAM-based algorithms)."""
    return Field(default=default, ge=0, description="SAM perturbation radius rho")
