"""The base a layer over an algorithm's class derives from (upload compression,
``algorithms/compressed.py``; privacy, ``algorithms/privacy.py``).

Such a layer is a mixin put in front of the algorithm's own class at run time, so its
``super()`` is that concrete algorithm. For the type checker it is an :class:`Algorithm` whose
client and server steps exist; at run time it is a plain ``object``, so the method resolution
order is the layer, then the algorithm's class.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ClientResult, ServerState, Tensors

if TYPE_CHECKING:
    class AlgorithmLayer(Algorithm[Any]):
        """What a layer's ``super()`` is: a concrete algorithm (module docstring)."""

        def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                          rng: torch.Generator) -> ClientResult:
            raise NotImplementedError

        def server_receive(self, state: ServerState, arrivals: list[Arrival],
                           rng: torch.Generator) -> tuple[ServerState, bool]:
            raise NotImplementedError
else:
    AlgorithmLayer = object
