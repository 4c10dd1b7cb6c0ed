"""The server's own device: how long its step (aggregation, server optimizer, QP solves)
takes in virtual time.

By default the server is infinitely fast: a new model version is published the instant its
arrivals are folded in (every fedclock run before this setting behaves so, and still does
without it). With ``server.compute_gflops`` the clock charges each server step its counted
FLOPs (:mod:`fedclock.algorithms.server_cost`, step by step from the state the server is in:
FedBuff's arrival that only fills the buffer costs the append, the one that fills it the
flush) over this speed: in sync rounds the round
closes when its results are in, and the new version (its evaluation, the next round's
dispatch) comes ``flops / speed`` seconds later; in async mode each arrival's (or window's)
step delays the version it makes and the dispatch of the freed slot the same way, and the
server handles arrivals one at a time (those arriving meanwhile wait for it). The protocols
that wait are :mod:`fedclock.scheduling.protocols`.
"""
from __future__ import annotations

from typing import Callable

from pydantic import Field

from fedclock.scheduling.model_base import PositiveFloat, StrictModel
from fedclock.scheduling.task import Task


class ServerDevice(StrictModel):
    """The ``server:`` section of a scenario (see the module's docstring)."""

    compute_gflops: PositiveFloat | None = Field(
        default=None, description="the server's compute speed in GFLOP/s: each server step (aggregation, server "
        "optimizer, QP solves) takes its counted FLOPs / this speed of virtual time before the new model is "
        "published; unset: the server step takes no time")

    def step_seconds(self, flops_of: Callable[[list[Task]], int]) -> Callable[[list[Task]], float] | None:
        """Seconds of the server step on these arrivals, given its FLOPs ``flops_of(tasks)``
        (which follows the server's state: the same number of arrivals may cost an append
        or a flush); None when no speed is set: the step takes no time."""
        speed = self.compute_gflops
        if speed is None:
            return None
        rate = speed * 1e9

        def seconds(arrivals: list[Task]) -> float:
            return flops_of(arrivals) / rate

        return seconds
