"""Multi-domain federations: generated digit styles, real sources' errors, ImageFolder trees."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.domains import style_digits
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.loader import ScenarioError, parse_suite
from fedclock.scenarios.schema import DatasetConfig


def test_generated_styles_by_hand() -> None:
    img = torch.zeros(1, 1, 5, 5)
    img[0, 0, 2, 2] = 1.0
    assert torch.equal(style_digits(img, "inverted"), 1.0 - img)
    thick = style_digits(img, "thick")
    assert thick[0, 0, 1:4, 1:4].eq(1).all() and float(thick.sum()) == 9.0
    blur = style_digits(img, "blurred")
    assert float(blur[0, 0, 2, 2]) < 1.0 and float(blur[0, 0, 2, 3]) > 0.0
    assert torch.equal(style_digits(img, "original"), img)


def test_digit_styles_federation() -> None:
    cfg = DatasetConfig(name="digit_styles", image_size=8,
                        partition={"type": "dirichlet_by_class", "alpha": 0.5, "min_samples": 2})
    fed = build_federation(cfg, 8, seed=0)
    assert fed.domain_names == ("original", "inverted", "blurred", "thick")
    assert list(fed.client_domain) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert np.all(np.bincount(fed.train_domain) == np.bincount(fed.train_domain)[0])  # equal size per domain
    assert fed.x.shape[1:] == (1, 8, 8) and len(fed.test_domain) == len(fed.y_test)
    for c in range(8):  # every client's samples come from its own domain
        assert np.all(fed.train_domain[fed.client_train[c]] == fed.client_domain[c])
        assert np.all(fed.train_domain[fed.client_test[c]] == fed.client_domain[c])
    again = build_federation(cfg, 8, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(fed.client_train, again.client_train))
    inverted = fed.x[fed.train_domain == 1].mean()
    original = fed.x[fed.train_domain == 0].mean()
    assert float(inverted) > float(original)  # mostly-white background after inversion


def test_samples_per_domain_and_client_multiple() -> None:
    cfg = DatasetConfig(name="digit_styles", image_size=8, domains={"names": ["original", "thick"],
                                                                      "samples_per_domain": 100})
    fed = build_federation(cfg, 2, seed=1)
    assert np.bincount(fed.train_domain).tolist() == [100, 100]
    with pytest.raises(DatasetError, match=r"^population\.num_clients: 3 clients cannot be dealt equally"):
        build_federation(cfg, 3, seed=1)
    big = DatasetConfig(name="digit_styles", image_size=8, domains={"samples_per_domain": 1000})
    fed = build_federation(big, 4, seed=1)  # more than a domain holds: duplicate sampling
    assert np.bincount(fed.train_domain).tolist() == [1000] * 4


def _suite(dataset: dict) -> None:
    parse_suite({"name": "t", "dataset": dataset, "algorithm": {"name": "fedstyle"}, "stop": {"rounds": 1},
                 "population": {"num_clients": 4}}, "t.yaml")


def test_schema_errors_name_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"domains\.names: unknown domain 'sketch' of office_home \(allowed: Art"):
        _suite({"name": "office_home", "domains": {"names": ["Art", "sketch"]}})
    with pytest.raises(ScenarioError, match=r"domains: digits is not a multi-domain source"):
        _suite({"name": "digits", "domains": {"names": ["original"]}})


def test_missing_real_data_gives_one_line_errors(tmp_path: Path) -> None:
    for name, domains, needle in [("digit_domains", ["mnist"], "MNIST not found"),
                                  ("digit_domains", ["usps"], "USPS not found"),
                                  ("digit_domains", ["svhn"], "SVHN not found"),
                                  ("office_home", ["Art"], "office_home domain 'Art' not found"),
                                  ("adaptiope", ["synthetic"], "adaptiope domain 'synthetic' not found")]:
        cfg = DatasetConfig(name=name, root=tmp_path, domains={"names": domains})
        with pytest.raises(DatasetError) as err:
            build_federation(cfg, 1, seed=0)
        msg = str(err.value)
        assert msg.startswith("dataset.root: ") and needle in msg and "\n" not in msg


def _write_tree(root: Path, domains: list[str], classes: list[str], per_class: int = 5) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for d in domains:
        for c in classes:
            folder = root / "OfficeHome" / d / c
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(folder / f"{i}.png")


def test_tiny_image_folder_tree(tmp_path: Path) -> None:
    _write_tree(tmp_path, ["Art", "Clipart"], ["chair", "mug"])
    cfg = DatasetConfig(name="office_home", root=tmp_path, image_size=8, global_test_fraction=0.2,
                        domains={"names": ["Art", "Clipart"]})
    fed = build_federation(cfg, 2, seed=0)
    assert fed.num_classes == 2 and fed.x.shape[1:] == (3, 8, 8)
    assert np.bincount(fed.train_domain).tolist() == [8, 8] and np.bincount(fed.test_domain).tolist() == [2, 2]
    assert fed.domain_names == ("Art", "Clipart")
    _write_tree(tmp_path, ["Real World"], ["chair", "mug"])  # the archive's spelling
    spaced = DatasetConfig(name="office_home", root=tmp_path, image_size=8, domains={"names": ["Art", "Real_World"]})
    assert build_federation(spaced, 2, seed=0).domain_names == ("Art", "Real_World")


def test_image_folder_class_mismatch(tmp_path: Path) -> None:
    _write_tree(tmp_path, ["Art"], ["chair", "mug"], per_class=2)
    _write_tree(tmp_path, ["Product"], ["chair", "pen"], per_class=2)
    cfg = DatasetConfig(name="office_home", root=tmp_path, image_size=8, domains={"names": ["Art", "Product"]})
    with pytest.raises(DatasetError, match="every domain needs the same classes"):
        build_federation(cfg, 2, seed=0)
