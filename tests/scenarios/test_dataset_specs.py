"""The dataset registry (:mod:`fedclock.scenarios.data.dataset_specs`): every list of dataset names
derives from it, and the readers' own tables agree with it."""
from __future__ import annotations

import inspect
from typing import get_args

import pytest

from fedclock.scenarios.data import dataset_specs as specs
from fedclock.scenarios.data.dataset_specs import DATASETS
from fedclock.scenarios.data.fedscale_csv import FedScaleCsvReader
from fedclock.scenarios.data.leaf import LeafReader
from fedclock.scenarios.loader import ScenarioError, validate_scenario
from fedclock.scenarios.schema import DatasetConfig, DatasetName, FileFormat
from fedclock.scenarios.data.tff_h5 import TffH5Reader
from fedclock.scenarios.data.user_data import ClientFileReader
from tests.source_ast import parse


def _names(flag: str) -> tuple[str, ...]:
    return tuple(name for name, spec in DATASETS.items() if getattr(spec, flag))


def test_the_derived_lists_are_the_registry() -> None:
    assert all(name == spec.name for name, spec in DATASETS.items())
    assert specs.DATASET_NAMES == tuple(DATASETS) == get_args(DatasetName)
    assert get_args(FileFormat) == specs.FILE_FORMATS + (specs.USER_ARRAYS,)
    assert specs.DATASET_SUMMARIES == {name: spec.summary for name, spec in DATASETS.items()}
    assert all(s and "\n" not in s for s in specs.DATASET_SUMMARIES.values())
    assert specs.POOLABLE == _names("official_split") == (
        "mnist", "fashion_mnist", "emnist", "cifar10", "cifar100", "tinyimagenet")
    assert specs.NATURAL_SPLIT == _names("natural_split") == ("synthetic",)
    assert specs.MULTI_DOMAIN == _names("domains") == tuple(specs.DOMAINS)
    # user arrays are not a published format with readers: what they hold is what their generator draws
    assert specs.GENERATED == {**{f: tuple(n for n, s in DATASETS.items() if f in s.generated)
                                  for f in specs.FILE_FORMATS}, specs.USER_ARRAYS: ("synthetic",)}
    assert all(set(s.generated) <= set(s.formats) for s in DATASETS.values())
    assert specs.FORMAT_DATASETS == {**{f: tuple(n for n, s in DATASETS.items() if f in s.formats)
                                        for f in specs.FILE_FORMATS}, specs.USER_ARRAYS: ("synthetic",)}
    assert specs.FILE_DATASETS == ("femnist", "shakespeare", "synthetic_leaf", "sent140", "celeba", "stackoverflow")
    # a spec is loaded whole, read from client files, or a multi-domain source
    assert all((s.loader is not None) or bool(s.formats) != bool(s.domains) for s in DATASETS.values())


FORMAT_READERS = {"leaf": LeafReader, "tff_h5": TffH5Reader, "fedscale_csv": FedScaleCsvReader}


@pytest.mark.parametrize("name", specs.FILE_DATASETS + ("cifar100",))
def test_every_format_a_spec_names_has_its_reader_class(name: str) -> None:
    spec = DATASETS[name]
    assert spec.formats
    for fmt in specs.FILE_FORMATS:
        if fmt not in spec.formats:
            with pytest.raises(ValueError, match=f"{name} is not read from {fmt} files"):
                spec.reader(fmt)
            continue
        reader = spec.reader(fmt)
        assert isinstance(reader, FORMAT_READERS[fmt]) and isinstance(reader, ClientFileReader)
        assert type(reader) is not FORMAT_READERS[fmt]  # a class of its own, holding what differs
        assert type(reader).writes() == (name in specs.GENERATED[fmt])
    assert specs.GENERATED["tff_h5"] == ("stackoverflow",)  # stackoverflow_generate writes only its files


def test_no_reader_class_is_named_by_two_datasets() -> None:
    paths = [path for spec in DATASETS.values() for _, path in spec.readers]
    assert len(paths) == len(set(paths))


def test_every_image_loader_reads_the_files_its_spec_names() -> None:
    published = {name: spec.files for name, spec in DATASETS.items() if spec.files is not None}
    assert set(published) == {"mnist", "fashion_mnist", "emnist", "cifar10", "cifar100", "office_home", "adaptiope"}
    emnist = published["emnist"].for_split("letters")
    assert (emnist.title, emnist.classes, emnist.split, emnist.upright) == ("EMNIST (letters)", 26, "letters", True)
    assert emnist.train == ("emnist-letters-train-images-idx3-ubyte", "emnist-letters-train-labels-idx1-ubyte")
    assert published["mnist"].for_split("letters") is published["mnist"]
    assert published["mnist"].test == ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


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


def _name_dispatch(source: str) -> list[str]:
    """Comparisons of anything with a shipped dataset's name or a file format (``x == "femnist"``,
    ``name in ("sent140", "celeba")``) and tables keyed by them, in ``source``; a multi-domain
    source's own domain names (``mnist`` is one of ``digit_domains``) are keys of its readers."""
    import ast

    names = set(specs.DATASET_NAMES) | set(specs.FILE_FORMATS)
    domains = {d for ds in specs.DOMAINS.values() for d in ds}
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [f"line {node.lineno}: compares with {v.value!r}" for v in values
                          if isinstance(v, ast.Constant) and v.value in names]
        elif isinstance(node, ast.Dict):
            found += [f"line {node.lineno}: a table keyed by {k.value!r}" for k in node.keys
                      if isinstance(k, ast.Constant) and k.value in names - domains]
    return found


def test_no_data_module_dispatches_on_a_dataset_name_or_format() -> None:
    """What differs between datasets is said in their specs (the reader class, the published
    files, the loader), so no module of the data wing besides the registry tests a name."""
    from pathlib import Path

    folder = Path(specs.__file__).parent
    modules = sorted(p for p in folder.glob("*.py") if p.name != "dataset_specs.py")
    assert len(modules) > 15
    found = {p.name: hits for p in modules if (hits := _name_dispatch(p.read_text()))}
    assert not found, found


def test_the_dispatch_check_sees_a_ladder() -> None:
    ladder = 'if cfg.format == "leaf":\n    pass\nelif name in ("sent140", "celeba"):\n    pass\nT = {"femnist": 1}\n'
    assert len(_name_dispatch(ladder)) == 4
    assert _name_dispatch('READERS = {"mnist": 1, "usps": 2}\nif style == "thick":\n    pass\n') == []
