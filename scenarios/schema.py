"""Typed, validated scenario model.

A scenario file is YAML; `fedclock.scenarios.loader` turns it into these frozen pydantic
models. Every section forbids unknown keys, so a typo is reported with the field's dotted
path and the fields that are allowed there. Algorithm hyper-parameters live beside the
algorithm's name (``algorithm: {name: fedasync, alpha: 0.6}``) and are validated against
that algorithm's own typed ``Params`` model by the loader.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializeAsAny, ValidationInfo, model_validator

# The sections the clock and the runtime act on are models of their own layers; this module composes
# them into the file format (import them from their own modules).
from fedclock.algorithms.adapted import AdaptedEvaluation
from fedclock.algorithms.server_optimizers import ServerOptimizerConfig
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.algorithms.compressed import DownloadConfig, UploadConfig
from fedclock.algorithms.privacy import PrivacyConfig
from fedclock.scenarios.data.dataset_specs import (DATASETS, DATASET_NAMES, DOMAINS, FILE_DATASETS, FILE_FORMATS,
                                                   FORMAT_DATASETS, GENERATED, MULTI_DOMAIN, NATURAL_SPLIT, POOLABLE,
                                                   USER_ARRAYS)
from fedclock.scheduling.completeness_connectivity import TimeBudget, can_lose
from fedclock.scheduling.model_base import NonNegativeFloat, PositiveFloat, StrictModel
from fedclock.scheduling.modes import AsyncMode, ModeConfig, StopConfig, SyncMode
from fedclock.scenarios.data.partition_config import IIDPartition, NaturalPartition, PartitionConfig
from fedclock.scheduling.lateness import check_clients, late_map
from fedclock.scheduling.selection import SelectionConfig
from fedclock.scheduling.server_device import ServerDevice
from fedclock.scheduling.population import PopulationConfig
from fedclock.scenarios.memory_estimate import SYNTHETIC_MIN_PER_CLIENT, machine_memory, memory_problem, synthetic_bytes
from fedclock.scheduling.timeline_events import TimelineEvent, timeline_problem

__all__ = [
    "ServerOptimizerSection", "FileFormat", "GeneratedFiles", "MAX_WIDTH", "MAX_LAYERS",
    "MAX_SYNTHETIC_FEATURES", "DatasetName", "DomainsConfig", "DatasetConfig", "ModelConfig",
    "LinearEvalConfig", "EvaluationConfig", "OutputConfig", "CKAAnalysis", "AlgorithmConfig", "evaluation_problem",
    "Scenario", "ShippedModel",
]


# Upper bounds on sizes. They are far beyond what a simulation on one machine or a small cluster
# runs, and they turn a value that could never be allocated (or would never finish) into a
# one-line validation error naming the field instead of a crash in the middle of ``run``.
MAX_WIDTH = 16_384
"""Each entry of model.hidden (a 16,384 x 16,384 layer is already 1 GiB of float32)."""
MAX_LAYERS = 16
"""Entries of model.hidden."""
MAX_SYNTHETIC_FEATURES = 100_000
"""dataset.synthetic_features and dataset.synthetic_classes."""
# The number of clients and of synthetic samples has no such bound: a scenario is refused only when
# its estimated memory exceeds the machine's (scenarios/memory_estimate.py, Scenario._fits_in_memory).


# --------------------------------------------------------------------------- data
if TYPE_CHECKING:  # a name, and mypy cannot read a Literal built from a tuple
    DatasetName = str
    FileFormat = str
else:
    DatasetName = Literal[DATASET_NAMES]
    FileFormat = Literal[FILE_FORMATS + (USER_ARRAYS,)]
"""``dataset.name`` of a shipped dataset and ``dataset.format``, from their registry
(:mod:`fedclock.scenarios.data.dataset_specs`)."""


class GeneratedFiles(StrictModel):
    """``dataset.generate``: write a small data set in ``dataset.format`` from the scenario
    seed and read it back through the format's reader (quick runs and tests; no download).
    Users' sizes are log-normal around ``mean_samples`` (natural size heterogeneity). For
    ``cifar10`` (no format: its own pickles), ``users x mean_samples`` training images and
    ``test_samples`` test images (:mod:`fedclock.scenarios.data.cifar_generate`)."""

    users: Annotated[int, Field(ge=2)] = Field(
        default=20, description=f"at most {100_000:,} written in memory (formats leaf and tff_h5); user_arrays draws "
                                "any number straight to disk")
    mean_samples: Annotated[int, Field(ge=2, le=10_000)] = 40
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1
    test_samples: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        default=None, description="cifar10: images of the generated test set (default: test_fraction of all images)")


IMAGE_GENERATED: tuple[str, ...] = ("cifar10",)
"""Datasets ``dataset.generate`` writes in their own published files, without ``dataset.format``
(:mod:`fedclock.scenarios.data.cifar_generate`)."""
MAX_GENERATED_USERS = 100_000
"""Most users ``dataset.generate`` writes in a format whose writer holds every user in memory
(all but ``user_arrays``, which draws them a block at a time into the files)."""
MAX_GENERATED_IMAGES = 1_000_000
"""Most training images a generated image set may hold (3 KB each)."""


PluginName = Annotated[str, Field(min_length=1, max_length=400)]
"""A user's model or dataset: ``module:attribute`` or an entry-point name, resolved by the
loader (:mod:`fedclock.scenarios.plugins`)."""


class DomainsConfig(StrictModel):
    """Multi-domain federation (``digit_styles``, ``digit_domains``, ``office_home``,
    ``adaptiope``; see :mod:`fedclock.scenarios.data.domains`): clients are dealt to the domains
    in equal groups, and ``partition`` splits each domain among its group."""

    names: Annotated[list[str], Field(min_length=1)] | None = Field(
        default=None, description="domains to use, default all of the source's")
    samples_per_domain: Annotated[int, Field(ge=2)] | None = Field(
        default=None, description="training pool size of every domain (duplicates when a domain has fewer), "
                                  "default the average domain's")
    test_samples_per_domain: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="cap on every domain's test set, default no cap")


class DatasetConfig(StrictModel):
    """Which data, where it lives, and how it is split among clients."""

    name: DatasetName | PluginName = Field(default="digits", description="a shipped dataset, module:attribute "
                                           "(a loader of your own) or an installed entry point's name")
    root: Path | None = Field(default=None, description="data folder; default $FEDCLOCK_DATA or ~/.fedclock/data")
    download: bool = False
    image_size: Annotated[int, Field(ge=4, le=512)] | None = Field(
        default=None, description="resize square images to this side (e.g. digits to 28)")
    emnist_split: Literal["balanced", "byclass", "bymerge", "digits", "letters", "mnist"] = "balanced"
    synthetic_alpha: NonNegativeFloat = 1.0
    synthetic_beta: NonNegativeFloat = 1.0
    synthetic_features: Annotated[int, Field(ge=1, le=MAX_SYNTHETIC_FEATURES)] = 60
    synthetic_classes: Annotated[int, Field(ge=2, le=MAX_SYNTHETIC_FEATURES)] = 10
    synthetic_samples: Annotated[int, Field(ge=10)] = 20000
    synthetic_draws: Literal["client", "blocks"] = Field(
        default="client", description="synthetic: draw each client's model and samples one client per call "
        "(client) or many clients per call (blocks: other draws of the same model, about 100x faster at "
        "millions of clients)")
    mnist1d_samples: Annotated[int, Field(ge=20, le=200_000)] = Field(
        default=10_000, description="mnist1d: samples generated (global_test_fraction of them form the test set)")
    max_train_samples: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="keep a random subset of the training pool (quick variants)")
    global_test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    client_test_fraction: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.2, description="share of every client's samples held out as its own test split; 0: none "
        "(global evaluation only)")
    pool: Literal["train", "all"] = Field(
        default="train", description="train: the official training split is the pool, the official test split the "
        "global test set; all: official train + test pooled before partitioning, the union of the clients' test "
        "splits is the global test set")
    partition: PartitionConfig = Field(default_factory=IIDPartition)
    domains: DomainsConfig | None = Field(default=None, description="multi-domain sources only")
    format: FileFormat | None = Field(default=None, description="read published client files from root: leaf "
                                      "(train/ and test/ JSON), tff_h5 (TFF HDF5), fedscale_csv (client_data_mapping), "
                                      "user_arrays (per-user .npy arrays, mapped: scenarios/data/user_arrays.py)")
    generate: GeneratedFiles | None = Field(default=None, description="instead of root: generate a small data set "
                                            "in this format from the seed (quick runs)")

    @model_validator(mode="after")
    def _client_files(self) -> "DatasetConfig":
        if self.generate is not None and self.generate.users > MAX_GENERATED_USERS and self.format != USER_ARRAYS:
            raise ValueError(f"generate.users: {self.generate.users:,} users; at most {MAX_GENERATED_USERS:,} are "
                             f"generated in memory (format {USER_ARRAYS} draws any number straight to disk)")
        if self.format is None:
            if self.name in FILE_DATASETS:
                formats = [f for f, names in FORMAT_DATASETS.items() if self.name in names]
                raise ValueError(f"format: {self.name} is read from client files; set format "
                                 f"(allowed: {', '.join(formats)})")
            if self.generate is not None and self.name not in IMAGE_GENERATED:
                raise ValueError(f"generate: needs dataset.format (allowed: leaf), or dataset.name "
                                 f"{' or '.join(IMAGE_GENERATED)} (its own files)")
            if self.generate is not None:
                images = self.generate.users * self.generate.mean_samples
                if images % 5 or images > MAX_GENERATED_IMAGES:
                    raise ValueError(f"generate.users: users x mean_samples is {images} training images; {self.name} "
                                     f"writes a multiple of 5 (five batch files) up to {MAX_GENERATED_IMAGES:,}")
                if self.root is not None or self.download:
                    raise ValueError("generate: writes the data itself, so dataset.root and dataset.download are not "
                                     "read; remove them, or set dataset.generate: null to read the files under root")
            natural = self.partition if isinstance(self.partition, NaturalPartition) else None
            if natural is not None and (natural.min_samples is not None or natural.sample_clients is not None):
                raise ValueError("partition.min_samples: min_samples and sample_clients apply to client files "
                                 "(dataset.format); remove them")
            if natural is not None and natural.max_train_per_client is not None:
                raise ValueError("partition.max_train_per_client: applies to client files (dataset.format); remove it")
            return self
        if self.name not in FORMAT_DATASETS[self.format]:
            raise ValueError(f"format: {self.format} is read for {', '.join(FORMAT_DATASETS[self.format])}, "
                             f"not {self.name}")
        if self.generate is not None and self.generate.test_samples is not None:
            raise ValueError(f"generate.test_samples: applies to {', '.join(IMAGE_GENERATED)} without a format; "
                             f"{self.format} files take test_fraction of every user's samples")
        made = GENERATED[self.format]
        if self.generate is not None and self.name not in made:
            if not made:
                writes = ", or ".join(f"{f} files of {', '.join(n)}" for f, n in GENERATED.items() if n)
                raise ValueError(f"generate: generates {writes} (format is {self.format})")
            names = f"{', '.join(made[:-1])} or {made[-1]}" if len(made) > 1 else made[0]
            raise ValueError(f"generate: writes {names} files, not {self.name}")
        if self.pool == "all":
            raise ValueError("pool: client files keep every user's own train and test data; use pool: train")
        if self.format == USER_ARRAYS:
            part = self.partition
            if not isinstance(part, NaturalPartition):
                raise ValueError(f"partition.type: {USER_ARRAYS} files hold one client per user; use natural "
                                 f"(got {part.type})")
            if (part.min_samples, part.sample_clients, part.max_train_per_client) != (None, None, None):
                raise ValueError(f"partition: {USER_ARRAYS} files are mapped whole, every user a client; remove "
                                 "min_samples, sample_clients and max_train_per_client")
        return self

    @model_validator(mode="after")
    def _natural_only_for_synthetic(self) -> "DatasetConfig":
        spec = DATASETS.get(self.name)
        if isinstance(self.partition, NaturalPartition) and spec is not None and not spec.natural_split \
                and self.format is None:
            raise ValueError("partition.type: 'natural' needs a dataset with its own client split "
                             f"(allowed with: {', '.join(NATURAL_SPLIT)}, or client files: dataset.format)")
        if self.name == "synthetic" and self.image_size is not None:
            raise ValueError("image_size: synthetic data are vectors, not images; remove image_size")
        if self.name == "synthetic" and self.format is None:
            need = synthetic_bytes(self.synthetic_samples, self.synthetic_features)
            if need > machine_memory():
                raise ValueError(f"synthetic_samples: {self.synthetic_samples:,} samples x {self.synthetic_features} "
                                 f"features need about {need / 2**30:,.1f} GiB (estimated before allocating), more "
                                 f"than this machine's {machine_memory() / 2**30:,.1f} GiB of memory; lower "
                                 f"synthetic_samples or synthetic_features")
        if self.pool == "all" and self.name not in POOLABLE:
            why = "multi-domain sources keep each domain's own test set" if self.name in MULTI_DOMAIN \
                else f"{self.name} has no official train/test split"
            raise ValueError(f"pool: 'all' needs a single dataset with an official train/test split (allowed with: "
                             f"{', '.join(POOLABLE)}); {why}, use pool: train")
        if self.pool == "all" and self.client_test_fraction == 0:
            raise ValueError("client_test_fraction: pool 'all' takes the global test set from the clients' test "
                             "splits, so it must be above 0")
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


ShippedModel = Literal["mlp", "cnn5", "spfl_cnn", "spfl_cnn_padded", "logistic", "resnet18_gn", "conv_gn",
                       "leaf_cnn", "pfl_cnn", "char_lstm", "word_lstm", "word_lstm_small"]


class ModelConfig(StrictModel):
    """Network architecture; input shape and classes come from the dataset."""

    name: ShippedModel | PluginName = Field(
        default="mlp", description="a shipped model, module:attribute (a model of your own) or an entry point's name")
    hidden: Annotated[list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]], Field(max_length=MAX_LAYERS)] = Field(
        default_factory=lambda: [128], description="MLP hidden widths")


# --------------------------------------------------------------------------- evaluation and output
class LinearEvalConfig(StrictModel):
    """Final linear evaluation of self-supervised runs (:mod:`fedclock.scenarios.linear_eval`)."""

    epochs: Annotated[int, Field(ge=1)] = 100
    lr: PositiveFloat = Field(default=0.01, description="Adam learning rate of the linear classifier")
    batch_size: Annotated[int, Field(ge=1)] = 256
    probe_seeds: Annotated[int, Field(ge=1, le=100)] = Field(
        default=1, description="classifiers trained per probe on the same cached features, each with its own "
        "seed (initialization and batch order); a probe's accuracy is their mean (the first uses the probe's "
        "seed, so 1 gives the single probe)")
    style_controls: bool = Field(
        default=False, description="also probe personalization with another client's style (swapped), with zeros "
        "(zero) and with the content feature alone (content) in the same run, for algorithms whose probe has a "
        "style (FedStyle)")


class EvaluationConfig(StrictModel):
    every: Annotated[int, Field(ge=1)] = Field(default=1, description="server versions between evaluations")
    at_rounds: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=list, description="extra evaluations at these server versions, besides every `every`")
    per_client: bool = Field(default=False, description="write each client's personalized accuracy and loss at every "
                             "evaluation to client_metrics.parquet (needs personalized: true)")
    personalized: bool = True
    adapted: AdaptedEvaluation | None = Field(
        default=None, description="also score every client after `steps` local SGD steps from the global model on its "
        "own train split (adapted_accuracy_* columns; the same rule for every algorithm); default: off")
    batch_size: Annotated[int, Field(ge=1)] = 2048
    linear: LinearEvalConfig = Field(default_factory=LinearEvalConfig)


class OutputConfig(StrictModel):
    dir: Path | None = Field(default=None, description="default results/<scenario name>")
    flush_every_s: NonNegativeFloat = 2.0
    progress: bool = True
    tensorboard: bool = Field(default=False, description="also write TensorBoard scalars to <dir>/tensorboard")
    checkpoint_every: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="write a checkpoint to <dir>/checkpoints every N server versions (resume with "
        "`fedclock run --resume DIR`; a dead server actor is then survived); default: none")


class CKAAnalysis(StrictModel):
    """Linear CKA per layer between each client's local model after local training and the
    global model, after the last round or after each of ``at_rounds`` (written to cka.parquet).
    ``analysis: cka`` is short for ``analysis: {type: cka}``."""

    type: Literal["cka"]
    samples: Annotated[int, Field(ge=2)] = Field(default=256, description="inputs per client (its first training "
                                                 "samples)")
    clients: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        default=None, description="clients to analyse (default: all)")
    at_rounds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        default=None, description="measure right after these server versions (each also evaluated) instead of after "
        "the last round; version 0 is the initial model, so the clients' first round of training (FedReCo Fig. 2's "
        "'round 1' is version 0)")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: object) -> object:
        return {"type": data} if isinstance(data, str) else data


class AlgorithmConfig(BaseModel):
    """An algorithm name and its typed hyper-parameters (validated by the loader), and the
    optional server optimizer applied to its server step
    (:mod:`fedclock.algorithms.server_optimizers`)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    params: SerializeAsAny[BaseModel]
    server_optimizer: ServerOptimizerConfig | None = None


