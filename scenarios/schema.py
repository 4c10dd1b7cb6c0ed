"""Typed, validated scenario model.

A scenario file is YAML; `fedclock.scenarios.loader` turns it into these frozen pydantic
models. Every section forbids unknown keys, so a typo is reported with the field's dotted
path and the fields that are allowed there. Algorithm hyper-parameters live beside the
algorithm's name (``algorithm: {name: fedasync, alpha: 0.6}``) and are validated against
that algorithm's own typed ``Params`` model by the loader.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, model_validator


class StrictModel(BaseModel):
    """Frozen model that rejects unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(gt=0, le=1)]


# --------------------------------------------------------------------------- data
class IIDPartition(StrictModel):
    """Samples shuffled and split evenly."""

    type: Literal["iid"] = "iid"


class DirichletPartition(StrictModel):
    """Per-class proportions drawn from Dir(alpha) over clients (Hsu et al. 2019)."""

    type: Literal["dirichlet"]
    alpha: PositiveFloat = 0.5
    min_samples: Annotated[int, Field(ge=1)] = 4


class PathologicalPartition(StrictModel):
    """Each client holds exactly ``classes_per_client`` classes (McMahan et al. 2017 style):
    classes are dealt round-robin, so every class is held by about the same number of
    clients, and each class's samples are split evenly among its holders."""

    type: Literal["pathological"]
    classes_per_client: Annotated[int, Field(ge=1)]


class ClassSamplingPartition(StrictModel):
    """SPFL/PLGA scheme: each client draws ``classes_per_client`` classes at random (non-IID);
    with ``shared: true`` all clients share one draw (the paper's IID variant)."""

    type: Literal["class_sampling"]
    classes_per_client: Annotated[int, Field(ge=1)]
    shared: bool = False


class NaturalPartition(StrictModel):
    """Use the dataset's own per-client split (e.g. Synthetic(alpha, beta))."""

    type: Literal["natural"]


PartitionConfig = Annotated[
    Union[IIDPartition, DirichletPartition, PathologicalPartition, ClassSamplingPartition, NaturalPartition],
    Field(discriminator="type"),
]

DatasetName = Literal["digits", "synthetic", "mnist", "fashion_mnist", "emnist", "cifar10", "cifar100",
                      "digit_styles", "digit_domains", "office_home", "adaptiope"]


class DomainsConfig(StrictModel):
    """Multi-domain federation (``digit_styles``, ``digit_domains``, ``office_home``,
    ``adaptiope``; see :mod:`fedclock.scenarios.domains`): clients are dealt to the domains
    in equal groups, and ``partition`` splits each domain among its group."""

    names: Annotated[list[str], Field(min_length=1)] | None = Field(
        default=None, description="domains to use, default all of the source's")
    samples_per_domain: Annotated[int, Field(ge=2)] | None = Field(
        default=None, description="training pool size of every domain, default the smallest domain's")
    test_samples_per_domain: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="cap on every domain's test set, default no cap")


class DatasetConfig(StrictModel):
    """Which data, where it lives, and how it is split among clients."""

    name: DatasetName = "digits"
    root: Path | None = Field(default=None, description="data folder; default $FEDCLOCK_DATA or ~/.fedclock/data")
    download: bool = False
    image_size: Annotated[int, Field(ge=4, le=512)] | None = Field(
        default=None, description="resize square images to this side (e.g. digits to 28)")
    emnist_split: Literal["balanced", "byclass", "bymerge", "digits", "letters", "mnist"] = "balanced"
    synthetic_alpha: NonNegativeFloat = 1.0
    synthetic_beta: NonNegativeFloat = 1.0
    synthetic_features: Annotated[int, Field(ge=1)] = 60
    synthetic_classes: Annotated[int, Field(ge=2)] = 10
    synthetic_samples: Annotated[int, Field(ge=10)] = 20000
    max_train_samples: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="keep a random subset of the training pool (quick variants)")
    global_test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    client_test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    partition: PartitionConfig = Field(default_factory=IIDPartition)
    domains: DomainsConfig | None = Field(default=None, description="multi-domain sources only")

    @model_validator(mode="after")
    def _natural_only_for_synthetic(self) -> "DatasetConfig":
        if isinstance(self.partition, NaturalPartition) and self.name != "synthetic":
            raise ValueError("partition.type: 'natural' needs a dataset with its own client split (allowed with: synthetic)")
        from fedclock.scenarios.domain_names import DOMAINS

        if self.domains is not None and self.name not in DOMAINS:
            raise ValueError(f"domains: {self.name} is not a multi-domain source (allowed with: {', '.join(DOMAINS)})")
        if self.domains is not None and self.domains.names is not None:
            for d in self.domains.names:
                if d not in DOMAINS[self.name]:
                    raise ValueError(f"domains.names: unknown domain {d!r} of {self.name} "
                                     f"(allowed: {', '.join(DOMAINS[self.name])})")
            if len(set(self.domains.names)) != len(self.domains.names):
                raise ValueError("domains.names: a domain is listed twice")
        return self


