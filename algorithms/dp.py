"""The Gaussian mechanism for local differential privacy of client uploads, and the privacy
accounting of a whole run.

**Neighbouring relation.** The FedReCo paper (full version, Sec. 6.2) claims
"(epsilon, delta)-local differential privacy" of each upload with "the standard Gaussian
mechanism" (Dwork & Roth 2014; Abadi et al. 2016). Local DP is a guarantee about the
client's *input*: the output distributions for any two inputs must be close, i.e. the
client's data may be replaced by any other data (replace-one at the level of the client).
An upload is clipped to L2 norm ``C`` before noising, so two inputs move it by at most
``2C``: the L2 sensitivity is ``2C`` (add/remove neighbouring, where a client's vector is
present or zero, would give ``C``; it is the relation of central user-level DP, not of the
local DP the paper states). Every noise scale here is calibrated to sensitivity ``2C``.

**Noise.** Each coordinate gets Gaussian noise of standard deviation ``z * 2C`` with the
noise multiplier ``z`` chosen by ``calibration``:

* ``classical`` (the paper's "standard Gaussian mechanism"): Dwork and Roth (2014,
  Theorem A.1), ``z = sqrt(2 ln(1.25/delta)) / epsilon``. The theorem holds only for
  ``epsilon < 1``; a larger epsilon is rejected (use ``analytic``).
* ``analytic``: the analytic Gaussian mechanism of Balle and Wang (2018), the smallest ``z``
  for which the Gaussian mechanism is exactly (epsilon, delta)-DP, valid for every epsilon;
  computed by ``dp_accounting.get_sigma_gaussian``.

**Accounting.** Per-upload budgets compose over a run: a client that uploads ``k`` times
has released ``k`` Gaussian mechanisms. :func:`cumulative_epsilon` reports the epsilon of
that composition at a chosen delta with the privacy-loss-distribution (PLD) accountant of
Google's ``dp-accounting`` library (``dp_accounting.pld.PLDAccountant``), which is tight for
Gaussian mechanisms (their composition is again Gaussian). The library is a maintained,
reviewed accountant; composition theorems are easy to get wrong by hand, so none is
written here. The accountant models each upload as a sensitivity-1 Gaussian mechanism
with noise multiplier ``z`` (= noise standard deviation / (2C)), which is the replace-one
privacy of our upload. A run reports the epsilon of its most-participating client (every
client uses the same ``z``, so that is the largest epsilon of any client).

**Budget scope** (``budget_scope``). The paper states (epsilon, delta) per upload and does
not report composition (Sec. 6.2); that is ``upload``, the default. ``run`` reads the
budget as the whole run's: a client uploading ``budget_uploads`` times must spend at most
(epsilon, delta) in all, so each upload gets the multiplier :func:`run_multiplier` found by
``dp_accounting``'s mechanism calibration on the same PLD accountant (about
``sqrt(budget_uploads)`` times the one-shot multiplier). The run's report
(:func:`privacy_report`) then shows at most epsilon after ``budget_uploads`` uploads.

**Clipping granularity** (a choice; the paper's appendix with the details is missing):
``dp_clip_granularity: batch`` clips the uploaded vector as a whole (the default: the
paper adds noise to "the stochastic gradient" and "the model difference"); ``example``
(FedReCo-DP only) clips each sample's contribution to the penalty gradient to ``C`` before
averaging over the batch (per-sample gradients with ``torch.func``), as in DP-SGD (Abadi et
al. 2016). The average still has norm at most ``C``, so the local-DP sensitivity and the
noise stay the same; per-example clipping additionally bounds each single sample's
influence by ``2C / B``, an example-level guarantee that the reported epsilon does not
include. ``C`` (``dp_clip``) defaults to 1.0: the paper does not give it.

Used by FedAvg-DP (noise on the model difference) and FedReCo-DP (noise on the penalty
gradient).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedclock.algorithms.base import ServerState

PLD_DISCRETIZATION = 1e-3
"""Value discretization interval of the PLD accountant: the library's default (1e-4) costs
about 1.3 s for 500 composed uploads, 1e-3 about 0.1 s, and the two agree to 1e-6 relative
on the FedReCo budgets (the discretization is pessimistic: epsilon is never under-reported)."""

SENSITIVITY_PER_CLIP = 2.0
"""L2 sensitivity of a vector clipped to norm C, in units of C (replace-one: any two inputs)."""


class DPParams(BaseModel):
    """Privacy budget, clipping norm, calibration and accounting of the Gaussian mechanism
    (mixed into an algorithm's Params)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(default=0.2, gt=0, description="privacy budget epsilon of each upload (local DP)")
    delta: float = Field(default=0.1, gt=0, lt=1, description="privacy parameter delta of each upload")
    dp_clip: float = Field(default=1.0, gt=0, description="L2 norm C the upload is clipped to before noising "
                           "(sensitivity 2C: any two client inputs)")
    calibration: Literal["classical", "analytic"] = Field(
        default="classical", description="classical: sigma = sqrt(2 ln(1.25/delta))/epsilon (Dwork & Roth, only "
        "epsilon < 1); analytic: Balle & Wang 2018 (any epsilon)")
    dp_clip_granularity: Literal["batch", "example"] = Field(
        default="batch", description="batch: clip the uploaded vector; example: clip each sample's gradient "
        "before averaging (FedReCo-DP)")
    accounting_delta: float | None = Field(default=None, gt=0, lt=1, description="delta at which the run's "
                                           "cumulative epsilon is reported (default: delta)")
    budget_scope: Literal["upload", "run"] = Field(
        default="upload", description="upload: (epsilon, delta) is each upload's budget (the paper's reading); run: "
        "it is the whole run's budget of a client over budget_uploads uploads (PLD accountant calibration)")
    budget_uploads: int | None = Field(default=None, ge=1, description="budget_scope run: the uploads per client "
                                       "the run's budget covers (e.g. the rounds of a run with every client)")

    @model_validator(mode="after")
    def _run_scope_needs_uploads(self) -> "DPParams":
        if self.budget_scope == "run" and self.budget_uploads is None:
            raise ValueError("budget_uploads: budget_scope 'run' needs the number of uploads per client the budget "
                             "covers (an integer >= 1, e.g. the number of rounds)")
        return self

    @model_validator(mode="after")
    def _classical_needs_small_epsilon(self) -> "DPParams":
        if self.budget_scope == "upload" and self.calibration == "classical" and self.epsilon >= 1:
            raise ValueError(f"epsilon: the classical Gaussian mechanism holds only for epsilon < 1 (got "
                             f"{self.epsilon:g}); use a smaller epsilon or calibration: analytic")
        return self

    @property
    def report_delta(self) -> float:
        """The delta of the cumulative privacy report."""
        return self.accounting_delta if self.accounting_delta is not None else self.delta


def classical_multiplier(epsilon: float, delta: float) -> float:
    """Noise multiplier ``sqrt(2 ln(1.25/delta)) / epsilon`` of the classical Gaussian
    mechanism (Dwork & Roth 2014, Theorem A.1; valid for ``0 < epsilon < 1``)."""
    if not 0 < epsilon < 1 or not 0 < delta < 1:
        raise ValueError(f"the classical Gaussian mechanism needs 0 < epsilon < 1 and 0 < delta < 1 "
                         f"(got epsilon={epsilon}, delta={delta})")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def noise_multiplier(params: DPParams) -> float:
    """``z``: noise standard deviation per unit of L2 sensitivity for one upload (with
    ``budget_scope: run``, the ``z`` whose ``budget_uploads``-fold composition spends the
    run's (epsilon, delta): :func:`run_multiplier`)."""
    if params.budget_scope == "run":
        assert params.budget_uploads is not None  # the validator's guarantee
        return run_multiplier(params.epsilon, params.delta, params.budget_uploads)
    if params.calibration == "analytic":
        return _analytic_multiplier(params.epsilon, params.delta)
    return classical_multiplier(params.epsilon, params.delta)


@lru_cache(maxsize=64)
def _analytic_multiplier(epsilon: float, delta: float) -> float:
    import dp_accounting  # imported on use: it pulls in SciPy (0.6 s), which most runs never need

    return float(dp_accounting.get_sigma_gaussian(epsilon, delta))


@lru_cache(maxsize=64)
def run_multiplier(epsilon: float, delta: float, uploads: int) -> float:
    """The smallest noise multiplier ``z`` (to the calibration's tolerance) for which
    ``uploads`` Gaussian mechanisms of multiplier ``z`` compose to at most (epsilon, delta)
    under the PLD accountant of :func:`cumulative_epsilon` (``dp_accounting``'s
    ``calibrate_dp_mechanism``: a bracketed search on the accountant, never a formula).
    For Gaussian mechanisms this is about ``sqrt(uploads)`` times the one-shot analytic
    multiplier (their composition is a Gaussian mechanism of multiplier ``z / sqrt(uploads)``)."""
    import dp_accounting  # imported on use (see _analytic_multiplier)
    from dp_accounting.pld import pld_privacy_accountant

    def accountant() -> pld_privacy_accountant.PLDAccountant:
        return pld_privacy_accountant.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)

    def event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), uploads)

    guess = _analytic_multiplier(min(epsilon, 50.0), delta) * math.sqrt(uploads)
    # a narrow bracket around the closed form: a tiny multiplier would make the PLD's support huge
    bracket = dp_accounting.ExplicitBracketInterval(0.5 * guess, 2.0 * guess)
    return float(dp_accounting.calibrate_dp_mechanism(accountant, event, epsilon, delta, bracket,
                                                      tol=1e-4 * guess))