class ServerOptimizerSection(StrictModel):
    """``algorithm.server_optimizer`` on its own, as the loader validates it."""

    server_optimizer: ServerOptimizerConfig


def evaluation_problem(scenario: "Scenario") -> str | None:
    """A one-line error when ``evaluation.per_client``, ``evaluation.adapted`` or an ``at_rounds``
    list cannot be met."""
    ev = scenario.evaluation
    if ev.per_client and not ev.personalized:
        return ("evaluation.per_client: needs evaluation.personalized: true (it records each client's personalized "
                "model)")
    if ev.adapted is not None and scenario.dataset.client_test_fraction == 0:
        return ("evaluation.adapted: needs every client's own test split, but dataset.client_test_fraction is 0; "
                "remove evaluation.adapted")
    stop = scenario.stop
    bounds = [b for b in (stop.versions, stop.rounds if isinstance(scenario.mode, SyncMode) else None) if b is not None]
    last = min(bounds) if bounds else None
    for where, versions in (("evaluation.at_rounds", ev.at_rounds),
                            ("analysis.at_rounds", scenario.analysis.at_rounds if scenario.analysis else None)):
        beyond = [v for v in versions or () if last is not None and v > last]
        if beyond:
            lowest = 0 if where == "analysis.at_rounds" else 1
            return (f"{where}: server version {beyond[0]} is never reached (the run stops by version {last}; "
                    f"allowed: {lowest}..{last})")
    return None


