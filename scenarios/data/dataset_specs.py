"""The shipped datasets, one :class:`DatasetSpec` each: the only list of their names.

Every other list of dataset names derives from :data:`DATASETS`: the schema's allowed names
(:data:`DATASET_NAMES`), the datasets ``pool: all`` pools (:data:`POOLABLE`), those with their
own client split (:data:`NATURAL_SPLIT`), the client-file formats and what each reads
(:data:`FORMAT_DATASETS`, :data:`FILE_DATASETS`), the multi-domain sources and their domains
(:data:`DOMAINS`), and ``fedclock list datasets`` (:data:`DATASET_SUMMARIES`).
``tests/scenarios/test_dataset_specs.py`` checks that the readers' own tables agree.

A shipped dataset is one spec here and, unless it is read from client files or is a
multi-domain source, a loader function ``(cfg, seed, num_clients) -> Dataset`` named by
``module:function`` (this module imports nothing of fedclock, so that the schema can use
it while the loaders use the schema). A user's own dataset needs no spec: it is named
``module:attribute`` in the scenario (:mod:`fedclock.scenarios.plugins`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["DATASETS", "DATASET_NAMES", "DATASET_SUMMARIES", "DOMAINS", "FILE_DATASETS", "FILE_FORMATS",
           "FORMAT_DATASETS", "GENERATED", "MULTI_DOMAIN", "NATURAL_SPLIT", "POOLABLE", "DatasetSpec"]

FILE_FORMATS: tuple[str, ...] = ("leaf", "tff_h5", "fedscale_csv")
"""Published client-file formats (``dataset.format``, :mod:`fedclock.scenarios.data.client_files`)."""


@dataclass(frozen=True)
class DatasetSpec:
    """What fedclock knows of one shipped dataset."""

    name: str
    """``dataset.name``."""
    summary: str
    """One line for ``fedclock list datasets``."""
    loader: str | None = None
    """``module:function`` loading it (without ``dataset.format``) into a
    :class:`~fedclock.scenarios.data.datasets.Dataset`, called ``(cfg, seed, num_clients)``; None
    for a dataset read from client files only or a multi-domain source."""
    official_split: bool = False
    """It has an official train/test split, which ``dataset.pool: all`` pools."""
    natural_split: bool = False
    """It has its own client split without client files (``partition: {type: natural}``)."""
    formats: tuple[str, ...] = ()
    """The client-file formats it is read from (``dataset.format``)."""
    generated: tuple[str, ...] = ()
    """The formats ``dataset.generate`` writes it in (:mod:`fedclock.scenarios.data.leaf_generate`,
    :mod:`fedclock.scenarios.data.stackoverflow_generate`)."""
    domains: tuple[str, ...] = ()
    """A multi-domain source's domains, in the default order (:mod:`fedclock.scenarios.data.domains`)."""

    def load_function(self) -> Callable[..., Any]:
        """The loader function :attr:`loader` names (imported now)."""
        if self.loader is None:
            raise ValueError(f"{self.name} has no loader of its own (read from client files or by domains)")
        module, attribute = self.loader.split(":")
        function: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
        return function


_DATASETS = "fedclock.scenarios.data.datasets"

DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    DatasetSpec("digits", "scikit-learn 8x8 handwritten digits, 1797 images, 10 classes (bundled, no download)",
                loader=f"{_DATASETS}:load_digits"),
    DatasetSpec("synthetic", "FedProx Synthetic(alpha, beta): per-client logistic models, natural client split",
                loader=f"{_DATASETS}:load_synthetic", natural_split=True),
    DatasetSpec("mnist", "MNIST handwritten digits, 28x28 grey, 60k train / 10k test, 10 classes",
                loader=f"{_DATASETS}:load_idx_family", official_split=True),
    DatasetSpec("fashion_mnist", "Fashion-MNIST clothing, 28x28 grey, 60k train / 10k test, 10 classes",
                loader=f"{_DATASETS}:load_idx_family", official_split=True),
    DatasetSpec("emnist", "EMNIST letters and digits, 28x28 grey, split chosen by dataset.emnist_split",
                loader=f"{_DATASETS}:load_idx_family", official_split=True),
    DatasetSpec("cifar10", "CIFAR-10 objects, 32x32 colour, 50k train / 10k test, 10 classes",
                loader=f"{_DATASETS}:load_cifar", official_split=True),
    DatasetSpec("cifar100", "CIFAR-100 objects, 32x32 colour, 50k train / 10k test, 100 fine classes",
                loader=f"{_DATASETS}:load_cifar", official_split=True, formats=("tff_h5",)),
    DatasetSpec("tinyimagenet", "TinyImageNet, 64x64 colour, 100k train / 10k val (the test set), 200 classes; "
                "image folders under <root>/tiny-imagenet-200 (no download)",
                loader=f"{_DATASETS}:load_tinyimagenet", official_split=True),
    DatasetSpec("digit_styles", "multi-domain: bundled digits in 4 generated styles (original, inverted, blurred, "
                "thick)", domains=("original", "inverted", "blurred", "thick")),
    DatasetSpec("digit_domains", "multi-domain Digit: MNIST, USPS, SVHN under root (3x32x32), 10 classes",
                domains=("mnist", "usps", "svhn")),
    DatasetSpec("office_home", "multi-domain Office Home: Art, Clipart, Product, Real_World ImageFolders under "
                "root, 65 classes", domains=("Art", "Clipart", "Product", "Real_World")),
    DatasetSpec("adaptiope", "multi-domain Adaptiope: product_images, real_life, synthetic ImageFolders under root, "
                "123 classes", domains=("product_images", "real_life", "synthetic")),
    DatasetSpec("femnist", "client files (dataset.format leaf, tff_h5 or fedscale_csv): FEMNIST, one client per "
                "writer, 28x28 grey, 62 classes", formats=("leaf", "tff_h5", "fedscale_csv"), generated=("leaf",)),
    DatasetSpec("shakespeare", "client files (format leaf or tff_h5): Shakespeare, one client per speaking role, "
                "80-character windows, next-character targets over LEAF's 80 letters", formats=("leaf", "tff_h5"),
                generated=("leaf",)),
    DatasetSpec("synthetic_leaf", "client files (format leaf): LEAF's Synthetic data set, one client per user, "
                "vectors", formats=("leaf",), generated=("leaf",)),
    DatasetSpec("mnist1d", "MNIST-1D: 40-long 1-D digit signals, generated locally (mnist1d package, no download), "
                "10 classes", loader=f"{_DATASETS}:load_mnist1d"),
    DatasetSpec("sent140", "client files (format leaf): Sentiment140 tweets, one client per Twitter user, 25 word "
                "indices, 2 classes", formats=("leaf",)),
    DatasetSpec("celeba", "client files (format leaf): CelebA faces, one client per celebrity, 84x84 colour, "
                "smiling or not", formats=("leaf",)),
    DatasetSpec("stackoverflow", "client files (format tff_h5): Stack Overflow, one client per user, sentences of 20 "
                "word indices (TFF's 10,000 words), next-word targets per token", formats=("tff_h5",),
                generated=("tff_h5",)),
)}
"""Every shipped dataset by name, in the order ``fedclock list datasets`` shows them."""

DATASET_NAMES: tuple[str, ...] = tuple(DATASETS)
"""The shipped datasets' names (``dataset.name``; anything else is a user's ``module:attribute``)."""
DATASET_SUMMARIES: dict[str, str] = {name: spec.summary for name, spec in DATASETS.items()}
"""Name -> one line, for ``fedclock list datasets``."""
POOLABLE: tuple[str, ...] = tuple(name for name, spec in DATASETS.items() if spec.official_split)
"""Datasets with an official train/test split, which ``dataset.pool: all`` pools."""
NATURAL_SPLIT: tuple[str, ...] = tuple(name for name, spec in DATASETS.items() if spec.natural_split)
"""Datasets with their own client split without client files."""
MULTI_DOMAIN: tuple[str, ...] = tuple(name for name, spec in DATASETS.items() if spec.domains)
"""Multi-domain sources (:mod:`fedclock.scenarios.data.domains`): ``pool: all`` is not offered for them."""
DOMAINS: dict[str, tuple[str, ...]] = {name: DATASETS[name].domains for name in MULTI_DOMAIN}
"""Multi-domain source -> its domains, in the default order."""
FORMAT_DATASETS: dict[str, tuple[str, ...]] = {
    fmt: tuple(name for name, spec in DATASETS.items() if fmt in spec.formats) for fmt in FILE_FORMATS}
"""The datasets each client-file format is read for."""
FILE_DATASETS: tuple[str, ...] = tuple(name for name, spec in DATASETS.items()
                                       if spec.formats and spec.loader is None)
"""Datasets that exist only as client files (they need ``dataset.format``)."""
GENERATED: dict[str, tuple[str, ...]] = {
    fmt: tuple(name for name, spec in DATASETS.items() if fmt in spec.generated) for fmt in FILE_FORMATS}
"""The datasets ``dataset.generate`` writes in each format."""
