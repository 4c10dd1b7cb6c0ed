"""Multi-domain federations: every client belongs to one style domain.

Sources (``dataset.name``; each spec in :mod:`fedclock.scenarios.data.dataset_specs` names its
loader here and its domains):

* ``digit_styles`` — bundled scikit-learn digits in four generated styles: ``original``,
  ``inverted`` (1 - x), ``blurred`` (Gaussian blur, kernel 5, sigma 1 at 16 px, scaled
  with the side) and ``thick`` (strokes dilated by a 3x3 max filter). The 1797 images are
  dealt at random (stratified by class) into disjoint, equal parts, one per domain, so no
  image appears in two styles; each part is upsampled (bilinear) to ``image_size``
  (default 16) in [0, 1] before its style is applied; ``global_test_fraction`` of each
  domain (stratified) is its test set. One channel.
* ``digit_domains`` — MNIST, USPS and SVHN (the paper's Digit benchmark) through
  torchvision from ``<root>/MNIST/raw``, ``<root>/USPS/usps.bz2, usps.t.bz2`` and
  ``<root>/SVHN/train_32x32.mat, test_32x32.mat``; official train/test splits; grey
  images are repeated to three channels; ``image_size`` default 32; ``download: true``
  fetches missing files through torchvision.
* ``office_home`` / ``adaptiope`` — ``torchvision.datasets.ImageFolder`` trees
  ``<root>/OfficeHome/<domain>/<class>/<image>`` and ``<root>/Adaptiope/<domain>/<class>/
  <image>`` (Office Home's ``Real World`` folder may keep its space); every domain must
  hold the same class folders; images are resized to
  ``image_size`` (default 32) RGB; ``global_test_fraction`` of each domain (stratified) is
  its test set (the datasets have no official split).

Then, for every source: each domain's training pool is brought to
``domains.samples_per_domain`` images (default: the average training pool size over the
domains, as the FedStyle paper's App. A samples "the average number of total training
images in all style datasets ... (duplicate sampling if necessary)"): a seeded subsample
without replacement for a larger domain, every image once or more plus a seeded subsample
for a smaller one (:func:`_equal_size`); its test set is capped at
``domains.test_samples_per_domain``; images are standardized per
channel with the mean and standard deviation of the pooled training data of all domains.
Clients ``k * g .. (k + 1) * g - 1`` belong to domain ``k`` (``g = num_clients /
domains``, which must be a whole number); ``dataset.partition`` (``iid`` = the paper's
"Ho", ``dirichlet`` with ``alpha`` = "He@alpha") splits each domain's pool among its
group; the loader returns the clients so dealt (a :class:`~fedclock.scenarios.data.datasets.DomainSplit`)
and :func:`~fedclock.scenarios.data.federation.build_federation`, the one builder of every
federation, holds ``client_test_fraction`` of each client's share out as its test split (from
its own stream, :data:`~fedclock.scheduling.rng.DataStream.DOMAIN_CLIENT_SPLIT`). All draws are seeded by
(scenario seed, fixed stream ids). A single client (``num_clients: 1``) holds every
domain's pool: the paper's Centralized baseline; its ``client_domain`` is
:data:`ALL_DOMAINS`.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedclock.scenarios.data.dataset_specs import DATASETS, DOMAINS
from fedclock.scenarios.data.datasets import (Dataset, DatasetError, DomainSplit, data_root, download_files,
                                              read_idx_files)
from fedclock.scenarios.data.partitions import partition_indices
from fedclock.scenarios.schema import DatasetConfig, DomainsConfig
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["ALL_DOMAINS", "DomainData", "load_digit_domains", "load_digit_styles", "load_image_folders",
           "style_digits"]

DomainData = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""One domain: train images (N, C, H, W) float in [0, 1], train labels, test images, test labels."""


# --------------------------------------------------------------------------- styles
def style_digits(x: torch.Tensor, style: str) -> torch.Tensor:
    """Apply a generated style to images in [0, 1] (N, 1, H, W)."""
    if style == "original":
        return x.clone()
    if style == "inverted":
        return 1.0 - x
    if style == "blurred":
        from torchvision.transforms.v2 import functional as TF

        sigma = max(0.5, x.shape[-1] / 16.0)
        kernel = 2 * int(round(2 * sigma)) + 1
        return TF.gaussian_blur(x, [kernel, kernel], [sigma, sigma])
    if style == "thick":
        return F.max_pool2d(x, 3, stride=1, padding=1)
    raise ValueError(f"dataset.domains.names: unknown style {style!r} (allowed: {', '.join(DOMAINS['digit_styles'])})")


