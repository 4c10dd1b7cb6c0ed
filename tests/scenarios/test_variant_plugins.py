"""A user's own device distribution (``dist: module:Class``), partition (``type:
module:Class``) and selector beside the scenario file: a bad reference is one line naming the
field (exit status 2), an exception inside the user's class keeps its traceback, and every
lookup of a run takes the module beside its own scenario file, not a same-named module that
an earlier scenario left imported. (A selector raising inside ``select`` keeps its traceback:
``tests/scenarios/test_selection.py``.)"""
from __future__ import annotations

import traceback
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.api import modules_to_ship
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite, parse_suite

USER_VARIANTS = '''
import numpy as np

from fedclock.scenarios.data.partition_config import PartitionModel
from fedclock.scheduling.distributions import DeviceDistribution


class Twice(DeviceDistribution):
    """Every client gets twice ``value``."""

    dist: str = "TAG:Twice"
    value: float

    def sample(self, n, rng):
        return np.full(n, 2.0 * self.value)


class Boom(DeviceDistribution):
    dist: str = "TAG:Boom"

    def sample(self, n, rng):
        raise RuntimeError("boom inside my sample")


class NoOwners(PartitionModel):
    type: str = "TAG:NoOwners"


class NotAVariant:
    pass
'''

SCENARIO = """\
name: variants
dataset: {name: digits, max_train_samples: 200}
model: {name: mlp, hidden: [8]}
population: {num_clients: 3, devices: {compute: {dist: "TAG:Twice", value: 50}}}
algorithm: {name: fedavg, local_steps: 1}
stop: {rounds: 1}
evaluation: {personalized: false}
runtime: {backend: inline}
output: {progress: false}
"""


def _scenario(tmp_path: Path, tag: str, edit: tuple[str, str] | None = None) -> Path:
    """A scenario file with the module ``<tag>.py`` beside it (one name per test)."""
    (tmp_path / f"{tag}.py").write_text(USER_VARIANTS.replace("TAG", tag))
    text = SCENARIO.replace("TAG", tag)
    if edit is not None:
        text = text.replace(*edit)
    file = tmp_path / "scenario.yaml"
    file.write_text(text)
    return file


@pytest.mark.parametrize("edit, message", [
    (('"TAG:Twice", value: 50', '"no_such_module_xyz:Twice"'),
     "population.devices.compute.dist: module 'no_such_module_xyz' not found beside the scenario file"),
    (('"TAG:Twice", value: 50', '"TAG:Missing"'), "population.devices.compute.dist: module 'TAG' ("),
    (('"TAG:Twice", value: 50', '"TAG:NotAVariant"'),
     "population.devices.compute.dist: TAG:NotAVariant is not a subclass of "
     "fedclock.scheduling.distributions.DeviceDistribution with its own sample(n, rng)"),
    (('"TAG:Twice", value: 50', '"TAG:Twice", value: 50, valeu: 1'),
     "population.devices.compute.valeu: unknown field (allowed: dist, value)"),
    (("max_train_samples: 200}", 'max_train_samples: 200, partition: {type: "TAG:NoOwners"}}'),
     "dataset.partition.type: TAG:NoOwners is not a subclass of "
     "fedclock.scenarios.data.partition_config.PartitionModel with its own owners(labels, num_clients, rng)"),
    (("max_train_samples: 200}", 'max_train_samples: 200, partition: {type: "TAG:Gone"}}'),
     "dataset.partition.type: module 'TAG' ("),
    (("stop:", 'selection: {name: "no_such_module_xyz:Pick"}\nstop:'),
     "selection.name: module 'no_such_module_xyz' not found beside the scenario file"),
], ids=["dist-module", "dist-attribute", "dist-not-subclass", "dist-field", "partition-no-owners",
        "partition-attribute", "selection-module"])
def test_a_bad_reference_is_one_line_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       edit: tuple[str, str], message: str) -> None:
    tag = f"var{abs(hash(message)) % 10**6}"
    file = _scenario(tmp_path, tag, (edit[0].replace("TAG", tag), edit[1].replace("TAG", tag)))
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"fedclock: error: {file}: {message.replace('TAG', tag)}" in err


def test_validate_without_imports_keeps_the_fields(tmp_path: Path) -> None:
    """``--no-import`` beside a plugin algorithm: the distribution's fields are kept as given."""
    file = _scenario(tmp_path, "noimp", ('"noimp:Twice", value: 50', '"noimp_absent:Twice", value: 50'))
    file.write_text(file.read_text().replace("{name: fedavg,", '{name: "noimp_absent:Algo",'))
    assert main(["validate", "--no-import", str(file)]) == 0
    (run,) = parse_suite(yaml.safe_load(file.read_text()), "x", imports=False).runs
    assert run.population.devices.compute.model_dump() == {"dist": "noimp_absent:Twice", "value": 50}


def test_an_exception_inside_the_users_distribution_shows_their_traceback(tmp_path: Path) -> None:
    """``main`` lets the user's exception through (Python's own report, exit status 1)."""
    file = _scenario(tmp_path, "boomdist", ('"boomdist:Twice", value: 50', '"boomdist:Boom"'))
    with pytest.raises(RuntimeError, match="boom inside my sample") as info:
        main(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"])
    shown = "".join(traceback.format_exception(info.value))
    assert "boomdist.py" in shown and "in sample" in shown


SAME_NAME = '''
import numpy as np

from fedclock.scheduling.distributions import DeviceDistribution


def load():
    """SIZE training samples of 4 features, 2 classes."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SIZE + 10, 4)).astype(np.float32)
    y = np.arange(SIZE + 10) % 2
    return {"x_train": x[:SIZE], "y_train": y[:SIZE], "x_test": x[SIZE:], "y_test": y[SIZE:]}
'''


def test_each_scenario_takes_the_plugin_module_beside_it(tmp_path: Path) -> None:
    """Two folders hold a module ``same_data`` whose loaders differ (40 and 60 training
    samples, split into train and test). Both files are loaded before either runs; each run reads its own folder's
    loader and ships its own file to Ray workers (before the folder was passed, the second
import served both runs: 60 and 60)."""
    sizes = {"a": 40, "b": 60}
    files = {}
    for name, size in sizes.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "same_data.py").write_text(SAME_NAME.replace("SIZE", str(size)))
        text = SCENARIO.replace("{name: digits, max_train_samples: 200}", '{name: "same_data:load"}')
        files[name] = folder / "scenario.yaml"
        files[name].write_text(text.replace('{compute: {dist: "TAG:Twice", value: 50}}', "{compute: 50}"))
    runs = {name: load_suite(file).runs[0] for name, file in files.items()}
    assert runs["a"].plugin_dir == files["a"].parent
    assert modules_to_ship([runs["a"]]) == [str((files["a"].parent / "same_data.py").resolve())]
    for name, run in runs.items():
        run_scenario(run, Runtime("inline"), tmp_path / f"out_{name}")
        clients = pd.read_parquet(tmp_path / f"out_{name}" / "clients.parquet")
        assert int((clients.num_train + clients.num_test).sum()) == sizes[name]
    assert parse_suite({"name": "x", "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1}}, "x").runs[0] \
        .plugin_dir is None
