"""Differential privacy as a layer over any algorithm whose upload the server aggregates
(the ``privacy:`` section of a scenario).

Every client clips its update ``Delta`` (the algorithm's ``"delta"`` upload, the change of
the whole flat model over its task) to L2 norm ``C`` (``privacy.clip``) on the client; Gaussian
noise is then added either by the client (``mode: local``) or by the server (``mode:
central``). The noise multiplier ``z`` (``privacy.noise_multiplier``) is the noise standard
deviation per unit of L2 sensitivity; what that sensitivity is depends on the mode:

**local** (each client noises its own upload; the server is not trusted). The guarantee is
about one upload, whatever the client's data: the neighbouring relation is *replace-one at
the level of the client* (its data may be any other data), so two clipped updates differ by
at most ``2C``: sensitivity ``2C``, noise ``N(0, (z * 2C)^2 I)`` on each upload, drawn from
the task's generator after the local work. These are the choices of
:mod:`fedclock.algorithms.dp` (FedAvg-DP's Gaussian mechanism), and the same numbers:
``fedavg_dp`` with its multiplier equals ``fedavg`` with ``privacy: {mode: local, clip:
dp_clip, noise_multiplier: z}`` bit for bit (``tests/algorithms/test_privacy.py``).

**central** (user-level DP with a trusted server, the setting of DP-FedAvg, McMahan et al.,
ICLR 2018). The server adds noise to the *sum* of the clipped updates of one global step
(a sync round's cohort, a FedBuff buffer); the neighbouring relation is *add/remove one
client* (its clipped update present or absent), so the sum's sensitivity is ``C`` and its
noise ``N(0, (z * C)^2 I)``. The server draws that noise from its own stream as ``k``
independent parts of variance ``(z C)^2 / k``, one added to each clipped update it folds in,
where ``k`` (:meth:`~fedclock.algorithms.base.Algorithm.deltas_per_step`) is the number of
updates one global step sums (the cohort; FedBuff's buffer size): the parts of one step sum
to exactly the sum's noise. Every arrival is then handed to the algorithm with
``num_samples = steps = 1``, so its weighted mean is the plain mean ``(S + noise) / m`` of
the ``m`` updates of the step: a sample-weighted mean would move by more than ``C / m`` when
one client is added (its weight depends on its data size), and the sample counts are
clients' data the server would publish through the weights. Central DP therefore needs an
algorithm whose step is such a mean once the weights are equal: the class declares
``aggregates_deltas`` (FedAvg, FedProx, FedSAM, FedBuff) and may refuse settings that
re-weight (FedBuff's staleness weighting, :meth:`~fedclock.algorithms.base.Algorithm.
aggregation_problem`); others are refused by the loader in one line. The divisor ``m`` is the
number of updates the step received, which the model's observers can learn; the guarantee
covers the noised sum ``S + noise`` (the released model is its post-processing given ``m``).

**Adaptive clipping** (``privacy.adaptive``, central mode only: a client's clip would
otherwise depend on the others' updates). Quantile clipping after Andrew, Thakkar, McMahan
and Ramaswamy (NeurIPS 2021): the server holds the clip ``C_t`` (starting at ``privacy.clip``)
and sends it with the model (4 bytes); each client clips to it and uploads, besides its
update, whether the update was within it (one byte). The server clips every update again to
the current ``C_t`` (an update of a client that started before the last change may have been
clipped to an older, larger clip), noises the updates' sum with multiplier ``z_Delta`` and the
count of unclipped updates with standard deviation ``sigma_b`` (``bit_noise``; drawn after
the updates' noise, split over the step's arrivals as the updates' noise is), and after each
global step sets ``C <- C exp(-eta_C (b - gamma))`` with ``b`` the step's noisy share of
unclipped updates (the geometric update; ``gamma`` = ``target_quantile``, ``eta_C`` =
``learning_rate``). Each client's bit moves the centred count by at most 1/2, so the bits are a
Gaussian mechanism of multiplier ``2 sigma_b``; choosing ``z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2``
makes the two mechanisms of one step together exactly one Gaussian mechanism of multiplier
``z`` (Gaussian mechanisms compose as one whose inverse squared multipliers add), so the
accounting below is unchanged. An asynchronous client's bit refers to the clip it was sent,
which may be one step old. ``dp_clip`` in ``metrics.parquet`` is the clip of the next step.

**What is counted** (the accounting's input, :func:`client_epsilons`). Each client's
*releases*: in local mode every upload the server folds in (a result the server discards,
late or timed out, was sent all the same but is never seen here, so the scenario layer
refuses local DP with settings that discard results,
:func:`fedclock.scenarios.privacy_accounting.run_privacy_problem`); in central mode every upload
folded into a global step, counted when it is folded in (for a buffer, before the flush
that releases it: conservative by at most the uploads still buffered). The number of global
steps is counted too (the releases of the run's sampled mechanism).

**Accounting** (:class:`Accounting`, chosen by the scenario builder from how clients are
chosen, never by the algorithm): ``per_client`` composes each client's own releases, ``k``
Gaussian mechanisms of multiplier ``z``, with the PLD accountant of ``dp_accounting``
(:func:`fedclock.algorithms.dp.cumulative_epsilon`, tight for Gaussian compositions; no
amplification by sampling claimed). ``sampled_fixed_size`` (central DP, sync rounds whose
cohort is a uniform sample of ``K`` of the ``N`` clients without replacement) composes the
``T`` global steps as sampled Gaussian mechanisms with ``dp_accounting``'s RDP accountant:
``SampledWithoutReplacementDpEvent(N, K, GaussianDpEvent(z / 2))`` under the replace-one
relation, the only relation the library supports for sampling without replacement (Wang,
Balle and Kasiviswanathan, AISTATS 2019, as implemented there); under replace-one the sum's
sensitivity is ``2C``, hence the multiplier ``z C / 2C = z / 2``. That epsilon holds for every
client, whether or not it was picked. The two rules bound different relations: a
replace-one epsilon may exceed the add/remove epsilon of a client that was rarely picked
(with 2 of 6 clients a round, 4 steps at ``z = 1.1`` give 15.6 sampled against 7.9 for a
client's 4 own releases under add/remove; the same 4 releases under replace-one give 19.4),
so compare runs under one rule (``fedclock compare`` and ``metrics.parquet`` name it through
``dp_amplified``). Local DP is never amplified: the server sees who uploaded.

**Metrics** (:meth:`PrivateUploads.server_metrics`, a row of ``metrics.parquet``):
``dp_epsilon`` (the largest client's epsilon at ``privacy.delta``), ``dp_delta``,
``dp_uploads_max``, ``dp_clipped_fraction`` (of the uploads in the latest global step, those
whose update norm exceeded ``C``: a measurement of the simulator, which the server of a real
local-DP system would not see), ``dp_noise_std`` (the per-coordinate noise: ``z * 2C`` per
upload in local mode, ``z * C`` on the sum in central mode, ``z_Delta * C_t`` with adaptive
clipping, for the next step), ``dp_clip`` (the clip of the next step) and ``dp_amplified``
(1 under ``sampled_fixed_size``, else 0). The rule and its reason are written to the run's
``privacy.json`` by the scenario layer (:func:`Accounting.record`). Per-client epsilons
and releases go to ``clients.parquet`` (:meth:`PrivateUploads.client_privacy`).
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Annotated, Any, Literal, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedclock.algorithms.layer_mixin import AlgorithmLayer
from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ClientResult, EvalResult, ServerState, \
    Tensors
from fedclock.algorithms.dp import SENSITIVITY_PER_CLIP, clip_to_norm, count_uploads, cumulative_epsilon

CLIPPED = "privacy.clipped"
"""Upload key: 1 when the client's update was longer than its clip. With a fixed clip a
simulator measurement for ``dp_clipped_fraction``, not charged; with adaptive clipping the
client's bit, charged one byte. The algorithm never sees it."""
RELEASES = "privacy.releases"
"""Server-state tensor of per-client release counts (int64, indexed by client id)."""
STEPS = "privacy.steps"
"""``state.extra`` key: global steps (noised releases of the aggregate) so far."""
PENDING = "privacy.pending"
"""``state.extra`` key: ``[uploads, clipped]`` folded in since the last global step."""
LAST = "privacy.last"
"""``state.extra`` key: ``[uploads, clipped]`` of the latest global step."""
CLIP = "privacy.clip"
"""Adaptive clipping: ``state.extra`` key and payload key (float32, one value) of the current
clip ``C_t``."""
BITS = "privacy.bits"
"""Adaptive clipping: ``state.extra`` key of the noisy count of unclipped updates folded in
since the last global step."""

