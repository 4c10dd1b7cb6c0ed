"""Flat-vector helpers: views of a flat parameter vector shaped like a model's parameters."""
from __future__ import annotations

import torch
from torch import nn


def param_views(flat: torch.Tensor, model: nn.Module) -> list[torch.Tensor]:
    """``flat`` (in the model's parameter order) split into tensors shaped like each
    parameter, on the parameter's device and dtype (detached)."""
    pieces: list[torch.Tensor] = []
    offset = 0
    for p in model.parameters():
        k = p.numel()
        pieces.append(flat[offset:offset + k].detach().to(device=p.device, dtype=p.dtype).view_as(p))
        offset += k
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} values, the model {offset}")
    return pieces


def add_to_grads(model: nn.Module, pieces: list[torch.Tensor], scale: float = 1.0, keep: float = 1.0) -> None:
    """``p.grad <- keep * p.grad + scale * piece`` for every parameter that has a gradient."""
    with torch.no_grad():
        for p, piece in zip(model.parameters(), pieces):
            if p.grad is None:
                continue
            if keep != 1.0:
                p.grad.mul_(keep)
            p.grad.add_(piece, alpha=scale)
