"""The shipped datasets, one :class:`DatasetSpec` each: the only list of their names.

Every other list of dataset names derives from :data:`DATASETS`: the schema's allowed names
(:data:`DATASET_NAMES`), the datasets ``pool: all`` pools (:data:`POOLABLE`), those with their
own client split (:data:`NATURAL_SPLIT`), the client-file formats and what each reads
(:data:`FORMAT_DATASETS`, :data:`FILE_DATASETS`), the multi-domain sources and their domains
(:data:`DOMAINS`), and ``fedclock list datasets`` (:data:`DATASET_SUMMARIES`).
Everything that differs between shipped datasets is said here too, so no reader keeps a
table of names or tests a name: the files a loader reads (:class:`PublishedFiles`) and, for
each client-file format, the reader class that reads the dataset in it
(:class:`DatasetSpec.readers`).

A shipped dataset is one spec here and a loader function ``(cfg, seed, num_clients) ->
Dataset`` named by ``module:function`` (a multi-domain source's deals its clients to the
domains), or readers of its client files named by ``module:Class`` (this module imports
nothing of fedclock, so that the schema can use it while the loaders use the schema). A
user's own dataset needs no spec: it is named ``module:attribute`` in the scenario (:mod:`fedclock.scenarios.plugins`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable

__all__ = ["DATASETS", "DATASET_NAMES", "DATASET_SUMMARIES", "DOMAINS", "EMNIST_CLASSES", "FILE_DATASETS",
           "FILE_FORMATS", "FORMAT_DATASETS", "GENERATED", "MULTI_DOMAIN", "NATURAL_SPLIT", "POOLABLE", "DatasetSpec",
           "PublishedFiles", "USER_ARRAYS"]

FILE_FORMATS: tuple[str, ...] = ("leaf", "tff_h5", "fedscale_csv")
"""Published client-file formats (``dataset.format``, :mod:`fedclock.scenarios.data.client_files`)."""
USER_ARRAYS = "user_arrays"
"""``dataset.format`` of per-user array files mapped from disk, a user's rows read when it trains
(:mod:`fedclock.scenarios.data.user_arrays`): not a published format, so not a reader of
:data:`FILE_FORMATS`; its datasets are those its generator draws."""


EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}
"""Classes of each EMNIST split (``letters``: 26, its labels 1..26 shifted to 0..25), as in
``torchvision.datasets.EMNIST.classes_split_dict``."""


@dataclass(frozen=True)
class PublishedFiles:
    """Where a shipped dataset's published files lie under the data root and what they hold,
    read by its loader (:mod:`fedclock.scenarios.data.datasets`,
    :mod:`fedclock.scenarios.data.domains`): the loaders keep no table of dataset names."""

    title: str
    """Its name in messages."""
    folder: str
    """The sub-folder of the data root that holds the files."""
    classes: int = 0
    """Number of classes (0: given by the EMNIST split, :data:`EMNIST_CLASSES`)."""
    train: tuple[str, ...] = ()
    """The training files: an IDX images file then its labels file, or CIFAR's pickles;
    ``{split}`` stands for ``dataset.emnist_split``."""
    test: tuple[str, ...] = ()
    """The test files, as :attr:`train`."""
    torchvision: str = ""
    """The ``torchvision.datasets`` class that downloads them (``dataset.download: true``)."""
    label_key: str = ""
    """A CIFAR pickle's label entry."""
    upright: bool = False
    """Images stored transposed (EMNIST): turned upright when read, and the ``letters``
    split's labels 1..26 shifted to 0..25."""
    split: str = ""
    """The EMNIST split these files are of, once :meth:`for_split` has filled it in."""

    def for_split(self, split: str) -> "PublishedFiles":
        """These files for ``dataset.emnist_split`` (unchanged for a dataset without splits)."""
        if "{split}" not in "".join((self.title, *self.train, *self.test)):
            return self
        return replace(self, title=self.title.format(split=split), classes=EMNIST_CLASSES[split], split=split,
                       train=tuple(n.format(split=split) for n in self.train),
                       test=tuple(n.format(split=split) for n in self.test))


