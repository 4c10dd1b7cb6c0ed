"""Where the real compute runs (``runtime`` of a scenario file)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fedclock.scheduling.model_base import NonNegativeFloat, PositiveFloat, StrictModel

MAX_THREADS = 1024
"""runtime.threads_per_actor."""
MAX_ACTORS = 100_000
"""runtime.num_actors."""
MAX_ACTOR_CPUS = 1024.0
"""runtime.num_cpus (per actor)."""
MAX_ACTOR_GPUS = 64.0
"""runtime.num_gpus (per actor)."""

MAX_TASK_WALL_S = 7 * 86400.0
"""runtime.task_wall_timeout_s."""

MAX_RESPAWN_S = 86400.0
"""runtime.respawn_timeout_s."""

MAX_VECTORIZE = 1024
"""runtime.vectorize (clients trained at once by one executor)."""


class RuntimeConfig(StrictModel):
    """Where the real compute runs. Results do not depend on these settings, with three
    exceptions within float rounding: ``threads_per_actor`` > 1 (PyTorch's CPU kernels split
    their sums by thread count), ``vectorize`` > 1 (batched kernels) and ``device: cuda``
    (the GPU's kernels against the CPU's; on the GPU, backends and actor counts still give
    bit-identical tables: :mod:`fedclock.actors.cuda_kernels`)."""

    backend: Literal["ray", "inline"] = "ray"
    address: str | None = Field(default=None, description="Ray cluster address; default starts a local Ray")
    num_actors: Annotated[int, Field(ge=1, le=MAX_ACTORS)] | None = Field(
        default=None, description="default min(clients, CPUs)")
    placement: Literal["pooled", "dedicated"] | None = Field(
        default=None, description="default: dedicated when every client gets an actor, else pooled")
    num_cpus: Annotated[PositiveFloat, Field(le=MAX_ACTOR_CPUS)] = 1.0
    num_gpus: Annotated[NonNegativeFloat, Field(le=MAX_ACTOR_GPUS)] = 0.0
    threads_per_actor: Annotated[int, Field(ge=1, le=MAX_THREADS)] = 1
    device: Literal["cpu", "cuda"] = "cpu"
    vectorize: Annotated[int, Field(ge=1, le=MAX_VECTORIZE)] = Field(
        default=1, description="vectorized clients: at most this many tasks started at one virtual instant are "
        "trained at once by one executor (torch.func vmap); 1 = off")
    tasks_per_call: Annotated[int, Field(ge=1, le=MAX_VECTORIZE)] | None = Field(
        default=None, description="Ray, pooled executors, no vectorize: the tasks started at one virtual instant "
        "reach the executors in one call per executor (default), or in calls of at most this many tasks (1 = a "
        "call per task); each task runs as on its own, so the numbers never change")
    task_wall_timeout_s: Annotated[PositiveFloat, Field(le=MAX_TASK_WALL_S)] | None = Field(
        default=None, description="fail the run, naming the client and task, when one client task runs longer "
        "than this many seconds of wall time (a plugin that hangs; fedclock.actors.watchdog); default: no limit")
    respawn_timeout_s: Annotated[PositiveFloat, Field(le=MAX_RESPAWN_S)] = Field(
        default=120.0, description="Ray: a lost executor's (or server actor's) replacement not started within "
        "this many seconds (no node has room for it, e.g. a node of the cluster was lost) stops the run in one "
        "line; its checkpoints stay, and fedclock run --resume fits the executors to the cluster it finds")