# --------------------------------------------------------------------------- the whole run
class Scenario(StrictModel):
    """One fully resolved run."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]*[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$")]
    """Also the name of the run's folder: letters, digits, ``_ . -``, and not only dots (``..``
    would write the results a folder up)."""
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
    upload: UploadConfig = Field(default_factory=UploadConfig, description="compression of client updates")
    download: DownloadConfig = Field(default_factory=DownloadConfig, description="compression of the model sent")
    privacy: PrivacyConfig | None = Field(default=None, description="differential privacy of the uploads: {mode: "
                                          "local|central, clip, noise_multiplier, delta}")
    output: OutputConfig = Field(default_factory=OutputConfig)
    timeline: list[TimelineEvent] = Field(default_factory=list, description="scripted events in virtual time")
    selection: SelectionConfig = Field(default_factory=SelectionConfig, description="who trains: {name: uniform|oort|"
                                       "tifl|power_of_choice|fedcs|module:attribute, ...settings}")
    analysis: CKAAnalysis | None = Field(default=None, description="post-run analysis: cka")
    reproduces: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="what the file reproduces: '<paper short name>, <Table/Figure>' (shown by "
        "`fedclock list scenarios`)")
    server: ServerDevice = Field(default_factory=ServerDevice, description="the server's device: compute_gflops "
                                 "charges each server step its counted FLOPs (unset: no time)")
    _plugin_dir: Path | None = PrivateAttr(default=None)

    @property
    def plugin_dir(self) -> Path | None:
        """The folder of the scenario file (None: none), where its ``module:attribute`` plugins
        are looked for first (:mod:`fedclock.scenarios.plugins`); every lookup of a run passes
        it, so a module of the same name beside another scenario is never taken instead."""
        return self._plugin_dir

    @model_validator(mode="after")
    def _remember_plugin_dir(self, info: ValidationInfo) -> "Scenario":
        base = (info.context or {}).get("base_dir")
        self._plugin_dir = None if base is None else Path(base)
        return self

    @model_validator(mode="after")
    def _mode_fits(self) -> "Scenario":
        problem = timeline_problem(self.timeline, self.mode, self.population)
        if problem:
            raise ValueError(problem)
        if isinstance(self.mode, AsyncMode) and self.stop.rounds is not None:
            raise ValueError("stop.rounds: counts sync rounds; in async mode use stop.versions or stop.virtual_time_s")
        if isinstance(self.mode, SyncMode) and self.mode.cohort_size is not None \
                and self.mode.cohort_size > self.population.num_clients:
            raise ValueError(f"mode.cohort_size: {self.mode.cohort_size} exceeds population.num_clients "
                             f"({self.population.num_clients})")
        if isinstance(self.mode, AsyncMode) and self.mode.aggregation is not None:
            check_clients(late_map(self.mode.aggregation.late_windows), self.population.num_clients)
        if isinstance(self.mode, AsyncMode) and self.mode.concurrency > self.population.num_clients:
            raise ValueError(f"mode.concurrency: {self.mode.concurrency} exceeds population.num_clients "
                             f"({self.population.num_clients})")
        if self.analysis is not None and self.analysis.clients is not None:
            bad = [c for c in self.analysis.clients if c >= self.population.num_clients]
            if bad:
                raise ValueError(f"analysis.clients: client {bad[0]} does not exist "
                                 f"(allowed: 0..{self.population.num_clients - 1})")
        if self.evaluation.personalized and self.dataset.client_test_fraction == 0:
            raise ValueError("evaluation.personalized: needs every client's own test split, but "
                             "dataset.client_test_fraction is 0; set evaluation.personalized: false")
        problem = evaluation_problem(self)
        if problem:
            raise ValueError(problem)
        if self.runtime.placement == "dedicated" and self.runtime.num_actors not in (None, self.population.num_clients):
            raise ValueError(f"runtime.num_actors: dedicated placement gives one actor per client "
                             f"({self.population.num_clients}); leave it unset or use placement 'pooled'")
        return self

    @model_validator(mode="after")
    def _fits_in_memory(self) -> "Scenario":
        """The estimated peak memory (:mod:`fedclock.scenarios.memory_estimate`) fits this machine."""
        pop, data = self.population, self.dataset
        data_bytes = synthetic_bytes(max(data.synthetic_samples, SYNTHETIC_MIN_PER_CLIENT * pop.num_clients),
                                     data.synthetic_features) if data.name == "synthetic" and data.format is None else 0
        problem = memory_problem(pop.num_clients, data_bytes, "dataset.synthetic_samples",
                                 ray=self.runtime.backend == "ray", availability=pop.availability.memory_kind(),
                                 selector=not self.selection.is_uniform)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _work_and_links_fit(self) -> "Scenario":
        pop = self.population
        lossy = can_lose(pop.connectivity) or any(can_lose(g.connectivity) for g in pop.clients)
        if lossy and self.mode.task_timeout_s is None:
            raise ValueError("mode.task_timeout_s: required when population.connectivity may lose tasks "
                             "(the server learns of a lost task only by this timeout)")
        budgets = [("population.completeness", pop.completeness)] + [
            (f"population.clients[{i}].completeness", g.completeness) for i, g in enumerate(pop.clients)]
        for where, cfg in budgets:
            if isinstance(cfg, TimeBudget) and cfg.budget_s is None and \
                    self.mode.round_deadline_s is None:
                raise ValueError(f"{where}.budget_s: required unless mode is sync with deadline_s "
                                 f"(then the round deadline is the budget)")
        return self
