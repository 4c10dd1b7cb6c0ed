"""Settings of two kinds of system heterogeneity beyond speed and availability.

* **Completeness** (``population.completeness``, per client in ``population.clients``): a
  task may run only part of the algorithm's local steps. The clock decides the number of
  steps when it dispatches the task (so the task's virtual duration matches the work done)
  and the task carries it to the client.
* **Connectivity** (``population.connectivity``, per client too): a client that started a
  task may lose its connection and never return the result. The server learns of it only
  by the protocol's ``mode.task_timeout_s``.

:mod:`fedclock.scenarios.schema` composes these models into the scenario file. Each variant
carries its own behaviour (how many steps a task runs, whether it is lost, a share's draw);
:class:`fedclock.scheduling.heterogeneity.WorkAndLinks` finds each client's variant and asks it.
Every draw comes from a generator seeded by (scenario seed, stream, client, task index)
(``per: client`` shares: (seed, stream, client)), :class:`TaskDraws`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Callable, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedclock.scheduling.model_base import OrderedRange
from fedclock.scheduling.rng import Stream, numpy_rng

Duration = Callable[[int], float]
"""Total virtual seconds (download + compute + upload) of a task that runs this many steps."""


@dataclass(frozen=True)
class TaskDraws:
    """Where one task's draws come from: generators seeded by (seed, stream, client, task)."""

    seed: int
    client: int
    client_task: int

    def rng(self, stream: Stream) -> np.random.Generator:
        """The task's own generator of ``stream``."""
        return numpy_rng(self.seed, stream, self.client, self.client_task)

    def client_rng(self, stream: Stream) -> np.random.Generator:
        """The client's generator of ``stream``, the same for all its tasks."""
        return numpy_rng(self.seed, stream, self.client)


def steps_for_share(share: float, full: int) -> int:
    """``floor(share * full)`` steps, at least one and at most ``full`` (a tiny tolerance
    keeps e.g. 0.3 * 10 from flooring to 2)."""
    return min(full, max(1, math.floor(share * full + 1e-9)))


def steps_within(budget_s: float, full: int, duration: Duration) -> int:
    """The most steps in ``0..full`` whose task ``duration(steps)`` is at most ``budget_s``
    (0 when even the transfers do not fit). Exact with respect to ``duration``: the answer
    is checked with the same float computation the clock uses for the task's timing."""
    if duration(full) <= budget_s:
        return full
    fixed = duration(0)
    per_step = (duration(full) - fixed) / full
    guess = 0 if per_step <= 0 else max(0, min(full, math.floor((budget_s - fixed) / per_step)))
    while guess > 0 and duration(guess) > budget_s:
        guess -= 1
    while guess < full and duration(guess + 1) <= budget_s:
        guess += 1
    return guess

UnitFraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
"""A share of the local work in (0, 1]."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- fraction distributions
class UniformFraction(OrderedRange, _Strict):
    """Uniform on [low, high] within (0, 1]."""

    dist: Literal["uniform"]
    low: UnitFraction
    high: UnitFraction

    def draw(self, rng: np.random.Generator) -> float:
        """One share in (0, 1]."""
        return float(rng.uniform(self.low, self.high))


class BetaFraction(_Strict):
    """Beta(a, b) on (0, 1); a draw of exactly 0 is treated as the smallest positive share."""

    dist: Literal["beta"]
    a: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    b: Annotated[float, Field(gt=0, allow_inf_nan=False)]

    def draw(self, rng: np.random.Generator) -> float:
        return max(float(rng.beta(self.a, self.b)), np.finfo(float).tiny)


class ChoiceFraction(_Strict):
    """One of ``values``, with optional ``weights``."""

    dist: Literal["choice"]
    values: Annotated[list[UnitFraction], Field(min_length=1)]
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = None

    @model_validator(mode="after")
    def _weights_match(self) -> "ChoiceFraction":
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(f"weights: has {len(self.weights)} entries, values has {len(self.values)}")
            if not sum(self.weights) > 0:
                raise ValueError("weights: must not all be zero")
        return self

    def draw(self, rng: np.random.Generator) -> float:
        p = None if self.weights is None else np.asarray(self.weights) / np.sum(self.weights)
        return float(rng.choice(np.asarray(self.values, dtype=np.float64), p=p))


FractionDistribution = Annotated[Union[UniformFraction, BetaFraction, ChoiceFraction], Field(discriminator="dist")]


# --------------------------------------------------------------------------- completeness
class Completeness(_Strict):
    """How many of the algorithm's ``full`` local steps a task runs."""

    def fixed_steps(self, full: int) -> int | None:
        """The steps when they need no draw and no timing (None: they do)."""
        return None

    def steps(self, full: int, duration: Duration, draws: TaskDraws, deadline_s: float | None) -> int:
        """The task's steps; ``duration(steps)`` is its total virtual seconds, ``deadline_s``
        the sync round's deadline (None: none)."""
        fixed = self.fixed_steps(full)
        assert fixed is not None, f"{type(self).__name__} must define steps"
        return fixed

    def fewest_steps(self, full: int) -> int:
        """A lower bound on the steps any task runs."""
        fixed = self.fixed_steps(full)
        return 0 if fixed is None else fixed


