"""A user's own device distribution and partition, each one class beside the scenario.

``ParetoCompute`` draws heavy-tailed device speeds (many slow phones, a few fast ones), which
none of the shipped distributions (``constant``, ``uniform``, ``loguniform``, ``lognormal``,
``choice``) gives; ``SortedBlocks`` sorts the pool by label and gives every client one
consecutive block, so each client holds one or two classes and no randomness is involved.
The scenario beside this file names them as ``dist: "variants:ParetoCompute"`` and
``type: "variants:SortedBlocks"`` (``docs/own_variants.md``).
"""
from __future__ import annotations

import numpy as np
from pydantic import PositiveFloat

from fedclock.scenarios.data.partition_config import PartitionModel
from fedclock.scheduling.distributions import DeviceDistribution


class ParetoCompute(DeviceDistribution):
    """``low * (1 + P)`` with ``P`` numpy's Pareto (Lomax) draw of shape ``shape``: at least
    ``low``; the smaller the shape, the heavier the tail."""

    dist: str = "variants:ParetoCompute"
    shape: PositiveFloat
    low: PositiveFloat

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.low * (1.0 + rng.pareto(self.shape, n))


class SortedBlocks(PartitionModel):
    """Client ``c`` owns the ``c``-th of ``num_clients`` consecutive blocks of the label-sorted
    pool (sizes differ by at most one; ties keep the pool's order)."""

    type: str = "variants:SortedBlocks"

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        n = len(labels)
        owner = np.empty(n, dtype=np.int64)
        sizes = n // num_clients + (np.arange(num_clients) < n % num_clients)
        owner[np.argsort(labels, kind="stable")] = np.repeat(np.arange(num_clients), sizes)
        return owner
