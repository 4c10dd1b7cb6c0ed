"""Counted costs shared by the runs of one session: a context object, passed explicitly.

Counting a task's FLOPs and memory (:class:`~fedclock.algorithms.task_cost.TaskCost`) and a
server step's FLOPs (:class:`~fedclock.algorithms.server_cost.ServerCost`) is pure: the same
algorithm, parameters, model, links and input type give the same numbers. So the runs of one
file (and the seeds of a run) that share them count once, through the :class:`CountedCosts`
that :func:`fedclock.scenarios.api.execute` makes for its session and hands to each
:func:`~fedclock.scenarios.experiment.run_scenario`; a run given none counts on its own. No
cache outlives its session.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.server_cost import ArrivalInfo, ServerCost, ServerSteps, UploadKind
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scheduling.task import Task


def cost_key(algorithm: Algorithm, input_dtype: torch.dtype) -> tuple[object, ...]:
    """What a count depends on: the algorithm's class and parameters, the model, the
    population size, the links' codecs, the server optimizer and the input type."""
    f = algorithm.model_factory
    return (type(algorithm), algorithm.params.model_dump_json(), f.name, tuple(f.input_shape), f.num_classes,
            tuple(f.hidden), f.init_seed, id(f.builder), tuple(f.target_shape), algorithm.num_clients, input_dtype,
            repr(getattr(algorithm, "upload_codec", None)), repr(getattr(algorithm, "download_codec", None)),
            repr(algorithm.server_optimizer))


@dataclass
class CountedCosts:
    """The counted costs of one session's runs, by :func:`cost_key`."""

    tasks: dict[tuple[object, ...], TaskCost] = field(default_factory=dict)
    servers: dict[tuple[object, ...], ServerCost] = field(default_factory=dict)

    def task(self, algorithm: Algorithm, input_dtype: torch.dtype) -> TaskCost:
        """The counted FLOPs and memory of ``algorithm``'s client tasks."""
        key = cost_key(algorithm, input_dtype)
        if key not in self.tasks:
            self.tasks[key] = TaskCost(algorithm, input_dtype)
        return self.tasks[key]

    def server(self, algorithm: Algorithm, input_dtype: torch.dtype) -> ServerCost:
        """The counted FLOPs of ``algorithm``'s server steps, by (step kind, number of arrivals)."""
        key = cost_key(algorithm, input_dtype)
        if key not in self.servers:
            self.servers[key] = ServerCost(algorithm, input_dtype)
        return self.servers[key]


@dataclass
class FollowedServer:
    """One run's server followed on meta tensors (:class:`~fedclock.algorithms.server_cost.ServerSteps`,
    started when first asked, so a run whose server takes no time follows nothing): what each
    task uploads, told at its dispatch (:meth:`upload_kind`, the clock's ``upload_kind``), and
    the FLOPs of each server step in the order the clock charges them (:meth:`flops`)."""

    cost: ServerCost
    _followed: ServerSteps | None = None

    def _steps(self) -> ServerSteps:
        if self._followed is None:
            self._followed = self.cost.follow()
        return self._followed

    def upload_kind(self, client: int, server_steps: int) -> UploadKind:
        """What a task dispatched now to ``client`` uploads, after ``server_steps`` server steps."""
        return self._steps().upload_kind(client, server_steps)

    def flops(self, tasks: list[Task]) -> int:
        """FLOPs of the server step folding these arrivals into the followed state."""
        return self._steps().step([ArrivalInfo(client=t.client, num_samples=t.num_samples, version_dispatched=t.version,
                                               staleness=int(t.staleness or 0), steps=t.steps,
                                               upload=t.upload_kind) for t in tasks])