MIN_NOISE_MULTIPLIER = 0.1
"""Smallest ``privacy.noise_multiplier``: one Gaussian release at ``z = 0.1`` already spends
epsilon 92 at delta 1e-5, two 159 (no privacy to speak of), and the PLD accountant's
support grows as ``z`` shrinks (two releases at ``z = 0.02`` took 17 s, ``1e-9`` fails)."""

A = TypeVar("A", bound=Algorithm)



class BudgetGroup(BaseModel):
    """One entry of ``privacy.budget.clients``: these clients' own epsilon."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    ids: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="client ids")
    epsilon: float = Field(gt=0, le=1e6, description="epsilon each of these clients may spend")


class PrivacyBudget(BaseModel):
    """``privacy.budget``: the (epsilon, delta) each client may spend over the run; groups of
    clients may have their own epsilon (``clients``), at the same delta."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    epsilon: float = Field(gt=0, le=1e6, description="epsilon each client may spend")
    delta: float = Field(gt=0, lt=1, description="delta of the budget (the spent epsilon is reported at it)")
    clients: list[BudgetGroup] = Field(default_factory=list, description="[{ids, epsilon}]: other budgets for "
                                       "these clients (a client in no group has epsilon)")

    @model_validator(mode="after")
    def _one_budget_per_client(self) -> "PrivacyBudget":
        seen: dict[int, int] = {}
        for i, group in enumerate(self.clients):
            for c in group.ids:
                if c in seen:
                    raise ValueError(f"clients[{i}].ids: client {c} already has a budget in clients[{seen[c]}]")
                seen[c] = i
        return self

    def epsilons(self, num_clients: int) -> list[float]:
        """Each client's epsilon (ids at or beyond ``num_clients`` are the loader's to refuse)."""
        out = [self.epsilon] * num_clients
        for group in self.clients:
            for c in group.ids:
                if c < num_clients:
                    out[c] = group.epsilon
        return out


