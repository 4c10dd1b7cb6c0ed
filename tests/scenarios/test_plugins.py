"""A user's own algorithm, model and dataset: ``module:attribute`` beside the scenario file,
installed entry points, objects through the Python API; bad references are one-line
errors, exceptions inside the user's code keep their traceback."""
from __future__ import annotations

import shutil
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.base import Algorithm, AlgorithmParams, ServerState
from fedclock.algorithms.fedbuff import FedBuff
from fedclock.scenarios import run
from fedclock.scenarios.api import RunResult, SuiteResult, load, modules_to_ship
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite, parse_suite
from fedclock.scenarios.plugins import import_module
from tests.scenarios.one_line import one_line_error

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

USER_ALGOS = '''
import torch
from pydantic import Field

from fedclock.algorithms.fedavg import FedAvg, FedAvgParams


class ScaledParams(FedAvgParams):
    scale: float = Field(default=1.0, gt=0, le=1)


class ScaledFedAvg(FedAvg):
    """FedAvg whose server step is scaled.

    Paper: none (a test's)
    """

    name = "scaled_fedavg"
    Params = ScaledParams


def not_an_algorithm():
    return 1


CONSTANT = 3
'''

SCENARIO = """\
name: plug
dataset: {name: digits, max_train_samples: 300}
model: {name: mlp, hidden: [8]}
population: {num_clients: 3}
algorithm: {name: "PLUG_algos:ScaledFedAvg", scale: 0.5, local_steps: 2}
stop: {rounds: 2}
evaluation: {personalized: false}
runtime: {backend: inline}
output: {progress: false}
"""


def _scenario_dir(tmp_path: Path, tag: str, text: str = SCENARIO, algos: str = USER_ALGOS) -> Path:
    """A scenario file with a module ``<tag>_algos.py`` beside it (one name per test, so
    modules of different tests never share a name)."""
    (tmp_path / f"{tag}_algos.py").write_text(algos)
    file = tmp_path / "scenario.yaml"
    file.write_text(text.replace("PLUG", tag))
    return file