class ModelConfig(StrictModel):
    """Network architecture; input shape and classes come from the dataset."""

    name: Literal["mlp", "cnn5", "spfl_cnn", "logistic", "resnet18_gn", "conv_gn"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [128], description="MLP hidden widths")


# --------------------------------------------------------------------------- devices
class ConstantDist(StrictModel):
    dist: Literal["constant"]
    value: PositiveFloat


class UniformDist(StrictModel):
    dist: Literal["uniform"]
    low: PositiveFloat
    high: PositiveFloat

    @model_validator(mode="after")
    def _ordered(self) -> "UniformDist":
        if self.high < self.low:
            raise ValueError(f"high: must be >= low ({self.low}) (got {self.high})")
        return self


class LogUniformDist(UniformDist):
    dist: Literal["loguniform"]  # type: ignore[assignment]


class LogNormalDist(StrictModel):
    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat


class ChoiceDist(StrictModel):
    dist: Literal["choice"]
    values: Annotated[list[PositiveFloat], Field(min_length=1)]
    weights: list[NonNegativeFloat] | None = None

    @model_validator(mode="after")
    def _weights_match(self) -> "ChoiceDist":
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(f"weights: has {len(self.weights)} entries, values has {len(self.values)}")
            if not math.fsum(self.weights) > 0:
                raise ValueError("weights: must not all be zero")
        return self


Distribution = Union[
    PositiveFloat,
    Annotated[
        Union[ConstantDist, UniformDist, LogUniformDist, LogNormalDist, ChoiceDist],
        Field(discriminator="dist"),
    ],
]


class DeviceDistributions(StrictModel):
    """How each client's device is drawn. ``compute`` is in unit-cost samples per second
    (an algorithm whose step costs two passes takes twice as long); bandwidths in megabits
    per second; latency in seconds, paid once each way."""

    compute: Distribution = 200.0
    down_mbps: Distribution = 50.0
    up_mbps: Distribution = 10.0
    latency_s: Union[NonNegativeFloat, Annotated[
        Union[ConstantDist, UniformDist, LogUniformDist, LogNormalDist, ChoiceDist],
        Field(discriminator="dist")]] = 0.05


# --------------------------------------------------------------------------- availability
class AlwaysAvailable(StrictModel):
    type: Literal["always"] = "always"


class PeriodicMissing(StrictModel):
    """SPFL/PLGA schedule: available for one server round, then missing ``period`` rounds."""

    type: Literal["periodic_missing"]
    period: Annotated[int, Field(ge=1)]
    offset: Annotated[int, Field(ge=0)] = 0


class MarkovOnOff(StrictModel):
    """Two-state on/off process in virtual time with exponential up and down durations."""

    type: Literal["markov"]
    mean_up_s: PositiveFloat
    mean_down_s: PositiveFloat
    start: Literal["up", "down", "stationary"] = "stationary"


AvailabilityConfig = Annotated[
    Union[AlwaysAvailable, PeriodicMissing, MarkovOnOff], Field(discriminator="type")]


class ClientOverride(StrictModel):
    """Explicit values for some clients; unset fields keep the drawn values."""

    ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    compute: PositiveFloat | None = None
    down_mbps: PositiveFloat | None = None
    up_mbps: PositiveFloat | None = None
    latency_s: NonNegativeFloat | None = None
    availability: AvailabilityConfig | None = None


class PopulationConfig(StrictModel):
    num_clients: Annotated[int, Field(ge=1, le=10_000_000)] = 10
    devices: DeviceDistributions = Field(default_factory=DeviceDistributions)
    availability: AvailabilityConfig = Field(default_factory=AlwaysAvailable)
    clients: list[ClientOverride] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ids_in_range(self) -> "PopulationConfig":
        for i, group in enumerate(self.clients):
            for cid in group.ids:
                if cid >= self.num_clients:
                    raise ValueError(
                        f"clients[{i}].ids: client {cid} does not exist (allowed: 0..{self.num_clients - 1})")
        return self


