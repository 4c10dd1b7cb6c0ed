"""The dataset registry (:mod:`fedclock.scenarios.data.dataset_specs`): every list of dataset names
derives from it, and the readers' own tables agree with it."""
from __future__ import annotations

import inspect
from typing import get_args

import pytest

from fedclock.scenarios.data import dataset_specs as specs
from fedclock.scenarios.data.dataset_specs import DATASETS
from fedclock.scenarios.data.leaf import _CONVERT
from fedclock.scenarios.data.leaf_generate import WRITERS
from fedclock.scenarios.loader import ScenarioError, validate_scenario
from fedclock.scenarios.schema import DatasetConfig, DatasetName, FileFormat
from fedclock.scenarios.data.tff_h5 import TFF_FILES


def _names(flag: str) -> tuple[str, ...]:
    return tuple(name for name, spec in DATASETS.items() if getattr(spec, flag))


def test_the_derived_lists_are_the_registry() -> None:
    assert all(name == spec.name for name, spec in DATASETS.items())
    assert specs.DATASET_NAMES == tuple(DATASETS) == get_args(DatasetName)
    assert get_args(FileFormat) == specs.FILE_FORMATS
    assert specs.DATASET_SUMMARIES == {name: spec.summary for name, spec in DATASETS.items()}
    assert all(s and "\n" not in s for s in specs.DATASET_SUMMARIES.values())
    assert specs.POOLABLE == _names("official_split") == (
        "mnist", "fashion_mnist", "emnist", "cifar10", "cifar100", "tinyimagenet")
    assert specs.NATURAL_SPLIT == _names("natural_split") == ("synthetic",)
    assert specs.MULTI_DOMAIN == _names("domains") == tuple(specs.DOMAINS)
    assert specs.GENERATED == {f: tuple(n for n, s in DATASETS.items() if f in s.generated)
                               for f in specs.FILE_FORMATS}
    assert all(set(s.generated) <= set(s.formats) for s in DATASETS.values())
    assert specs.FORMAT_DATASETS == {f: tuple(n for n, s in DATASETS.items() if f in s.formats)
                                     for f in specs.FILE_FORMATS}
    assert specs.FILE_DATASETS == ("femnist", "shakespeare", "synthetic_leaf", "sent140", "celeba", "stackoverflow")
    # a spec is loaded whole, read from client files, or a multi-domain source
    assert all((s.loader is not None) or bool(s.formats) != bool(s.domains) for s in DATASETS.values())


def test_the_readers_tables_agree_with_the_registry() -> None:
    assert set(_CONVERT) | {"celeba"} == set(specs.FORMAT_DATASETS["leaf"])
    assert set(TFF_FILES) == set(specs.FORMAT_DATASETS["tff_h5"])
    assert set(WRITERS) == set(specs.GENERATED["leaf"])
    assert specs.GENERATED["tff_h5"] == ("stackoverflow",)  # stackoverflow_generate writes only its files


@pytest.mark.parametrize("name", [n for n, s in DATASETS.items() if s.loader is not None])
def test_every_loader_is_found_and_takes_cfg_seed_and_clients(name: str) -> None:
    loader = DATASETS[name].load_function()
    assert list(inspect.signature(loader).parameters) == ["cfg", "seed", "num_clients"]
    with pytest.raises(ValueError, match="femnist has no loader"):
        DATASETS["femnist"].load_function()


def test_an_unknown_dataset_is_one_line_naming_the_field_and_the_registry() -> None:
    run = {"name": "x", "dataset": {"name": "fashion_mnst"}, "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1}}
    with pytest.raises(ScenarioError) as err:
        validate_scenario(run, "x.yaml")
    message = str(err.value)
    assert "\n" not in message
    assert "dataset.name: unknown dataset 'fashion_mnst' (allowed: " in message
    allowed = message.split("(allowed: ")[1].split(";")[0].split(", ")
    assert allowed == sorted(specs.DATASET_NAMES)


def test_the_natural_split_check_names_the_registry() -> None:
    with pytest.raises(ValueError, match=r"natural' needs a dataset with its own client split \(allowed with: "
                                         r"synthetic, or client files"):
        DatasetConfig(name="mnist", partition={"type": "natural"})
    DatasetConfig(name="synthetic", partition={"type": "natural"})
