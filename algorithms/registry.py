"""The algorithms fedclock ships, by name. Registration is explicit: add a class here."""
from __future__ import annotations

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.fedasync import FedAsync
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.fedavg_async import FedAvgAsync
from fedclock.algorithms.fedbuff import FedBuff
from fedclock.algorithms.fedstyle import FedStyle

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (FedAvg, FedAvgAsync, FedAsync, FedBuff,
                                                                  FedStyle)}


class UnknownAlgorithm(KeyError):
    """An algorithm name that is not registered (a user's mistake: the message says what is allowed)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.message = f"algorithm.name: unknown algorithm {name!r} (allowed: {', '.join(algorithm_names())})"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def algorithm_names() -> list[str]:
    """Registered names, sorted."""
    return sorted(ALGORITHMS)


def get_algorithm(name: str) -> type[Algorithm]:
    """The class registered under ``name``; :class:`UnknownAlgorithm` otherwise."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UnknownAlgorithm(name) from None