class AdaptiveClip(BaseModel):
    """``privacy.adaptive``: quantile clipping after Andrew et al. (NeurIPS 2021), central mode
    (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    target_quantile: float = Field(default=0.5, gt=0, lt=1, description="gamma: share of the updates the clip "
                                   "should leave unclipped")
    learning_rate: float = Field(default=0.2, gt=0, le=10, description="eta_C of the geometric update "
                                 "C <- C exp(-eta_C (b - gamma))")
    bit_noise: float = Field(gt=0, le=1e6, description="sigma_b: noise standard deviation on the sum of one step's "
                             "unclipped-bits (Andrew et al. suggest the expected uploads per step / 20)")


class PrivacyConfig(BaseModel):
    """The ``privacy:`` section of a scenario: clipping, the Gaussian noise and where it is
    added, and the delta at which epsilon is reported (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["local", "central"] = Field(description="local: each client noises its upload (replace-one, "
                                              "sensitivity 2C); central: the trusted server noises the sum of a "
                                              "step's clipped updates (add/remove one client, sensitivity C)")
    clip: float = Field(gt=0, le=1e30, description="L2 norm C each client clips its update to")
    noise_multiplier: float = Field(ge=MIN_NOISE_MULTIPLIER, le=1e6, description="z: noise standard deviation "
                                    "per unit of L2 sensitivity (at least 0.1: one release at 0.1 already spends "
                                    "epsilon 92 at delta 1e-5)")
    delta: float = Field(default=1e-5, gt=0, lt=1, description="delta at which the spent epsilon is reported "
                         "(with a budget: the budget's delta)")
    budget: PrivacyBudget | None = Field(default=None, description="{epsilon, delta} each client may spend: a "
                                         "client whose next upload would exceed it is retired")
    adaptive: AdaptiveClip | None = Field(default=None, description="central mode: clip adapted to a quantile of "
                                          "the update norms, clip being its initial value (unset: fixed clip)")

    @model_validator(mode="after")
    def _adaptive_is_central(self) -> "PrivacyConfig":
        """Adaptive clipping spends part of the central noise on the clip's estimate."""
        if self.adaptive is None:
            return self
        if self.mode != "central":
            raise ValueError("adaptive: quantile clipping needs mode: central (a client's clip would depend on the "
                             "other clients' updates)")
        if 2 * self.adaptive.bit_noise <= self.noise_multiplier:
            raise ValueError(f"adaptive.bit_noise: must exceed noise_multiplier / 2 = {self.noise_multiplier / 2:g} "
                             f"(the bits' share of the privacy would take all of it; got {self.adaptive.bit_noise:g})")
        return self

    @property
    def delta_multiplier(self) -> float:
        """The noise multiplier of the updates' sum: ``z`` with a fixed clip; with adaptive
        clipping ``z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2``, so that the updates' and the bits'
        Gaussian mechanisms together are one of multiplier ``z`` (Andrew et al. 2021)."""
        if self.adaptive is None:
            return self.noise_multiplier
        return (self.noise_multiplier ** -2 - (2 * self.adaptive.bit_noise) ** -2) ** -0.5

    @model_validator(mode="before")
    @classmethod
    def _budget_sets_delta(cls, data: Any) -> Any:
        """With a budget, epsilon is reported at the budget's delta (a different ``delta`` is
        a mistake)."""
        budget_delta = data.get("budget", {}).get("delta") if isinstance(data, dict) and \
            isinstance(data.get("budget"), dict) else None
        if isinstance(budget_delta, float | int) and 0 < budget_delta < 1:  # else the budget's field says it
            if "delta" in data and data["delta"] != data["budget"]["delta"]:
                raise ValueError(f"delta: with a budget, epsilon is reported at budget.delta "
                                 f"({data['budget']['delta']}); remove delta (got {data['delta']})")
            return {**data, "delta": data["budget"]["delta"]}
        return data

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of what is noised: ``2C`` (local, one upload), ``C`` (central, the sum)."""
        return SENSITIVITY_PER_CLIP * self.clip if self.mode == "local" else self.clip

    @property
    def noise_std(self) -> float:
        """Per-coordinate standard deviation of the noise: ``z * 2C`` on each upload (local, the
        same expression as :func:`fedclock.algorithms.dp.noise_std`), ``z * C`` on the sum (central)."""
        if self.mode == "local":
            return self.noise_multiplier * SENSITIVITY_PER_CLIP * self.clip
        return self.delta_multiplier * self.clip

    def sum_noise_std(self, clip: float) -> float:
        """Central mode: the per-coordinate noise on the sum of updates clipped to ``clip``."""
        return self.delta_multiplier * clip


@dataclasses.dataclass(frozen=True)
class Accounting:
    """How the spent epsilon is computed, chosen by the scenario builder from how clients are
    chosen (see the module's docstring): ``rule`` and the reason it applies, and for
    ``sampled_fixed_size`` the population ``N`` and the cohort ``K``."""

    rule: Literal["sampled_fixed_size", "per_client"]
    reason: str
    population: int = 0
    cohort: int = 0

    def record(self, delta: float) -> dict[str, Any]:
        """The rule, its reason, ``N``, ``K`` and the reporting ``delta`` as plain values (the
        run's ``privacy.json``)."""
        return {"rule": self.rule, "reason": self.reason, "population": self.population, "cohort": self.cohort,
                "delta": delta}

    def __post_init__(self) -> None:
        if self.rule == "sampled_fixed_size" and not 0 < self.cohort < self.population:
            raise ValueError(f"sampled_fixed_size accounting needs 0 < cohort < population "
                             f"(got {self.cohort} of {self.population})")


@lru_cache(maxsize=4096)
def sampled_epsilon(noise_multiplier: float, population: int, cohort: int, steps: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``steps`` central-DP steps whose cohort is ``cohort`` of
    ``population`` clients drawn uniformly without replacement, each adding noise ``z C`` to
    the sum: ``dp_accounting``'s RDP accountant, replace-one relation, on
    ``SampledWithoutReplacementDpEvent(N, K, GaussianDpEvent(z / 2))`` (sensitivity ``2C``
    under replace-one). Zero steps spend nothing."""
    if steps <= 0:
        return 0.0
    import dp_accounting  # imported on use: it pulls in SciPy

    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population, cohort, dp_accounting.GaussianDpEvent(noise_multiplier / SENSITIVITY_PER_CLIP))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return float(accountant.get_epsilon(delta))


def client_epsilons(config: PrivacyConfig, accounting: Accounting, releases: list[int], steps: int) -> list[float]:
    """Each client's epsilon at ``config.delta``: its own ``releases`` composed (``per_client``,
    PLD), or the run's ``steps`` sampled mechanisms, the same for every client
    (``sampled_fixed_size``, RDP)."""
    if accounting.rule == "sampled_fixed_size":
        eps = sampled_epsilon(config.noise_multiplier, accounting.population, accounting.cohort, steps, config.delta)
        return [eps] * len(releases)
    by_count = {k: cumulative_epsilon(config.noise_multiplier, k, config.delta) for k in set(map(int, releases))}
    return [by_count[int(k)] for k in releases]


def _float32(value: float) -> float:
    """``value`` rounded to float32 (the clip travels to the clients as float32, and the
    server clips again with exactly that value)."""
    return float(torch.tensor(value, dtype=torch.float32))


def adapted_clip(clip: float, unclipped: float, adaptive: AdaptiveClip) -> float:
    """The next clip of quantile clipping (Andrew et al. 2021, geometric update):
    ``C exp(-eta_C (b - gamma))`` with ``b`` the step's noisy share of unclipped updates,
    rounded to float32."""
    return _float32(clip * math.exp(-adaptive.learning_rate * (unclipped - adaptive.target_quantile)))


MAX_BUDGET_UPLOADS = 1 << 20
"""Most releases :func:`uploads_within` looks for (a run with more uploads per client is
beyond any simulation here)."""


@lru_cache(maxsize=256)
def uploads_within(noise_multiplier: float, epsilon: float, delta: float) -> int:
    """The most releases ``k`` of one client whose per-client composition
    (:func:`~fedclock.algorithms.dp.cumulative_epsilon`, the accountant the run reports with)
    stays within the budget: ``epsilon(k) <= epsilon < epsilon(k + 1)`` at ``delta`` (0: not
    even one; at most :data:`MAX_BUDGET_UPLOADS`). Epsilon grows with ``k``, so a doubling
    then a bisection finds it."""
    def within(k: int) -> bool:
        return cumulative_epsilon(noise_multiplier, k, delta) <= epsilon

    if not within(1):
        return 0
    lo, hi = 1, 2
    while hi < MAX_BUDGET_UPLOADS and within(hi):
        lo, hi = hi, 2 * hi
    if hi >= MAX_BUDGET_UPLOADS and within(MAX_BUDGET_UPLOADS):
        return MAX_BUDGET_UPLOADS
    while hi - lo > 1:  # within(lo), not within(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if within(mid) else (lo, mid)
    return lo


def privacy_problem(cls: type[Algorithm], params: Any, privacy: PrivacyConfig | None, compressed: bool,
                    vectorize: int) -> str | None:
    """A one-line error (starting with the field) when ``cls`` cannot run with this ``privacy:``
    section: its upload is not a model delta (nothing to clip), or, in central mode, its server
    step is not an equal-weight mean of the deltas (declared by the class,
    ``aggregates_deltas`` and :meth:`~fedclock.algorithms.base.Algorithm.aggregation_problem`)."""
    if privacy is None:
        return None
    if not cls.upload_is_delta:
        return (f"privacy: algorithm {cls.name!r} does not upload a model delta the server aggregates (allowed with "
                f"algorithms that declare upload_is_delta, e.g. fedavg, fedprox, fedsam, fednova, fedbuff)")
    if privacy.mode == "central":
        problem = None if cls.aggregates_deltas else "its server step is not an equal-weight mean of the deltas"
        problem = problem or cls.aggregation_problem(params)
        if problem:
            return (f"privacy.mode: central DP noises the sum of a step's updates, but algorithm {cls.name!r}: "
                    f"{problem} (allowed: local, or an algorithm that declares aggregates_deltas, e.g. fedavg, "
                    f"fedprox, fedsam, fedbuff)")
    if compressed:
        return "privacy: does not combine with upload.compression or download.compression (remove one of them)"
    if vectorize > 1:
        return "privacy: clients run one at a time with privacy (runtime.vectorize must be 1)"
    return None


class PrivateUploads(AlgorithmLayer):
    """Mixin placed before an algorithm's class by :func:`with_privacy` (see the module)."""

    privacy: PrivacyConfig
    accounting: Accounting

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as (algorithm class, params, model factory, settings): the class made by
        :func:`with_privacy` is rebuilt on the other side, never looked up by name."""
        inner = type(self).__mro__[2]
        return _rebuild, (inner, self.params, self.model_factory, self.num_clients, self.server_optimizer,
                          self.privacy, self.accounting, self.stateless_clients)

    def init_server(self, rng: torch.Generator) -> ServerState:
        """The algorithm's initial state; with adaptive clipping the clip starts at ``clip``."""
        state: ServerState = super().init_server(rng)
        if self.privacy.adaptive is None:
            return state
        return state.evolve(extra={**state.extra, CLIP: _float32(self.privacy.clip)})

    def clip_at(self, state: ServerState) -> float:
        """The clip ``C_t`` of the next step (``privacy.clip`` unless adaptive clipping moved it)."""
        return float(state.extra.get(CLIP, self.privacy.clip))

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        """The algorithm's payload; with adaptive clipping also the current clip (4 bytes)."""
        payload: Tensors = super().payload_for(state, client)
        if self.privacy.adaptive is None:
            return payload
        return {**payload, CLIP: torch.tensor([self.clip_at(state)], dtype=torch.float32)}

    def download_bytes(self) -> int:
        return int(super().download_bytes()) + (4 if self.privacy.adaptive is not None else 0)

    def upload_bytes(self) -> int:
        """The algorithm's upload; with adaptive clipping also the one-byte unclipped bit (the
        clipping flag is otherwise a simulator measurement, not charged)."""
        return int(super().upload_bytes()) + (1 if self.privacy.adaptive is not None else 0)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        """The algorithm's update, its ``"delta"`` clipped to ``C`` (the payload's with
        adaptive clipping) on the client and, in local mode, noised with ``N(0, (z 2C)^2)``
        from ``rng`` after the local work's draws."""
        inner = {k: v for k, v in payload.items() if k != CLIP}
        result: ClientResult = super().client_update(inner, client_state, data, rng)
        cfg = self.privacy
        clip = float(payload[CLIP][0]) if CLIP in payload else cfg.clip
        delta = result.upload["delta"].detach().to("cpu", torch.float32)
        clipped = clip_to_norm(delta, clip)
        if cfg.mode == "local":
            noise = torch.randn(clipped.shape, generator=rng, dtype=torch.float32)
            clipped = clipped + cfg.noise_std * noise
        flag = torch.tensor([float(delta.norm()) > clip], dtype=torch.uint8)
        return dataclasses.replace(result, upload={**result.upload, "delta": clipped, CLIPPED: flag})

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        out: EvalResult = super().evaluate_client({k: v for k, v in payload.items() if k != CLIP}, client_state,
                                                  data, batch_size)
        return out

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        """Count the releases, add the central noise (central mode; with adaptive clipping
        the updates are clipped again to the current ``C_t``, then the bits are noised after
        the updates) and run the algorithm's own rule on the arrivals without the clipping flag."""
        cfg = self.privacy
        flags = [int(a.upload[CLIPPED].sum()) if CLIPPED in a.upload else 0 for a in arrivals]
        ready = []
        clip = self.clip_at(state)
        if cfg.mode == "central" and arrivals:
            k = self.deltas_per_step(arrivals)
            share = cfg.sum_noise_std(clip) / math.sqrt(k)
            for a in arrivals:
                delta = a.upload["delta"].to(torch.float32)
                if cfg.adaptive is not None:
                    delta = clip_to_norm(delta, clip)
                noisy = delta + share * torch.randn(delta.shape, generator=rng, dtype=torch.float32)
                upload = {key: v for key, v in a.upload.items() if key != CLIPPED}
                ready.append(dataclasses.replace(a, upload={**upload, "delta": noisy}, num_samples=1, steps=1))
        else:
            ready = [dataclasses.replace(a, upload={key: v for key, v in a.upload.items() if key != CLIPPED})
                     for a in arrivals]
        bits = float(state.extra.get(BITS, 0.0))
        if cfg.adaptive is not None and arrivals:
            bit_share = cfg.adaptive.bit_noise / math.sqrt(self.deltas_per_step(arrivals))
            for flag in flags:
                bits += (1 - flag) + bit_share * float(torch.randn(1, generator=rng, dtype=torch.float64))
        new, changed = super().server_receive(state, ready, rng)
        pending = [a + b for a, b in zip(state.extra.get(PENDING, [0, 0]), [len(arrivals), sum(flags)])]
        extra = {**new.extra, STEPS: int(state.extra.get(STEPS, 0)) + int(bool(changed)),
                 PENDING: [0, 0] if changed else pending, LAST: pending if changed else state.extra.get(LAST, [0, 0])}
        if cfg.adaptive is not None:
            extra[BITS] = 0.0 if changed else bits
            extra[CLIP] = adapted_clip(clip, bits / pending[0], cfg.adaptive) if changed and pending[0] else clip
        releases = state.tensors.get(RELEASES)
        if arrivals:
            releases = count_uploads(releases, [a.client for a in arrivals])
        tensors = {**new.tensors} if releases is None else {**new.tensors, RELEASES: releases}
        return dataclasses.replace(new, tensors=tensors, extra=extra), changed

    def client_privacy(self, state: ServerState) -> dict[str, list[Any]]:
        """Per-client ``dp_releases`` and ``dp_epsilon`` (at ``privacy.delta``) of ``state``,
        for the ``num_clients`` of the run (:func:`client_epsilons`)."""
        n = int(self.num_clients or 0)
        counts = state.tensors.get(RELEASES)
        releases = [0] * n
        if counts is not None:
            for c, k in enumerate(counts.tolist()[:n]):
                releases[c] = int(k)
        eps = client_epsilons(self.privacy, self.accounting, releases, int(state.extra.get(STEPS, 0)))
        return {"dp_releases": releases, "dp_epsilon": eps}

    def server_metrics(self, state: ServerState) -> dict[str, float]:
        """The algorithm's own numbers, then the privacy spent so far (see the module)."""
        out: dict[str, float] = dict(super().server_metrics(state))
        counts = state.tensors.get(RELEASES)
        most = int(counts.max()) if counts is not None and counts.numel() else 0
        # epsilon grows with the releases: the client with the most has the largest (per_client)
        eps = client_epsilons(self.privacy, self.accounting, [most], int(state.extra.get(STEPS, 0)))[0]
        uploads, clipped = state.extra.get(LAST, [0, 0])
        out.update({"dp_epsilon": eps, "dp_delta": self.privacy.delta, "dp_uploads_max": float(most),
                    "dp_clipped_fraction": clipped / uploads if uploads else float("nan"),
                    "dp_noise_std": self.privacy.noise_std if self.privacy.mode == "local" else
                    self.privacy.sum_noise_std(self.clip_at(state)), "dp_clip": self.clip_at(state),
                    "dp_amplified": float(self.accounting.rule == "sampled_fixed_size")})
        return out


@lru_cache(maxsize=None)
def _private_class(cls: type[Algorithm]) -> type[Algorithm]:
    """``cls`` with :class:`PrivateUploads` in front (one class per algorithm class)."""
    body: dict[str, Any] = {"__doc__": cls.__doc__, "__qualname__": f"PrivateUploads[{cls.__qualname__}]",
                            "vectorizable": False, "objectives": cls.objectives,
                            "stateless_clients": cls.stateless_clients, "upload_is_delta": cls.upload_is_delta,
                            "upload_is_model": False, "per_token_targets": cls.per_token_targets}
    return type(cls.__name__, (PrivateUploads, cls), body)


def _rebuild(cls: type[Algorithm], params: Any, factory: Any, num_clients: int | None, server_optimizer: Any,
             privacy: PrivacyConfig, accounting: Accounting, stateless: bool) -> Algorithm:
    """The unpickled side of :meth:`PrivateUploads.__reduce__`."""
    private: Any = _private_class(cls)(params, factory)
    private.num_clients, private.server_optimizer = num_clients, server_optimizer
    private.privacy, private.accounting, private.stateless_clients = privacy, accounting, stateless
    out: Algorithm = private
    return out


def with_privacy(algorithm: A, privacy: PrivacyConfig | None, accounting: Accounting) -> A:
    """``algorithm`` itself without a ``privacy:`` section; else an instance of its class with
    :class:`PrivateUploads` in front, with the same params, model factory, population size and
    server optimizer (the loader has checked :func:`privacy_problem`)."""
    if privacy is None:
        return algorithm
    out: Any = _rebuild(type(algorithm), algorithm.params, algorithm.model_factory, algorithm.num_clients,
                        algorithm.server_optimizer, privacy, accounting, algorithm.stateless_clients)
    result: A = out
    return result
