"""One user's samples as a client-file reader finds them (:mod:`fedclock.scenarios.data.client_files`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["UserData"]


@dataclass
class UserData:
    """One user's samples as a reader found them (train may be empty for a test-only user)."""

    user: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def num_samples(self) -> int:
        """Train plus test samples."""
        return len(self.y_train) + len(self.y_test)
