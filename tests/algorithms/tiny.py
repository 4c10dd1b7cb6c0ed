"""A 10-parameter body/head model and its forward pass written out by hand, for checking
update rules against independent formulas: input 1 -> body Linear(1, 2) + ReLU -> head
Linear(2, 2). Flat layout: W1 (2x1), b1 (2), W2 (2x2), b2 (2)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedclock.algorithms.base import ClientData
from fedclock.algorithms.models import ModelFactory

FACTORY = ModelFactory("mlp", (1,), 2, hidden=(2,))
BODY, HEAD = slice(0, 4), slice(4, 10)
X = torch.tensor([[0.5], [1.0], [1.5], [2.0]])
Y = torch.tensor([0, 1, 1, 0])
DATA = ClientData(0, X, Y, X, Y)
W = torch.tensor([0.3, 0.6, 0.1, 0.2, 0.5, -0.4, 0.2, 0.7, 0.05, -0.05])
"""Global weights: both hidden units active on X (positive pre-activations)."""
V = torch.tensor([0.4, 0.2, 0.3, 0.1, -0.2, 0.6, 0.3, -0.1, 0.0, 0.1])
"""A personal model, also with both units active on X."""


def features(flat: torch.Tensor, x: torch.Tensor = X) -> torch.Tensor:
    return torch.relu(x @ flat[0:2].view(2, 1).T + flat[2:4])


def logits(flat: torch.Tensor, x: torch.Tensor = X) -> torch.Tensor:
    return features(flat, x) @ flat[4:8].view(2, 2).T + flat[8:10]


def ce(flat: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits(flat), Y)


def grad(fn, flat: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Gradient of a scalar function of the flat vector."""
    w = flat.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(w), w)
    return g


def masked(g: torch.Tensor, part: slice) -> torch.Tensor:
    out = torch.zeros_like(g)
    out[part] = g[part]
    return out


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