def _stratified_test(y: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Boolean mask of a stratified test split (round(fraction * class size) per class)."""
    is_test = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        is_test[idx[: int(np.floor(fraction * len(idx) + 0.5))]] = True
    return is_test


def _digit_styles(cfg: DatasetConfig, names: Sequence[str], seed: int) -> tuple[list[DomainData], int]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    side = cfg.image_size or 16
    rng = numpy_rng(seed, Stream.DATA, DataStream.DOMAIN_DEAL)
    owner = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):  # deal each class round-robin over the domains, in random order
        idx = rng.permutation(np.flatnonzero(y == c))
        owner[idx] = (np.arange(len(idx)) + rng.integers(len(names))) % len(names)
    images = torch.from_numpy(x.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    if side != 8:
        images = F.interpolate(images, size=(side, side), mode="bilinear", align_corners=False).clamp_(0, 1)
    out = []
    for k, name in enumerate(names):
        idx = np.flatnonzero(owner == k)
        is_test = _stratified_test(y[idx], cfg.global_test_fraction,
                                   numpy_rng(seed, Stream.DATA, DataStream.DOMAIN_TEST_SPLIT, k))
        styled = style_digits(images[torch.from_numpy(idx)], name)
        labels = torch.from_numpy(y[idx].astype(np.int64))
        tr, te = torch.from_numpy(~is_test), torch.from_numpy(is_test)
        out.append((styled[tr], labels[tr], styled[te], labels[te]))
    return out, 10


# --------------------------------------------------------------------------- Digit (MNIST, USPS, SVHN)
def _to_rgb(x: torch.Tensor, side: int) -> torch.Tensor:
    x = x.to(torch.float32)
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    if tuple(x.shape[2:]) != (side, side):
        x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False).clamp_(0, 1)
    return x


def _need(path: Path, what: str) -> None:
    if not path.is_file():
        raise DatasetError(f"dataset.root: {what} not found (expected {path}); put the files there or set "
                           "dataset.download: true")


def _mnist_domain(cfg: DatasetConfig, root: Path) -> DomainData:
    """MNIST from the files its own spec names (:data:`~fedclock.scenarios.data.dataset_specs.DATASETS`)."""
    side = cfg.image_size or 32
    files = DATASETS["mnist"].files
    assert files is not None
    x_tr, y_tr, x_te, y_te, _ = read_idx_files(files, root, cfg.download)
    return _to_rgb(x_tr / 255.0, side), y_tr.long(), _to_rgb(x_te / 255.0, side), y_te.long()


def _usps_domain(cfg: DatasetConfig, root: Path) -> DomainData:
    import torchvision.datasets as tvd

    side = cfg.image_size or 32
    folder = root / "USPS"
    if cfg.download:
        for train in (True, False):
            download_files("USPS", folder, partial(tvd.USPS, str(folder), train=train, download=True))
    for f in ("usps.bz2", "usps.t.bz2"):
        _need(folder / f, "USPS")
    parts = []
    for train in (True, False):
        try:
            ds = tvd.USPS(str(folder), train=train, download=False)
        except Exception as err:  # torchvision raises several types for bad files
            raise DatasetError(f"dataset.root: could not read USPS from {folder} ({type(err).__name__}); "
                               "replace the files") from err
        parts += [torch.from_numpy(np.asarray(ds.data)).unsqueeze(1) / 255.0,
                  torch.as_tensor(ds.targets, dtype=torch.int64)]
    return _to_rgb(parts[0], side), parts[1], _to_rgb(parts[2], side), parts[3]


def _svhn_domain(cfg: DatasetConfig, root: Path) -> DomainData:
    import torchvision.datasets as tvd

    side = cfg.image_size or 32
    folder = root / "SVHN"
    if cfg.download:
        for split in ("train", "test"):
            download_files("SVHN", folder, partial(tvd.SVHN, str(folder), split=split, download=True))
    for f in ("train_32x32.mat", "test_32x32.mat"):
        _need(folder / f, "SVHN")
    parts = []
    for split in ("train", "test"):
        try:
            ds = tvd.SVHN(str(folder), split=split, download=False)
        except Exception as err:  # torchvision checks the MD5 and raises RuntimeError
            raise DatasetError(f"dataset.root: could not read SVHN from {folder} ({type(err).__name__}: the "
                               "files are not the official ones or are corrupt); replace them") from err
        parts += [torch.from_numpy(np.asarray(ds.data)) / 255.0, torch.as_tensor(ds.labels, dtype=torch.int64) % 10]
    return _to_rgb(parts[0], side), parts[1], _to_rgb(parts[2], side), parts[3]


_DIGIT_DOMAINS: dict[str, Callable[[DatasetConfig, Path], DomainData]] = {
    "mnist": _mnist_domain, "usps": _usps_domain, "svhn": _svhn_domain}
"""The reader of each of ``digit_domains``' domains (its spec's ``domains``, checked by
``tests/scenarios/test_dataset_specs.py``)."""


# --------------------------------------------------------------------------- ImageFolder (Office Home, Adaptiope)
def _image_folder(cfg: DatasetConfig, names: Sequence[str], root: Path, seed: int) -> tuple[list[DomainData], int]:
    import torchvision.datasets as tvd
    from torchvision.transforms import v2

    files = DATASETS[cfg.name].files
    assert files is not None, f"{cfg.name}'s spec names no folder"
    base = root / files.folder
    side = cfg.image_size or 32
    transform = v2.Compose([v2.PILToTensor(), v2.Resize((side, side), antialias=True),
                            v2.ToDtype(torch.float32, scale=True)])
    classes: list[str] | None = None
    out = []
    for k, name in enumerate(names):
        folder = base / name
        if not folder.is_dir() and (base / name.replace("_", " ")).is_dir():
            folder = base / name.replace("_", " ")  # the Office Home archive spells it "Real World"
        if not folder.is_dir():
            raise DatasetError(f"dataset.root: {cfg.name} domain {name!r} not found (expected the folder {folder} "
                               "with one sub-folder per class); put the images there")
        try:
            ds = tvd.ImageFolder(str(folder), transform=transform)  # its default loader converts to RGB
        except (FileNotFoundError, OSError) as err:
            raise DatasetError(f"dataset.root: no images under {folder} ({type(err).__name__}); "
                               "expected <domain>/<class>/<image> files") from err
        if classes is None:
            classes = list(ds.classes)
        elif list(ds.classes) != classes:
            raise DatasetError(f"dataset.root: the class folders of {folder} differ from those of "
                               f"{base / names[0]}; every domain needs the same classes")
        xs = torch.stack([ds[i][0] for i in range(len(ds))])
        ys = np.asarray(ds.targets, dtype=np.int64)
        is_test = _stratified_test(ys, cfg.global_test_fraction,
                                   numpy_rng(seed, Stream.DATA, DataStream.DOMAIN_TEST_SPLIT, k))
        tr, te = torch.from_numpy(~is_test), torch.from_numpy(is_test)
        y_t = torch.from_numpy(ys)
        out.append((xs[tr], y_t[tr], xs[te], y_t[te]))
    assert classes is not None
    return out, len(classes)


# --------------------------------------------------------------------------- assembly
ALL_DOMAINS = -1
"""``client_domain`` of the single client of a Centralized federation (it holds every domain)."""


def _equal_size(available: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of ``size`` draws from ``available`` images: a subsample without
    replacement when ``size <= available``; otherwise every image ``size // available``
    times plus ``size % available`` distinct images once more (duplicate sampling, as
    even as it can be)."""
    if size <= available:
        return np.sort(rng.choice(available, size, replace=False))
    repeats, rest = divmod(size, available)
    return np.sort(np.concatenate([np.tile(np.arange(available), repeats), rng.choice(available, rest, replace=False)]))


