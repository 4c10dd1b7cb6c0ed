"""Which privacy accounting a scenario's run gets (:class:`~fedclock.algorithms.privacy.Accounting`),
decided from how its clients are chosen; the rules and the accountants are
:mod:`fedclock.algorithms.privacy`'s.

Amplification by sampling is claimed only when every global step's cohort is a uniform
sample of ``K`` of all ``N`` clients without replacement, independent of the data: central
DP, sync mode, the clock's own ``uniform`` draw, ``K < N``, and nothing that makes some
clients unavailable or busy at a round's start (an availability model other than
``always``, scripted timeline events, a round deadline, a task timeout, over-commitment or
lossy connectivity: the clock then draws among the idle, available clients only, not
among all ``N``). The scenario samples fixed-size cohorts only (no Poisson sampling), so the
amplified rule is the fixed-size one. Every other run composes each client's own releases
(``per_client``); the first condition that fails is the recorded reason.
"""
from __future__ import annotations

import math

from fedclock.algorithms.privacy import Accounting
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