# --------------------------------------------------------------------------- protocol
class SyncMode(StrictModel):
    """Barrier rounds over a sampled cohort of available, idle clients."""

    type: Literal["sync"] = "sync"
    cohort_size: Annotated[int, Field(ge=1)] | None = None
    cohort_fraction: Fraction | None = None
    deadline_s: PositiveFloat | None = Field(default=None, description="round closes this long after it opens")
    late_results: Literal["drop", "include"] = Field(
        default="drop", description="a result arriving after its round closed: dropped, or averaged into the round "
        "that closes after it arrives")

    @model_validator(mode="after")
    def _one_cohort_rule(self) -> "SyncMode":
        if self.cohort_size is not None and self.cohort_fraction is not None:
            raise ValueError("cohort_size: set cohort_size or cohort_fraction, not both")
        if self.late_results == "include" and self.deadline_s is None:
            raise ValueError("late_results: 'include' needs deadline_s (without a deadline nothing is late)")
        return self


class AsyncMode(StrictModel):
    """A fixed number of tasks in flight; each completion frees a slot for an idle client."""

    type: Literal["async"]
    concurrency: Annotated[int, Field(ge=1)] = 4


ModeConfig = Annotated[Union[SyncMode, AsyncMode], Field(discriminator="type")]


class StopConfig(StrictModel):
    """The run stops at the first condition met."""

    rounds: Annotated[int, Field(ge=1)] | None = Field(default=None, description="sync rounds")
    versions: Annotated[int, Field(ge=1)] | None = Field(default=None, description="server versions")
    virtual_time_s: PositiveFloat | None = None
    target_accuracy: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _bounded(self) -> "StopConfig":
        if self.rounds is None and self.versions is None and self.virtual_time_s is None:
            raise ValueError("set at least one of rounds, versions, virtual_time_s")
        return self


class LinearEvalConfig(StrictModel):
    """Final linear evaluation of self-supervised runs (:mod:`fedclock.scenarios.linear_eval`)."""

    epochs: Annotated[int, Field(ge=1)] = 100
    lr: PositiveFloat = Field(default=0.01, description="Adam learning rate of the linear classifier")
    batch_size: Annotated[int, Field(ge=1)] = 256


class EvaluationConfig(StrictModel):
    every: Annotated[int, Field(ge=1)] = Field(default=1, description="server versions between evaluations")
    personalized: bool = True
    batch_size: Annotated[int, Field(ge=1)] = 2048
    linear: LinearEvalConfig = Field(default_factory=LinearEvalConfig)


class RuntimeConfig(StrictModel):
    """Where the real compute runs. Results never depend on these settings."""

    backend: Literal["ray", "inline"] = "ray"
    address: str | None = Field(default=None, description="Ray cluster address; default starts a local Ray")
    num_actors: Annotated[int, Field(ge=1)] | None = Field(default=None, description="default min(clients, CPUs)")
    placement: Literal["pooled", "dedicated"] | None = Field(
        default=None, description="default: dedicated when every client gets an actor, else pooled")
    num_cpus: PositiveFloat = 1.0
    num_gpus: NonNegativeFloat = 0.0
    threads_per_actor: Annotated[int, Field(ge=1)] = 1
    device: Literal["cpu", "cuda"] = "cpu"


class OutputConfig(StrictModel):
    dir: Path | None = Field(default=None, description="default results/<scenario name>")
    flush_every_s: NonNegativeFloat = 2.0
    progress: bool = True


class AlgorithmConfig(BaseModel):
    """An algorithm name and its typed hyper-parameters (validated by the loader)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    params: SerializeAsAny[BaseModel]


class Scenario(StrictModel):
    """One fully resolved run."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: str = ""
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    population: PopulationConfig = Field(default_factory=PopulationConfig)
    algorithm: AlgorithmConfig
    mode: ModeConfig = Field(default_factory=SyncMode)
    stop: StopConfig
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)

    @model_validator(mode="after")
    def _mode_fits(self) -> "Scenario":
        if isinstance(self.mode, AsyncMode) and self.stop.rounds is not None:
            raise ValueError("stop.rounds: counts sync rounds; in async mode use stop.versions or stop.virtual_time_s")
        if isinstance(self.mode, SyncMode) and self.mode.cohort_size is not None \
                and self.mode.cohort_size > self.population.num_clients:
            raise ValueError(f"mode.cohort_size: {self.mode.cohort_size} exceeds population.num_clients "
                             f"({self.population.num_clients})")
        if isinstance(self.mode, AsyncMode) and self.mode.concurrency > self.population.num_clients:
            raise ValueError(f"mode.concurrency: {self.mode.concurrency} exceeds population.num_clients "
                             f"({self.population.num_clients})")
        if self.runtime.placement == "dedicated" and self.runtime.num_actors not in (None, self.population.num_clients):
            raise ValueError(f"runtime.num_actors: dedicated placement gives one actor per client "
                             f"({self.population.num_clients}); leave it unset or use placement 'pooled'")
        return self
