"""The client step of algorithms whose clients only run the shared local SGD loop from the
received weights: ``client_update`` and its vectorized twin ``sgd_task`` in one place, the
upload left to each algorithm's ``sgd_result``."""
from __future__ import annotations

from typing import Any

import torch

from fedclock.algorithms.base import ClientData, ClientResult, Tensors
from fedclock.algorithms.training import train_from
from fedclock.algorithms.vectorized import SGDTask


class LocalSGDClient:
    """Mixin for an :class:`~fedclock.algorithms.base.Algorithm` whose client trains
    ``payload["weights"]`` with the shared loop (its own ``params``, no extra loss) and
    uploads what its ``sgd_result`` makes of the local model."""

    def client_update(self: Any, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        local, metrics = train_from(self, payload["weights"], data, rng)
        return self.sgd_result(payload, client_state, data, local, metrics)

    def sgd_task(self: Any, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """The client step's local SGD (for vectorized clients)."""
        return SGDTask(payload["weights"], data, self.params, rng, self.task_steps(data))
