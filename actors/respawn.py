"""A lost actor's replacement, started within a bounded time, and a run resumed on a cluster
smaller than the one it started on.

When a node of a Ray cluster is lost with the run's executors taking every CPU of the cluster,
a fresh executor has nowhere to go and Ray keeps it pending for ever. :func:`wait_started`
waits ``runtime.respawn_timeout_s`` for a fresh actor's set-up call and then ends the run with
:class:`~fedclock.actors.calls.ActorUnplaced`, one line saying what was lost and what the
cluster has. The run's checkpoints stay; a run started from a checkpoint (``fedclock run
--resume``, or after a lost server) takes as many pooled executors as the cluster it finds
fits (:func:`fitted_count`): the results do not depend on the number of executors
(:class:`~fedclock.actors.runtime_config.RuntimeConfig`), so the resumed run's tables equal an
undisturbed run's.
"""
from __future__ import annotations

from typing import Any, Callable

from fedclock.actors.calls import ActorUnplaced
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.actors.transport import RayTransport, Transport


def wait_started(t: Transport, setup: Any, cfg: RuntimeConfig, what: str, count: int) -> Any:
    """The result of ``setup`` (the handle of a fresh actor's set-up call), or
    :class:`ActorUnplaced` when it has not come within ``cfg.respawn_timeout_s`` on Ray;
    ``what``: the actor replaced ("client executor 1"), ``count``: the run's executors."""
    if isinstance(t, RayTransport):
        import ray

        ready, _ = ray.wait([setup], timeout=cfg.respawn_timeout_s)
        if not ready:
            total = ray.cluster_resources().get("CPU", 0.0)
            free = ray.available_resources().get("CPU", 0.0)
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            raise ActorUnplaced(
                f"{what} was lost and its replacement did not start within {cfg.respawn_timeout_s:g} s "
                f"(runtime.respawn_timeout_s): the Ray cluster now has {nodes} node(s) with {total:g} CPUs "
                f"({free:g} free), the run's {count} executors need {count * cfg.num_cpus:g} (a node lost?)")
    return t.get(setup)


def fitted_count(cfg: RuntimeConfig, count: int, cpus: float, note: Callable[[str], None] | None) -> int:
    """The executors a run started from a checkpoint takes on a cluster of ``cpus`` CPUs: the
    ``count`` its settings ask for, or as many as fit when that is more (at least one; said to
    ``note``). The caller places them pooled."""
    fit = max(1, int(cpus // cfg.num_cpus + 1e-9))
    if count * cfg.num_cpus <= cpus + 1e-9 or fit >= count:
        return count
    if note is not None:
        note(f"the Ray cluster has {cpus:g} CPUs: this run goes on from its checkpoint with {fit} pooled executor(s) "
             f"of {cfg.num_cpus:g} CPU, not the {count} its runtime settings ask for (the results do not change)")
    return fit