class FullWork(Completeness):
    """Every task runs all of the algorithm's local steps (the default)."""

    type: Literal["full"] = "full"

    def fixed_steps(self, full: int) -> int | None:
        return full


class FixedFraction(Completeness):
    """Every task of the client runs ``floor(value * K)`` of the algorithm's ``K`` local
    steps (at least one)."""

    type: Literal["fraction"]
    value: UnitFraction

    def fixed_steps(self, full: int) -> int | None:
        return steps_for_share(self.value, full)


class RandomFraction(Completeness):
    """The share of the ``K`` local steps is drawn from ``distribution``: once per task
    (``per: task``) or once per client for the whole run (``per: client``); the task runs
    ``floor(share * K)`` steps (at least one)."""

    type: Literal["random"]
    distribution: FractionDistribution
    per: Literal["task", "client"] = "task"

    def steps(self, full: int, duration: Duration, draws: TaskDraws, deadline_s: float | None) -> int:
        rng = draws.client_rng(Stream.COMPLETENESS) if self.per == "client" else draws.rng(Stream.COMPLETENESS)
        return steps_for_share(self.distribution.draw(rng), full)

    def fewest_steps(self, full: int) -> int:
        return 1


class TimeBudget(Completeness):
    """The task must be back (download, local steps, upload) within ``budget_s`` virtual
    seconds of its dispatch: the client runs as many of the ``K`` steps as its device speed
    fits in the time left after the transfers (possibly none). Unset ``budget_s`` means the
    sync mode's round ``deadline_s``."""

    type: Literal["time_budget"]
    budget_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    def steps(self, full: int, duration: Duration, draws: TaskDraws, deadline_s: float | None) -> int:
        budget = self.budget_s if self.budget_s is not None else deadline_s
        if budget is None:
            raise ValueError("completeness.budget_s: needs a budget or a sync round deadline")
        return steps_within(budget, full, duration)


CompletenessConfig = Annotated[Union[FullWork, FixedFraction, RandomFraction, TimeBudget],
                               Field(discriminator="type")]


# --------------------------------------------------------------------------- connectivity
class Connectivity(_Strict):
    """Whether a task loses its connection before its result reaches the server."""

    def can_lose(self) -> bool:
        """True when this model may lose tasks."""
        return True

    def loses(self, duration_s: float, draws: TaskDraws) -> bool:
        """Whether the task, lasting ``duration_s`` virtual seconds, is lost."""
        raise NotImplementedError(f"{type(self).__name__}.loses")


class Reliable(Connectivity):
    """The connection never drops (the default)."""

    type: Literal["reliable"] = "reliable"

    def can_lose(self) -> bool:
        return False

    def loses(self, duration_s: float, draws: TaskDraws) -> bool:
        return False


class PerTaskLoss(Connectivity):
    """Each task is lost with ``probability`` (one draw per task)."""

    type: Literal["per_task"]
    probability: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]

    def can_lose(self) -> bool:
        return self.probability > 0

    def loses(self, duration_s: float, draws: TaskDraws) -> bool:
        return bool(draws.rng(Stream.CONNECTIVITY).random() < self.probability)


class PerSecondLoss(Connectivity):
    """The connection drops at rate ``rate`` per virtual second of task time (an exponential
    time to failure drawn per task): a task of duration ``d`` is lost with probability
    ``1 - exp(-rate * d)``."""

    type: Literal["per_second"]
    rate: Annotated[float, Field(gt=0, allow_inf_nan=False)]

    def loses(self, duration_s: float, draws: TaskDraws) -> bool:
        return bool(draws.rng(Stream.CONNECTIVITY).exponential(1.0 / self.rate) < duration_s)


ConnectivityConfig = Annotated[Union[Reliable, PerTaskLoss, PerSecondLoss], Field(discriminator="type")]


def can_lose(cfg: Connectivity | None) -> bool:
    """True when a connectivity model (None: a client without its own) may lose tasks."""
    return cfg is not None and cfg.can_lose()
