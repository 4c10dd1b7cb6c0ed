"""One user's samples as a client-file reader finds them, and the contract every reader keeps
(:mod:`fedclock.scenarios.data.client_files`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

if TYPE_CHECKING:
    from fedclock.scenarios.schema import GeneratedFiles

__all__ = ["Choose", "ClientFileReader", "UserData"]


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


Choose = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""Given every user's train and test sample counts (in the reader's order), the sorted
indices of the users to read."""


class ClientFileReader:
    """One dataset's client files in one published format. A format is a subclass holding how
    its files are laid out (:class:`~fedclock.scenarios.data.leaf.LeafReader`,
    :class:`~fedclock.scenarios.data.tff_h5.TffH5Reader`,
    :class:`~fedclock.scenarios.data.fedscale_csv.FedScaleCsvReader`), and each dataset read in
    it a subclass of that holding how its samples read; the registry's spec names the class for
    every format a dataset is read from (``DatasetSpec.readers``), so no reader tests a
    dataset's name."""

    reads_users_first: ClassVar[bool] = False
    """It can count every user's samples before reading any, and then read only the users
    chosen (:meth:`users` with ``choose``)."""

    def users(self, root: Path, choose: Choose | None = None,
              max_train: int | None = None) -> tuple[list[UserData], int]:
        """The users of the files under ``root`` (train-file users in file order, then users
        found only in the test files) and the number of classes. ``choose`` and ``max_train``
        (a user's first that many training samples) are given only where
        :attr:`reads_users_first`. Raises ``DatasetError`` (one line naming the file)."""
        raise NotImplementedError

    def write(self, root: Path, generate: GeneratedFiles, seed: int) -> None:
        """Write a small data set of this kind into ``root`` from ``seed`` (``dataset.generate``);
        only readers of generated datasets (``DatasetSpec.generated``) do."""
        raise NotImplementedError(f"{type(self).__name__} writes no generated files")

    @classmethod
    def writes(cls) -> bool:
        """Whether it writes generated files (:meth:`write`)."""
        return cls.write is not ClientFileReader.write
