"""A test helper: clients becoming busy and idle between two decisions."""
from __future__ import annotations

import numpy as np

from fedclock.scheduling.idle import BusyClients


def churn(busy: BusyClients, rng: np.random.Generator, num_clients: int, k: int) -> None:
    """Flip ``k`` distinct clients drawn by ``rng``: a busy one becomes idle, an idle one busy."""
    for c in rng.choice(num_clients, size=k, replace=False).tolist():
        if c in busy:
            busy.pop(c)
        else:
            busy[c] = object()
