"""What a task dispatched now costs: its local steps and work, its transfer and compute times,
what it uploads, and the server step's virtual time (a room of the clock,
:class:`~fedclock.scheduling.clock.Clock`).

A task's duration comes from the client's device and the task's declared bytes and work
(:mod:`fedclock.scheduling.devices`), never from measured wall time. With incomplete work
(:mod:`fedclock.scheduling.heterogeneity`) the planner asks how many local steps the task runs;
the work, and so the duration, follow from them. The same numbers, for a full task of every
client, make the resource request a selector may be disclosed (:meth:`TaskPlanner.disclosed`).
"""
from __future__ import annotations

from typing import Callable, Hashable

import numpy as np
import simpy

from fedclock.scheduling.devices import Devices, TaskTiming, task_timing
from fedclock.scheduling.heterogeneity import WorkAndLinks
from fedclock.scheduling.selection import Disclosed
from fedclock.scheduling.task import Task, TaskCosts

__all__ = ["TaskPlanner"]


class TaskPlanner:
    """The run's tasks as dispatched: their costs and timing (:meth:`task`), and what is known
    of them at dispatch (lost, given up on, upload discarded, computation needed)."""

    def __init__(self, devices: Devices, client_sizes: np.ndarray, costs: TaskCosts,
                 work_and_links: WorkAndLinks | None = None,
                 server_seconds: Callable[[list[Task]], float] | None = None,
                 upload_kind: Callable[[int, int], Hashable] | None = None, *, timeout_s: float | None = None,
                 budget_s: float | None = None, stateless_clients: bool = False) -> None:
        self.devices = devices
        self.costs = costs
        self.work_and_links = work_and_links
        self.timeout_s = timeout_s
        """``mode.task_timeout_s``: the server gives up on a task not back this long after its dispatch."""
        self.budget_s = budget_s
        """``stop.virtual_time_s``: a task finishing later is never used."""
        self.stateless_clients = stateless_clients
        """The algorithm keeps no client state: a task whose upload is known at dispatch to be
        discarded changes nothing and is not started (see :meth:`skipped`)."""
        self.server_seconds = server_seconds
        """Virtual seconds of the server step on these arrivals, from the state the server is in
        (:mod:`fedclock.scheduling.server_device`); None: the step takes no time."""
        self.upload_kind = upload_kind
        """What a task dispatched now to a client uploads, given the client and the server steps
        applied so far (kept on :attr:`Task.upload_kind` for the server step's charge); None:
        not asked."""
        # Per-client values read on every dispatch, kept as arrays and read with ``.item()``: as
        # Python lists they were a faster read by ~50 ns a dispatch but cost 104 bytes a client
        # (a float object and a pointer per value), 1 GB at ten million clients
        # (benchmarks/RESULTS.md, "Ten million clients, second pass").
        self.client_size: np.ndarray = np.asarray(client_sizes).astype(np.int64, copy=False)
        self.full_work = costs.local_steps is None or costs.work_for_steps is None
        """Every task does the algorithm's full work (the costs do not declare steps)."""
        self.fixed_devices = type(devices) is Devices
        """Device values never change during the run (no timeline): transfer times are
        computed once per client."""
        if self.fixed_devices:
            down_s, up_s = devices.transfer_arrays(costs.bytes_down, costs.bytes_up)
            self._down_s, self._up_s = down_s, up_s
            self._compute = np.asarray(devices.compute, dtype=np.float64)
        self._sizes: np.ndarray | None = None
        self._request: Disclosed | None = None

    def task(self, index: int, client: int, client_task: int, round_index: int, version: int, env: simpy.Environment,
             server_steps: int, on_settle: Callable[[Task], None] | None) -> Task:
        """Task ``client_task`` of ``client`` dispatched now: its steps, timing and bytes, what it
        uploads (after ``server_steps`` server steps), whether its connection will be lost and
        when the server gives up on it (``mode.task_timeout_s``)."""
        steps, full, timing = self.plan(client, client_task)
        costs, now = self.costs, env.now
        task = Task(index=index, client=client, client_task=client_task, round=round_index, version=version,
                    dispatched_at=now, timing=timing, bytes_down=costs.bytes_down, bytes_up=costs.bytes_up,
                    num_samples=self.client_size.item(client), steps=steps, steps_full=full, on_settle=on_settle,
                    env=env)
        if self.upload_kind is not None:
            task.upload_kind = self.upload_kind(client, server_steps)
        timeout = self.timeout_s
        if self.work_and_links is not None and self.work_and_links.loses(client, client_task, timing.total_s):
            assert timeout is not None, "mode.task_timeout_s: required when connections may be lost"
            task.lost = True
            task.gives_up_at = now + timeout
        elif timeout is not None and timing.total_s > timeout:
            task.gives_up_at = now + timeout
        return task

    def lose(self, task: Task, now: float) -> bool:
        """A scripted connection loss of running ``task`` (its result not yet at the server):
        it never comes back, and the server gives up on it at its dispatch time +
        ``mode.task_timeout_s``. Whether it was lost now (not already lost or arrived)."""
        if task.lost or task.finishes_at <= now:
            return False
        if self.timeout_s is None:
            raise ValueError("mode.task_timeout_s: required to lose connections (the server learns of a lost task "
                             "only by this timeout)")
        task.lost = True
        task.gives_up_at = task.dispatched_at + self.timeout_s
        return True

    @staticmethod
    def upload_discarded(task: Task, drop_after: float | None) -> bool:
        """Whether the server will not use ``task``'s upload, known at its dispatch: it gives
        up on the task first (``mode.task_timeout_s``), or the task finishes after its sync
        round's deadline (``drop_after``) with ``late_results: drop``."""
        return task.gives_up_at is not None or (drop_after is not None and task.finishes_at > drop_after)

    def skipped(self, task: Task) -> bool:
        """Whether ``task``'s computation is known at its dispatch to change no result, so it
        need not run (the events table is the same: a task's row takes its training metrics
        only when its upload is applied).

        * It finishes after the run's time budget (``stop.virtual_time_s``): it ends
          unfinished (or timed out and still running), and neither its upload nor its client
          state is kept — for every algorithm.
        * With :attr:`stateless_clients` (the algorithm keeps no client state), its upload is
          discarded: the server gives up on it first (``mode.task_timeout_s``), or it finishes
          after its sync round's deadline with ``late_results: drop``.
        """
        budget = self.budget_s
        if budget is not None and task.finishes_at > budget:
            return True
        return self.stateless_clients and task.upload_discarded

    def plan(self, client: int, client_task: int) -> tuple[int | None, int | None, TaskTiming]:
        """(steps the task runs, the full count, its timing) for task ``client_task`` of
        ``client`` dispatched now; steps are (None, None) when the costs do not declare them."""
        num_samples = self.client_size.item(client)
        if self.full_work:
            steps = full = None
            work = self.costs.work(num_samples)
        else:
            steps, full, work = self._plan_work(client, client_task, num_samples)
        if self.fixed_devices:
            return steps, full, TaskTiming._make((self._down_s.item(client), work / self._compute.item(client),
                                                  self._up_s.item(client)))
        return steps, full, task_timing(self.devices[client], self.costs.bytes_down, self.costs.bytes_up, work)

    def _plan_work(self, client: int, client_task: int, num_samples: int) -> tuple[int | None, int | None, float]:
        """(steps this task runs, the full count, its work)."""
        costs = self.costs
        work_for = costs.work_for_steps
        assert costs.local_steps is not None and work_for is not None
        full = costs.local_steps(num_samples)
        if self.work_and_links is None:
            return full, full, work_for(num_samples, full)
        profile = self.devices[client]

        def duration(steps: int) -> float:
            return task_timing(profile, costs.bytes_down, costs.bytes_up, work_for(num_samples, steps)).total_s

        steps = self.work_and_links.steps(client, client_task, full, duration)
        return steps, full, work_for(num_samples, steps)

    def sizes(self) -> np.ndarray:
        """Every client's training-set size as a read-only array, built once (a selector's
        view reads it at every decision)."""
        if self._sizes is None:
            self._sizes = self.client_size.view()  # a read-only view, not a copy
            self._sizes.flags.writeable = False
        return self._sizes

    def disclosed(self, data_size: bool) -> Disclosed:
        """The clients' resource request: their profiles now and a full task's estimated times
        (computed once when the profiles never change), with their data sizes if ``data_size``."""
        if self._request is None or not self.fixed_devices:
            self._request = self._resource_request(data_size)
            for array in vars(self._request).values():  # shared between decisions: nobody may write it
                if isinstance(array, np.ndarray):
                    array.flags.writeable = False
        return self._request

    def _resource_request(self, data_size: bool) -> Disclosed:
        devices, costs = self.devices, self.costs
        if type(devices) is Devices:
            compute, down, up, lat = devices.compute, devices.down_mbps, devices.up_mbps, devices.latency_s
        else:
            profiles = [devices[c] for c in range(len(devices))]
            compute = np.array([p.compute for p in profiles])
            down = np.array([p.down_mbps for p in profiles])
            up = np.array([p.up_mbps for p in profiles])
            lat = np.array([p.latency_s for p in profiles])
        down_s = costs.bytes_down * 8.0 / (down * 1e6) + lat
        up_s = costs.bytes_up * 8.0 / (up * 1e6) + lat
        sizes = self.sizes()
        unique, inverse = np.unique(sizes, return_inverse=True)
        work = np.array([costs.work(int(u)) for u in unique])[inverse]
        total = down_s + work / compute + up_s
        return Disclosed(data_size=sizes if data_size else None, compute=compute.copy(), down_mbps=down.copy(),
                         up_mbps=up.copy(), latency_s=lat.copy(), expected_duration_s=total,
                         download_s=down_s + work / compute, upload_s=up_s)
