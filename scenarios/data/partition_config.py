"""The ``dataset.partition`` settings: how a training pool's samples are split among clients.

Each partition carries its own split, :meth:`PartitionModel.owners` (the schemes, and the
paper each follows, are :mod:`fedclock.scenarios.data.partitions`); a user's own is a subclass in
a file beside the scenario, named by ``type: module:Class`` (its other keys are its fields;
:mod:`fedclock.scheduling.variants`). ``natural`` is the dataset's own split, which the
federation reads (:mod:`fedclock.scenarios.data.federation`).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field

from fedclock.scenarios.data.partitions import (class_parts, deal, dirichlet_by_class_owners, dirichlet_owners,
                                                even_owners, pool_classes, sample_classes, shard_owners)
from fedclock.scheduling.model_base import PositiveFloat, StrictModel
from fedclock.scheduling.variants import open_union


class PartitionModel(StrictModel):
    """A partition's settings; :meth:`owners` splits a pool."""

    type: str

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        """The owner client of every sample of ``labels`` (int64; ``-1``: nobody uses it), drawn
        from ``rng`` only. A mistake is a ValueError whose message starts with the field
        (``dataset.partition.<field>: ...``)."""
        raise NotImplementedError(f"{type(self).__name__}.owners")


class IIDPartition(PartitionModel):
    """Samples shuffled and split evenly."""

    type: Literal["iid"] = "iid"

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        n = len(labels)
        owner = np.empty(n, dtype=np.int64)
        owner[rng.permutation(n)] = even_owners(n, np.arange(num_clients))
        return owner


class DirichletPartition(PartitionModel):
    """Hsu, Qi, Brown 2019 (arXiv:1909.06335), Sec. 3: every client draws class proportions
    q ~ Dir(alpha * p), p the class prior of the pool, and all clients hold the same number
    of samples (see :mod:`fedclock.scenarios.data.partitions`). ``concentration: per_class`` draws
    q ~ Dir(alpha, ..., alpha) instead (alpha per class, as most FL code bases read
    "Dirichlet(alpha)"): K times milder than the total reading at the same alpha."""

    type: Literal["dirichlet"]
    alpha: PositiveFloat = 0.5
    concentration: Literal["total", "per_class"] = "total"

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        return dirichlet_owners(labels, num_clients, self.alpha, rng, self.concentration == "per_class")


class DirichletByClassPartition(PartitionModel):
    """Every class is split across clients by shares drawn from Dir(alpha) over clients;
    client sizes vary with alpha (redrawn until every client holds ``min_samples``)."""

    type: Literal["dirichlet_by_class"]
    alpha: PositiveFloat = 0.5
    min_samples: Annotated[int, Field(ge=1)] = 4

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        return dirichlet_by_class_owners(labels, num_clients, self.alpha, self.min_samples, rng)


class ShardsPartition(PartitionModel):
    """McMahan et al. 2017, Sec. 3: sort by label, cut into num_clients x
    ``shards_per_client`` equal shards, give every client ``shards_per_client`` shards at
    random."""

    type: Literal["shards"]
    shards_per_client: Annotated[int, Field(ge=1)] = 2

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        return shard_owners(labels, num_clients, self.shards_per_client, rng)


class PathologicalPartition(PartitionModel):
    """Each client holds exactly ``classes_per_client`` classes, dealt round-robin from one
    random class order (so 50 clients x 2 of 10 classes fall into only 5 distinct label
    sets; ``label_sets: sliding`` gives client c the classes c..c+k-1 instead, FedReCo's
    code's rule); each class's samples are split evenly among its holders. McMahan et al.'s
    scheme is ``shards``."""

    type: Literal["pathological"]
    classes_per_client: Annotated[int, Field(ge=1)]
    label_sets: Literal["blocks", "sliding"] = Field(
        default="blocks", description="blocks: client c holds classes c*k..c*k+k-1 of the random class order "
        "(mod the number of classes); sliding: classes c..c+k-1 (as in FedReCo's code: as many label sets as classes)")

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        classes = pool_classes(labels, self.classes_per_client, "pathological")
        k = self.classes_per_client
        order = rng.permutation(classes)
        first = np.arange(num_clients) * (k if self.label_sets == "blocks" else 1)
        slots = (first[:, None] + np.arange(k)[None, :]) % len(classes)
        return deal(labels, order[slots], rng)


class ClassSamplingPartition(PartitionModel):
    """SPFL/PLGA paper, App. B: every class is cut into num_clients equal parts; each client
    draws ``classes_per_client`` classes (independently: non-IID; with ``shared: true`` one
    draw for all: the paper's IID variant) and takes its own part of each."""

    type: Literal["class_sampling"]
    classes_per_client: Annotated[int, Field(ge=1)]
    shared: bool = False

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        classes = pool_classes(labels, self.classes_per_client, "class_sampling")
        k = self.classes_per_client
        if self.shared:
            held = np.broadcast_to(rng.choice(classes, size=k, replace=False), (num_clients, k))
        else:
            held = sample_classes(classes, num_clients, k, rng)
        return class_parts(labels, held, rng)


class NaturalPartition(PartitionModel):
    """Use the dataset's own per-client split (Synthetic(alpha, beta), or every user of a
    client-file format: LEAF, TFF HDF5, FedScale CSV). For client files, ``min_samples`` keeps
    the users with at least that many samples (train + test, LEAF's ``-k``) and
    ``sample_clients`` keeps that many of them drawn at random from the scenario seed;
    ``max_train_per_client`` keeps each user's first that many training samples in file
    order (the FedOpt paper's per-user cap, :mod:`fedclock.scenarios.data.client_files`)."""

    type: Literal["natural"]
    min_samples: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="client files only: keep users with at least this many samples (train + test)")
    sample_clients: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="client files only: keep this many users, drawn reproducibly from the seed")
    max_train_per_client: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="client files only: keep each user's first this many training samples")

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        raise ValueError("dataset.partition: 'natural' uses the dataset's own client split "
                         "(build_federation handles it), not a label-based split")


class UnresolvedPartition(PartitionModel):
    """A user's partition named in a scenario validated without imports (``fedclock validate
    --no-import``): its fields are kept as given, unchecked; it cannot split."""

    model_config = {**PartitionModel.model_config, "extra": "allow"}

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        raise RuntimeError(f"partition type {self.type!r} was validated without imports and cannot split")


BUILTIN = (IIDPartition, DirichletPartition, DirichletByClassPartition, ShardsPartition, PathologicalPartition,
           ClassSamplingPartition, NaturalPartition)
_OPEN = open_union(PartitionModel, "type", "owners", "owners(labels, num_clients, rng)", BUILTIN,
                   UnresolvedPartition)

PartitionConfig = Annotated[
    Annotated[Union[IIDPartition, DirichletPartition, DirichletByClassPartition, ShardsPartition, PathologicalPartition,
                    ClassSamplingPartition, NaturalPartition], Field(discriminator="type")],
    _OPEN[0], _OPEN[1]]
"""A shipped partition (by its ``type``) or a user's :class:`PartitionModel` subclass."""