def _domain_names(cfg: DatasetConfig) -> list[str]:
    """The selected domains (``dataset.domains.names``, else the spec's, in its order)."""
    return list((cfg.domains or DomainsConfig()).names or DOMAINS[cfg.name])


def load_digit_styles(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """``digit_styles``: the bundled digits dealt to the styles (module docstring)."""
    names = _domain_names(cfg)
    data, classes = _digit_styles(cfg, names, seed)
    return _dealt(cfg, names, data, classes, seed, num_clients)


def load_digit_domains(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """``digit_domains``: MNIST, USPS and SVHN (module docstring)."""
    names = _domain_names(cfg)
    root = data_root(cfg)
    return _dealt(cfg, names, [_DIGIT_DOMAINS[n](cfg, root) for n in names], 10, seed, num_clients)


def load_image_folders(cfg: DatasetConfig, seed: int, num_clients: int) -> Dataset:
    """``office_home``, ``adaptiope``: one image folder per domain (module docstring)."""
    names = _domain_names(cfg)
    data, classes = _image_folder(cfg, names, data_root(cfg), seed)
    return _dealt(cfg, names, data, classes, seed, num_clients)


def _dealt(cfg: DatasetConfig, names: list[str], data: list[DomainData], classes: int, seed: int,
           num_clients: int) -> Dataset:
    """The domains brought to equal size, standardized and pooled, with their clients dealt
    (module docstring); each client's test split is the federation builder's."""
    dom = cfg.domains or DomainsConfig()
    centralized = num_clients == 1
    if num_clients % len(names) and not centralized:
        raise DatasetError(f"population.num_clients: {num_clients} clients cannot be dealt equally to the "
                           f"{len(names)} domains of dataset {cfg.name} ({', '.join(names)}); use a multiple of "
                           f"{len(names)} (or 1: one client holding every domain, the Centralized baseline)")
    per_domain = 1 if centralized else num_clients // len(names)
    size = dom.samples_per_domain or int(round(float(np.mean([int(d[1].shape[0]) for d in data]))))
    xs, ys, xts, yts, dom_train, dom_test = [], [], [], [], [], []
    for k, (x_tr, y_tr, x_te, y_te) in enumerate(data):
        rng = numpy_rng(seed, Stream.DATA, DataStream.DOMAIN_SUBSAMPLE, k)
        keep = torch.from_numpy(_equal_size(len(y_tr), size, rng))
        xs.append(x_tr[keep])
        ys.append(y_tr[keep])
        if dom.test_samples_per_domain is not None and dom.test_samples_per_domain < len(y_te):
            keep_te = torch.from_numpy(np.sort(rng.choice(len(y_te), dom.test_samples_per_domain, replace=False)))
            x_te, y_te = x_te[keep_te], y_te[keep_te]
        xts.append(x_te)
        yts.append(y_te)
        dom_train.append(np.full(size, k, dtype=np.int64))
        dom_test.append(np.full(len(y_te), k, dtype=np.int64))
    x, x_test = torch.cat(xs), torch.cat(xts)
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    std = x.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    x, x_test = ((x - mean) / std).contiguous(), ((x_test - mean) / std).contiguous()
    y = torch.cat(ys).to(torch.int64)
    train_domain = np.concatenate(dom_train)
    clients: list[np.ndarray] = []
    if centralized:
        clients.append(np.arange(len(y)))
        client_domain = np.array([ALL_DOMAINS])
    else:
        for k in range(len(names)):
            members = np.flatnonzero(train_domain == k)
            try:
                parts = partition_indices(y.numpy()[members], per_domain, cfg.partition,
                                          numpy_rng(seed, Stream.DATA, DataStream.DOMAIN_PARTITION, k))
            except ValueError as err:
                raise DatasetError(str(err)) from err
            for j, part in enumerate(parts):
                if len(part) == 0:
                    raise DatasetError(f"population.num_clients: {per_domain} clients per domain leave client "
                                       f"{k * per_domain + j} (domain {names[k]}) with no data; use fewer clients "
                                       "or a larger dataset.domains.samples_per_domain")
                clients.append(members[part])
        client_domain = np.repeat(np.arange(len(names)), per_domain)
    split = DomainSplit(tuple(names), tuple(clients), client_domain, train_domain, np.concatenate(dom_test))
    return Dataset(cfg.name, x, y, x_test, torch.cat(yts).to(torch.int64), classes, domains=split)