def noise_std(params: DPParams) -> float:
    """Standard deviation of the noise per coordinate: ``z * 2C``."""
    return noise_multiplier(params) * SENSITIVITY_PER_CLIP * params.dp_clip


def clip_to_norm(vector: torch.Tensor, clip: float) -> torch.Tensor:
    """``vector * min(1, clip / ||vector||)`` (a copy; the zero vector stays zero)."""
    norm = float(vector.norm())
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return vector * scale


def add_noise(clipped: torch.Tensor, params: DPParams, rng: torch.Generator) -> torch.Tensor:
    """``clipped + N(0, noise_std^2 I)`` drawn from ``rng`` (a CPU generator; float32 CPU)."""
    clipped = clipped.detach().to("cpu", torch.float32)
    noise = torch.randn(clipped.shape, generator=rng, dtype=torch.float32)
    return clipped + noise_std(params) * noise


def privatize(vector: torch.Tensor, params: DPParams, rng: torch.Generator) -> torch.Tensor:
    """Clip ``vector`` to norm ``dp_clip`` as a whole, then :func:`add_noise`."""
    return add_noise(clip_to_norm(vector.detach().to("cpu", torch.float32), params.dp_clip), params, rng)


@lru_cache(maxsize=4096)
def cumulative_epsilon(multiplier: float, uploads: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``uploads`` Gaussian mechanisms of noise multiplier
    ``multiplier`` (sensitivity 1), composed with ``dp_accounting``'s PLD accountant.
    Zero uploads spend nothing (0.0)."""
    if uploads <= 0:
        return 0.0
    import dp_accounting  # imported on use (see _analytic_multiplier)
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(multiplier), uploads))
    return float(accountant.get_epsilon(delta))


def privacy_report(params: DPParams, max_uploads: int) -> dict[str, float]:
    """The numbers a run's metrics carry: the cumulative epsilon of the most-participating
    client (``dp_epsilon``) at ``dp_delta``, its number of uploads, and the per-upload epsilon."""
    return {"dp_epsilon": cumulative_epsilon(noise_multiplier(params), int(max_uploads), params.report_delta),
            "dp_delta": params.report_delta, "dp_uploads_max": float(max_uploads),
            "dp_epsilon_per_upload": params.epsilon}


UPLOADS_KEY = "dp_uploads"
"""Server-state tensor of per-client upload counts (int64, indexed by client id)."""


def with_upload_counts(before: ServerState, after: ServerState, clients: list[int]) -> ServerState:
    """``after`` with the upload counts of ``before`` advanced by one for each of ``clients``
    (a DP algorithm's ``server_receive`` calls it on its new state)."""
    if not clients:
        return after
    counts = count_uploads(before.tensors.get(UPLOADS_KEY), clients)
    return ServerState(tensors={**after.tensors, UPLOADS_KEY: counts}, version=after.version,
                       extra=dict(after.extra))


def state_privacy_report(params: DPParams, state: ServerState) -> dict[str, float]:
    """:func:`privacy_report` for the most-participating client of ``state``'s upload counts."""
    counts = state.tensors.get(UPLOADS_KEY)
    most = int(counts.max()) if counts is not None and counts.numel() else 0
    return privacy_report(params, most)


def count_uploads(counts: torch.Tensor | None, clients: list[int]) -> torch.Tensor:
    """Per-client upload counts (int64, indexed by client id) after one more upload by each
    of ``clients``; grows as larger ids appear."""
    size = max([*clients, -1]) + 1
    out = torch.zeros(max(size, 0 if counts is None else counts.numel()), dtype=torch.int64)
    if counts is not None:
        out[:counts.numel()] = counts
    for c in clients:
        out[c] += 1
    return out