def test_a_users_algorithm_beside_the_file_is_validated_and_runs(tmp_path: Path) -> None:
    file = _scenario_dir(tmp_path, "beside")
    assert main(["validate", str(file)]) == 0
    (run_,) = load_suite(file).runs
    assert run_.algorithm.name == "beside_algos:ScaledFedAvg" and run_.algorithm.params.scale == 0.5
    assert main(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    metrics = pd.read_parquet(tmp_path / "out" / "metrics.parquet")
    assert metrics.version.max() == 2


@pytest.mark.parametrize("edit, message", [
    ({"algorithm": '{name: "no_such_module_xyz:Thing"}'},
     "algorithm.name: module 'no_such_module_xyz' not found beside the scenario file"),
    ({"algorithm": '{name: "TAG_algos:Missing"}'}, "algorithm.name: module 'TAG_algos' ("),
    ({"algorithm": '{name: "TAG_algos:not_an_algorithm"}'},
     "algorithm.name: TAG_algos:not_an_algorithm is not a subclass of fedclock.algorithms.base.Algorithm"),
    ({"algorithm": '{name: "TAG_algos:ScaledFedAvg", scale: 2}'}, "algorithm.scale: Input should be less than"),
    ({"algorithm": '{name: "TAG_algos:ScaledFedAvg", sclae: 0.1}'}, "algorithm.sclae: unknown field (allowed: "),
    ({"algorithm": '{name: "not a reference:"}'}, "algorithm.name: 'not a reference:' is not a module:attribute "
                                                  "reference"),
    ({"model": '{name: "TAG_algos:CONSTANT"}'}, "model.name: TAG_algos:CONSTANT is not callable"),
    ({"model": '{name: tinynet}'},
     "model.name: unknown model 'tinynet' (allowed: char_lstm, cnn5, conv_gn, leaf_cnn, logistic, mlp"),
    ({"dataset": '{name: "TAG_algos:ScaledFedAvg"}'}, "dataset.name: TAG_algos:ScaledFedAvg needs the arguments "
                                                       "params, model_factory"),
], ids=["module", "attribute", "not-algorithm", "params", "params-typo", "syntax", "model-not-callable",
        "unknown-model", "dataset-arguments"])
def test_a_bad_reference_is_one_line_naming_the_field(tmp_path: Path, edit: dict[str, str], message: str) -> None:
    tag = f"bad{abs(hash(message)) % 10**6}"
    text = SCENARIO
    for section, value in edit.items():
        text = "\n".join(f"{section}: {value}" if line.startswith(f"{section}:") else line
                         for line in text.splitlines()) + "\n"
    file = _scenario_dir(tmp_path, tag, text.replace("TAG", tag))
    err = one_line_error(["validate", str(file)])
    assert f"fedclock: error: {file}: {message.replace('TAG', tag)}" in err


def test_a_model_without_body_and_head_is_one_line_at_run_time(tmp_path: Path) -> None:
    (tmp_path / "flat_models.py").write_text(textwrap.dedent("""
        from torch import nn

        class Bare(nn.Module):
            def __init__(self, input_shape, num_classes):
                super().__init__()
                self.layer = nn.Linear(64, num_classes)

            def forward(self, x):
                return self.layer(x.flatten(1))
        """))
    file = _scenario_dir(tmp_path, "bare", SCENARIO.replace("{name: mlp, hidden: [8]}", '{name: "flat_models:Bare"}'))
    err = one_line_error(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"])
    assert "model.name: flat_models:Bare returned a Bare without .body and .head modules" in err


def test_an_exception_inside_the_users_code_shows_their_traceback(tmp_path: Path) -> None:
    """``main`` lets the user's exception through with its traceback (so ``fedclock`` ends with
    Python's own report of it, exit status 1), instead of a one-line error. Checked in this
    process: a child ``python`` would only add Python's printing of the same traceback."""
    algos = USER_ALGOS + "\n\ndef _fail():\n    raise RuntimeError('boom inside my module')\n\n\n_fail()\n"
    file = _scenario_dir(tmp_path, "boom", algos=algos)
    with pytest.raises(RuntimeError, match="boom inside my module") as info:
        main(["validate", str(file)])
    shown = "".join(traceback.format_exception(info.value))
    assert "boom_algos.py" in shown and "in _fail" in shown
    assert "RuntimeError: boom inside my module" in shown


def test_an_exception_in_a_hook_propagates_unchanged(tmp_path: Path) -> None:
    algos = USER_ALGOS + textwrap.dedent('''
        class Broken(ScaledFedAvg):
            """Raises in its client step."""

            name = "broken"

            def client_update(self, payload, client_state, data, rng):
                raise ZeroDivisionError("my bug")
        ''')
    file = _scenario_dir(tmp_path, "hook", SCENARIO.replace("ScaledFedAvg", "Broken"), algos=algos)
    with pytest.raises(ZeroDivisionError, match="my bug"):
        main(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"])


def test_missing_class_attributes_fail_when_the_class_is_defined() -> None:
    hooks = {"client_update": lambda self, payload, state, data, rng: None,
             "server_receive": lambda self, state, arrivals, rng: (state, False)}
    with pytest.raises(TypeError, match=r"NoName: set the class attribute 'name' \(e.g. name = "):
        type("NoName", (Algorithm,), hooks)
    with pytest.raises(TypeError, match=r"NoModes: set the class attribute 'modes' \(e.g. modes = "):
        type("NoModes", (Algorithm,), {**hooks, "name": "no_modes", "Params": AlgorithmParams})
    type("Abstract", (Algorithm,), {"name": "abstract"})  # abstract (hooks missing): a base, not checked

    with pytest.raises(TypeError, match=r"BadParams: Params must be a subclass of .*AlgorithmParams"):
        class BadParams(FedBuff):
            Params = dict  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"BadModes: modes must be a non-empty frozenset"):
        class BadModes(FedBuff):
            modes = frozenset({"sometimes"})

    class Documented(FedBuff):
        """Buffered async with a twist.

        Paper: Someone et al., A Paper, 2030
        """

        name = "documented"

    assert Documented.summary == "Buffered async with a twist."
    assert Documented.paper == "Someone et al., A Paper, 2030"
    assert Documented.vectorizable and FedBuff.vectorizable  # inherited: its client step is FedBuff's


def test_entry_points_of_an_installed_package_are_found_and_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    package = site / "fc_test_plugins"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(USER_ALGOS + textwrap.dedent("""
        from torch import nn


        def tiny(input_shape, num_classes):
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, num_classes))
        """))
    dist = site / "fc_test_plugins-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fc-test-plugins\nVersion: 1.2\n")
    (dist / "entry_points.txt").write_text("[fedclock.algorithms]\nep_scaled = fc_test_plugins:ScaledFedAvg\n"
                                           "ep_broken = fc_test_plugins:not_an_algorithm\n\n"
                                           "[fedclock.models]\nep_tiny = fc_test_plugins:tiny\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "fc_test_plugins", raising=False)

    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("ep_scaled "))
    assert "fc_test_plugins:ScaledFedAvg" in line and "(entry point of fc-test-plugins 1.2)" in line
    broken = next(x for x in out.splitlines() if x.startswith("ep_broken "))
    assert "unusable: algorithm.name: entry point 'ep_broken' (fc_test_plugins:not_an_algorithm) is not a " \
        "subclass of fedclock.algorithms.base.Algorithm (got a function)" in broken
    assert main(["list", "models"]) == 0
    assert "ep_tiny" in capsys.readouterr().out

    text = SCENARIO.replace('"PLUG_algos:ScaledFedAvg"', "ep_scaled").replace("{name: mlp, hidden: [8]}",
                                                                                "{name: ep_tiny}")
    (run_,) = parse_suite(yaml.safe_load(text), "ep").runs
    result = run_scenario(run_, Runtime("inline"), tmp_path / "out")
    assert result.versions == 2 and result.algorithm == "ep_scaled"
    assert modules_to_ship([run_]) == []  # an installed package is not shipped: it is installed where clients run


# --------------------------------------------------------------------------- the Python API
def _example(name: str, module: str) -> Any:
    return import_module(module, EXAMPLES / name, "test")


def test_run_returns_dataframes_and_accepts_objects_in_place_of_names(tmp_path: Path) -> None:
    algorithm = _example("personal_head", "personal_head").PersonalHead
    model = _example("personal_head", "tiny_models").TinyNet
    loader = _example("personal_head", "digit_clients").load
    source = {"name": "api", "dataset": {"name": loader, "partition": {"type": "natural"}},
              "model": {"name": model}, "population": {"num_clients": 5},
              "algorithm": {"name": algorithm, "local_steps": 3}, "stop": {"rounds": 2},
              "evaluation": {"personalized": True}, "output": {"progress": False}}
    result = run(source, out=tmp_path / "api", overrides={"runtime.backend": "inline", "stop.rounds": "3"})
    assert isinstance(result, RunResult)
    assert result.summary.algorithm == "personal_head:PersonalHead" and result.summary.rounds == 3
    assert list(result.metrics.version) == [0, 1, 2, 3] and len(result.clients) == 5
    assert set(result.events.status) == {"applied"} and len(result.events) == 15


def test_run_of_a_shipped_name_and_of_a_file_with_several_runs(tmp_path: Path) -> None:
    quick = load("quickstart", {"stop.virtual_time_s": 5, "runs.fedbuff.algorithm.buffer_size": "4"})
    assert len(quick.runs) == 5 and all(r.stop.virtual_time_s == 5 for r in quick.runs)
    assert [r.algorithm.params.buffer_size for r in quick.runs if r.name == "fedbuff"] == [4]
    file = _scenario_dir(tmp_path, "suite", SCENARIO + "runs:\n  - {name: half}\n  - {name: full, algorithm: "
                         "{scale: 1.0}}\n")
    both = run(file, out=tmp_path / "s")
    assert isinstance(both, SuiteResult) and set(both.runs) == {"half", "full"}
    assert list(both.summary.name) == ["half", "full"] and (tmp_path / "s" / "summary.parquet").is_file()
    assert not both["half"].metrics.equals(both["full"].metrics)


# --------------------------------------------------------------------------- failures reach the algorithm
class FailureLog(FedBuff):
    """FedBuff that writes down every task the server gave up on."""

    name = "failure_log"

    def server_task_failed(self, state: ServerState, failure: Any) -> ServerState:
        seen = list(state.extra.get("failures", []))
        seen.append((failure.client, failure.version_dispatched, failure.reason))
        return state.evolve(extra={**state.extra, "failures": seen})


def test_lost_and_timed_out_tasks_reach_the_failure_hook(tmp_path: Path) -> None:
    fast = {"compute": 100.0, "down_mbps": 100.0, "up_mbps": 100.0, "latency_s": 0.0}
    source = {"name": "fail", "dataset": {"name": "digits", "max_train_samples": 300}, "model": {"name": "mlp",
                                                                                              "hidden": [8]},
              "population": {"num_clients": 4, "compute_unit": "samples_per_s",
                             "connectivity": {"type": "per_task", "probability": 0.3},
                             "clients": [{"ids": [0, 1, 2], **fast},
                                         {"ids": [3], **fast, "compute": 5.0}]},
              "algorithm": {"name": FailureLog, "local_steps": 5, "batch_size": 10, "buffer_size": 2},
              "mode": {"type": "async", "concurrency": 3, "task_timeout_s": 3.0}, "stop": {"versions": 10},
              "evaluation": {"personalized": False}, "output": {"progress": False}}
    (scenario,) = parse_suite(source, "fail").runs
    runtime = Runtime("inline")
    run_scenario(scenario, runtime, tmp_path)
    state = runtime._server.state  # the inline server's final state
    events = pd.read_parquet(tmp_path / "events.parquet")
    given_up = events[events.status.isin(["lost", "timed_out"])].sort_values(["finished_at", "client"])
    assert {"lost", "timed_out"} <= set(given_up.status)
    expected = [(int(r.client), int(r.version_dispatched), str(r.status)) for r in given_up.itertuples()]
    assert sorted(state.extra["failures"]) == sorted(expected)  # each one once, with its reason
    assert state.version == 10  # failures never move the version


def test_py_modules_name_the_users_files_only(tmp_path: Path) -> None:
    file = _scenario_dir(tmp_path, "ship")
    shutil.copy(EXAMPLES / "personal_head" / "tiny_models.py", tmp_path / "ship_models.py")
    text = file.read_text().replace("{name: mlp, hidden: [8]}", '{name: "ship_models:TinyNet"}')
    file.write_text(text)
    (run_,) = load_suite(file).runs
    assert modules_to_ship([run_]) == sorted([str((tmp_path / "ship_algos.py").resolve()),
                                              str((tmp_path / "ship_models.py").resolve())])
