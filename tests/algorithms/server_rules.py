"""Shared by the unit tests of the server rules: a tiny model factory and seeded generators."""
from __future__ import annotations

import torch

from fedclock.algorithms.models import ModelFactory

TINY = ModelFactory("logistic", (1,), 2)
"""Logistic regression on one feature, two classes (4 parameters): only needed to build an
algorithm; the server rules see the flat vectors a test passes in."""


def gen(seed: int = 0) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)