def _idx(title: str, folder: str, torchvision: str, classes: int = 10, prefix: str = "",
         parts: tuple[str, str] = ("train", "t10k")) -> PublishedFiles:
    """An IDX dataset's four files: images then labels, for training then test."""
    train, test = ((f"{prefix}{part}-images-idx3-ubyte", f"{prefix}{part}-labels-idx1-ubyte") for part in parts)
    return PublishedFiles(title, folder, classes, train, test, torchvision, upright="{split}" in prefix)


@dataclass(frozen=True)
class DatasetSpec:
    """What fedclock knows of one shipped dataset."""

    name: str
    """``dataset.name``."""
    summary: str
    """One line for ``fedclock list datasets``."""
    loader: str | None = None
    """``module:function`` loading it (without ``dataset.format``) into a
    :class:`~fedclock.scenarios.data.datasets.Dataset`, called ``(cfg, seed, num_clients)``
    (a multi-domain source's loader deals its clients to the domains); None for a dataset read
    from client files only."""
    files: PublishedFiles | None = None
    """Its published files, for the loader that reads them."""
    official_split: bool = False
    """It has an official train/test split, which ``dataset.pool: all`` pools."""
    natural_split: bool = False
    """It has its own client split without client files (``partition: {type: natural}``)."""
    readers: tuple[tuple[str, str], ...] = ()
    """The client-file formats it is read from (``dataset.format``), each with the
    ``module:Class`` of its reader (a :class:`~fedclock.scenarios.data.client_files.ClientFileReader`)."""
    generated: tuple[str, ...] = ()
    """The formats ``dataset.generate`` writes it in (:mod:`fedclock.scenarios.data.leaf_generate`,
    :mod:`fedclock.scenarios.data.stackoverflow_generate`)."""
    domains: tuple[str, ...] = ()
    """A multi-domain source's domains, in the default order (:mod:`fedclock.scenarios.data.domains`)."""

    @property
    def formats(self) -> tuple[str, ...]:
        """The client-file formats it is read from (``dataset.format``)."""
        return tuple(fmt for fmt, _ in self.readers)

    def load_function(self) -> Callable[..., Any]:
        """The loader function :attr:`loader` names (imported now)."""
        if self.loader is None:
            raise ValueError(f"{self.name} has no loader of its own (read from client files)")
        return _imported(self.loader)

    def reader(self, fmt: str) -> Any:
        """A new reader of its ``fmt`` files (the class :attr:`readers` names, imported now)."""
        path = dict(self.readers).get(fmt)
        if path is None:
            raise ValueError(f"{self.name} is not read from {fmt} files (allowed: {', '.join(self.formats)})")
        return _imported(path)()


def _imported(path: str) -> Any:
    """The attribute a ``module:attribute`` path names."""
    module, attribute = path.split(":")
    return getattr(importlib.import_module(module), attribute)


_DATA = "fedclock.scenarios.data"
_DATASETS = f"{_DATA}.datasets"
_DOMAINS = f"{_DATA}.domains"
_LEAF, _TFF, _CSV = f"{_DATA}.leaf", f"{_DATA}.tff_h5", f"{_DATA}.fedscale_csv"
_CIFAR = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"), ("test_batch",)

DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    DatasetSpec("digits", "scikit-learn 8x8 handwritten digits, 1797 images, 10 classes (bundled, no download)",
                loader=f"{_DATASETS}:load_digits"),
    DatasetSpec("synthetic", "FedProx Synthetic(alpha, beta): per-client logistic models, natural client split",
                loader=f"{_DATASETS}:load_synthetic", natural_split=True),
    DatasetSpec("mnist", "MNIST handwritten digits, 28x28 grey, 60k train / 10k test, 10 classes",
                loader=f"{_DATASETS}:load_idx_family", official_split=True, files=_idx("MNIST", "MNIST", "MNIST")),
    DatasetSpec("fashion_mnist", "Fashion-MNIST clothing, 28x28 grey, 60k train / 10k test, 10 classes",
                loader=f"{_DATASETS}:load_idx_family", official_split=True,
                files=_idx("Fashion-MNIST", "FashionMNIST", "FashionMNIST")),
    DatasetSpec("emnist", "EMNIST letters and digits, 28x28 grey, split chosen by dataset.emnist_split",
                loader=f"{_DATASETS}:load_idx_family", official_split=True,
                files=_idx("EMNIST ({split})", "EMNIST", "EMNIST", 0, "emnist-{split}-", ("train", "test"))),
    DatasetSpec("cifar10", "CIFAR-10 objects, 32x32 colour, 50k train / 10k test, 10 classes",
                loader=f"{_DATASETS}:load_cifar", official_split=True,
                files=PublishedFiles("CIFAR-10", "cifar-10-batches-py", 10, *_CIFAR, "CIFAR10", "labels")),
    DatasetSpec("cifar100", "CIFAR-100 objects, 32x32 colour, 50k train / 10k test, 100 fine classes",
                loader=f"{_DATASETS}:load_cifar", official_split=True,
                files=PublishedFiles("CIFAR-100", "cifar-100-python", 100, ("train",), ("test",), "CIFAR100",
                                     "fine_labels"),
                readers=(("tff_h5", f"{_TFF}:Cifar100H5"),)),
    DatasetSpec("tinyimagenet", "TinyImageNet, 64x64 colour, 100k train / 10k val (the test set), 200 classes; "
                "image folders under <root>/tiny-imagenet-200 (no download)",
                loader=f"{_DATASETS}:load_tinyimagenet", official_split=True),
    DatasetSpec("digit_styles", "multi-domain: bundled digits in 4 generated styles (original, inverted, blurred, "
                "thick)", loader=f"{_DOMAINS}:load_digit_styles", domains=("original", "inverted", "blurred", "thick")),
    DatasetSpec("digit_domains", "multi-domain Digit: MNIST, USPS, SVHN under root (3x32x32), 10 classes",
                loader=f"{_DOMAINS}:load_digit_domains", domains=("mnist", "usps", "svhn")),
    DatasetSpec("office_home", "multi-domain Office Home: Art, Clipart, Product, Real_World ImageFolders under "
                "root, 65 classes", loader=f"{_DOMAINS}:load_image_folders",
                files=PublishedFiles("Office Home", "OfficeHome"), domains=("Art", "Clipart", "Product", "Real_World")),
    DatasetSpec("adaptiope", "multi-domain Adaptiope: product_images, real_life, synthetic ImageFolders under root, "
                "123 classes", loader=f"{_DOMAINS}:load_image_folders", files=PublishedFiles("Adaptiope", "Adaptiope"),
                domains=("product_images", "real_life", "synthetic")),
    DatasetSpec("femnist", "client files (dataset.format leaf, tff_h5 or fedscale_csv): FEMNIST, one client per "
                "writer, 28x28 grey, 62 classes", generated=("leaf",),
                readers=(("leaf", f"{_LEAF}:FemnistLeaf"), ("tff_h5", f"{_TFF}:FemnistH5"),
                         ("fedscale_csv", f"{_CSV}:FemnistCsv"))),
    DatasetSpec("shakespeare", "client files (format leaf or tff_h5): Shakespeare, one client per speaking role, "
                "80-character windows, next-character targets over LEAF's 80 letters", generated=("leaf",),
                readers=(("leaf", f"{_LEAF}:ShakespeareLeaf"), ("tff_h5", f"{_TFF}:ShakespeareH5"))),
    DatasetSpec("synthetic_leaf", "client files (format leaf): LEAF's Synthetic data set, one client per user, "
                "vectors", generated=("leaf",), readers=(("leaf", f"{_LEAF}:SyntheticLeaf"),)),
    DatasetSpec("mnist1d", "MNIST-1D: 40-long 1-D digit signals, generated locally (mnist1d package, no download), "
                "10 classes", loader=f"{_DATASETS}:load_mnist1d"),
    DatasetSpec("sent140", "client files (format leaf): Sentiment140 tweets, one client per Twitter user, 25 word "
                "indices, 2 classes", readers=(("leaf", f"{_LEAF}:Sent140Leaf"),)),
    DatasetSpec("celeba", "client files (format leaf): CelebA faces, one client per celebrity, 84x84 colour, "
                "smiling or not", readers=(("leaf", f"{_LEAF}:CelebaLeaf"),)),
    DatasetSpec("stackoverflow", "client files (format tff_h5): Stack Overflow, one client per user, sentences of 20 "
                "word indices (TFF's 10,000 words), next-word targets per token", generated=("tff_h5",),
                readers=(("tff_h5", f"{_TFF}:StackOverflowH5"),)),
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
FORMAT_DATASETS[USER_ARRAYS] = GENERATED[USER_ARRAYS] = ("synthetic",)
"""The datasets ``dataset.generate`` writes in each format."""
