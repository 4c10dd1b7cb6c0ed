"""Which privacy accounting a scenario's run gets (:class:`~fedclock.algorithms.privacy.Accounting`),
decided from how its clients are chosen; the rules and the accountants are
:mod:`fedclock.algorithms.privacy`'s.

Amplification by sampling is claimed only when every global step's cohort is a uniform
sample of ``K`` of all ``N`` clients without replacement, independent of the data: central
DP, sync mode, the clock's own ``uniform`` draw, ``K < N``, and nothing that makes some
clients unavailable or busy at a round's start (an availability model other than
``always``, scripted timeline events, a round deadline, a task timeout, over-commitment or
lossy connectivity: the clock then draws among the idle, available clients only, not
among all ``N``; nor clients whose device cannot fit the task, found when the run starts,
:func:`feasible_accounting`). The scenario samples fixed-size cohorts only (no Poisson sampling), so the
amplified rule is the fixed-size one. Every other run composes each client's own releases
(``per_client``); the first condition that fails is the recorded reason.

**The budget as heterogeneity** (``privacy.budget``, one epsilon for every client or, with
``budget.clients``, one per group of ids). Under ``per_client`` accounting a client's
epsilon depends only on its own releases, so its budget is a number of uploads,
:func:`~fedclock.algorithms.privacy.uploads_within`: the clock retires a client when its
applied uploads reach it (:meth:`~fedclock.scheduling.timeline.Timeline.retire`: offline for
good, a ``retired`` row of ``timeline.parquet``, ``retired_at`` in ``clients.parquet``), so
its next upload, which would exceed the budget, never happens. A client's releases are its
applied uploads (what :mod:`fedclock.algorithms.privacy` counts), and a client has one task
at a time, so none is in flight when it retires. Under ``sampled_fixed_size`` accounting every
client's epsilon is the run's, grown by every step whether the client joined or not: a budget
would retire every client at once, so it is refused (stop the run with ``stop.rounds``).
"""
from __future__ import annotations

import math

import numpy as np

from fedclock.algorithms.dp import cumulative_epsilon
from fedclock.algorithms.privacy import Accounting, uploads_within
from fedclock.scenarios.schema import Scenario
from fedclock.scheduling.modes import SyncMode


def choose_accounting(scenario: Scenario) -> Accounting:
    """The accounting rule for ``scenario`` and why (see the module's docstring)."""
    privacy = scenario.privacy
    mode, pop = scenario.mode, scenario.population
    n = pop.num_clients
    if privacy is None or privacy.mode == "local":
        return Accounting("per_client", "local DP: the server sees who uploaded, so sampling hides nothing")
    if not isinstance(mode, SyncMode):
        return Accounting("per_client", "async mode: uploads are not tied to sampled rounds")
    if scenario.selection.name != "uniform":
        return Accounting("per_client", f"selection {scenario.selection.name!r} is not a uniform sample")
    unavailable = [why for cond, why in (
        (pop.availability.type != "always" or any(g.availability is not None for g in pop.clients),
         "an availability model other than always"),
        (bool(scenario.timeline), "timeline events"), (mode.deadline_s is not None, "a round deadline"),
        (mode.task_timeout_s is not None, "a task timeout"), (mode.overcommit is not None, "over-commitment"),
        (pop.connectivity.type != "reliable" or any(g.connectivity is not None for g in pop.clients),
         "lossy connectivity")) if cond]
    if unavailable:
        return Accounting("per_client", f"{unavailable[0]}: cohorts are drawn from the idle, available clients only")
    k = mode.cohort_size if mode.cohort_size is not None else \
        max(1, math.ceil(mode.cohort_fraction * n)) if mode.cohort_fraction is not None else n
    if k >= n:
        return Accounting("per_client", "every client joins every round: no sampling")
    return Accounting("sampled_fixed_size", f"uniform cohorts of {k} of {n} clients without replacement",
                      population=n, cohort=k)


RETIRE_REASON = "privacy budget: the next upload would exceed budget.epsilon"
"""The detail of a budget retirement's ``timeline.parquet`` row."""


def run_privacy_problem(scenario: Scenario) -> str | None:
    """A one-line error when the ``privacy:`` section cannot be accounted for in this run:
    local DP where the server discards uploads the clients sent (a round's late results
    dropped, tasks timed out: the server never sees them, so it could not count them), or a
    ``budget`` that cannot act (the amplified rule, where every client's epsilon is the
    run's; a budget one upload already exceeds)."""
    privacy = scenario.privacy
    mode = scenario.mode
    if privacy is not None and privacy.mode == "local":
        if mode.task_timeout_s is not None:
            return ("privacy.mode: local DP counts the uploads the server receives, and with mode.task_timeout_s it "
                    "discards late ones the clients sent (allowed: central, or no task_timeout_s)")
        if mode.drops_late:
            return ("privacy.mode: local DP counts the uploads the server receives, and with mode.deadline_s and "
                    "late_results: drop it discards late ones the clients sent (allowed: central, or late_results: "
                    "include)")
    if privacy is None or privacy.budget is None:
        return None
    accounting = choose_accounting(scenario)
    if accounting.rule != "per_client":
        return (f"privacy.budget: with {accounting.reason} every client's epsilon is the run's (amplification by "
                f"sampling), so a per-client budget would retire every client at once; stop the run with stop.rounds "
                f"instead, or pick clients another way")
    budget, n = privacy.budget, scenario.population.num_clients
    for i, group in enumerate(budget.clients):
        beyond = [c for c in group.ids if c >= n]
        if beyond:
            return f"privacy.budget.clients[{i}].ids: client {beyond[0]} does not exist (allowed: 0..{n - 1})"
    for field, epsilon in [("privacy.budget.epsilon", budget.epsilon)] + [
            (f"privacy.budget.clients[{i}].epsilon", g.epsilon) for i, g in enumerate(budget.clients)]:
        if uploads_within(privacy.noise_multiplier, epsilon, budget.delta) == 0:
            eps = cumulative_epsilon(privacy.noise_multiplier, 1, budget.delta)
            return (f"{field}: one upload at noise_multiplier {privacy.noise_multiplier:g} already spends epsilon "
                    f"{eps:.3g} (got a budget of {epsilon:g}); raise the budget or the noise")
    return None


def upload_limits(scenario: Scenario) -> list[int] | None:
    """Each client's applied uploads before it retires (None: no ``privacy.budget``); the
    loader has checked :func:`run_privacy_problem`."""
    privacy = scenario.privacy
    if privacy is None or privacy.budget is None:
        return None
    budget = privacy.budget
    return [uploads_within(privacy.noise_multiplier, eps, budget.delta)
            for eps in budget.epsilons(scenario.population.num_clients)]


def feasible_accounting(accounting: Accounting, feasible: np.ndarray | None) -> Accounting:
    """``accounting``, unless clients whose device cannot fit the task (never dispatched,
    known only once the task's memory is counted; None: every client fits) make a uniform
    cohort over all ``N`` impossible: then per-client composition, saying why."""
    infeasible = 0 if feasible is None else int(np.count_nonzero(~np.asarray(feasible, dtype=bool)))
    if accounting.rule != "sampled_fixed_size" or not infeasible:
        return accounting
    return Accounting("per_client",
                      f"clients that cannot fit the task ({infeasible}): cohorts are drawn from the others only")
