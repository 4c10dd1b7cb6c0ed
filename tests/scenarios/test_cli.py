"""The ``fedclock`` command: listings, validation, one-line errors, and a real run."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedclock.algorithms.registry import algorithm_names
from fedclock.scenarios.cli import main
from fedclock.scenarios.data.dataset_specs import DATASET_NAMES
from tests.scenarios.one_line import assert_one_line, one_line_error, run_cli

GOOD = """\
name: ok
dataset: {name: digits}
population: {num_clients: 3}
algorithm: {name: fedavg}
stop: {rounds: 1}
"""

# (file text, text the one-line error must contain)
MALFORMED = [
    (GOOD.replace("fedavg", "fedavgg"), "algorithm.name: unknown algorithm 'fedavgg' (allowed: "),
    (GOOD + "population: {num_clients: 4}\n", "duplicate key 'population'"),
    (GOOD.replace("population: {num_clients: 3}", "population: {num_clients: 3, devices: {down_mbps: -5}}"),
     "population.devices.down_mbps"),
    (GOOD + "mode: {type: async, deadline_s: 5}\n", "mode.deadline_s: unknown field"),
    (GOOD.replace("stop: {rounds: 1}", "stop: {versions: 3}") + "mode: {type: sync, concurrency: 2}\n",
     "mode.concurrency: unknown field"),
    (GOOD + "mode: {type: async, concurrency: 2}\n", "stop.rounds: counts sync rounds"),
    (GOOD.replace("num_clients: 3", "num_clients: three"), "population.num_clients"),
    (GOOD.replace("stop: {rounds: 1}", "stop: {}"), "stop: set at least one of rounds, versions, virtual_time_s"),
    (GOOD.replace("name: digits", "name: imagenet"), "dataset.name"),
    (GOOD.replace("{name: fedavg}", "{name: fedavg, lr: -1}"), "algorithm.lr"),
    (GOOD.replace("{name: fedavg}", "{name: fedavg, learning_rate: 0.1}"), "algorithm.learning_rate: unknown field"),
    (GOOD.replace("{name: fedavg}", "{name: fedasync}"), "mode.type: algorithm 'fedasync' does not run in sync mode"),
    (GOOD + "mode: {type: sync, cohort_size: 2, cohort_fraction: 0.5}\n", "mode.cohort_size"),
    (GOOD + "mode: {type: sync, late_results: include}\n", "mode.late_results: 'include' needs deadline_s"),
    (GOOD + "runtime: {backend: slurm}\n", "runtime.backend"),
    (GOOD.replace("{name: fedavg}", "{name: fedsam, objective: simclr}"),
     "algorithm.objective: algorithm 'fedsam' does not train with 'simclr' (allowed: supervised)"),
    (GOOD + "seed: [1, 2]\n", "seed"),
    (GOOD + "colour: blue\n", "colour: unknown field"),
    ("name: ok\nalgorithm: {name: fedavg\n", "invalid YAML"),
    ("", "the file must be a mapping"),
    ("- a\n- b\n", "the file must be a mapping"),
    (GOOD + "dataset: {name: mnist}\n", "duplicate key 'dataset'"),
    ("!!python/object/apply:os.system ['echo hi']\n", "invalid YAML"),
]


def _validate(tmp_path: Path, text: str) -> tuple[int, str]:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return run_cli(["validate", str(path)])


def test_good_file_validates(tmp_path: Path) -> None:
    code, err = _validate(tmp_path, GOOD)
    assert code == 0 and err == ""


@pytest.mark.parametrize("text, expected", MALFORMED)
def test_malformed_file_gives_one_line_error(tmp_path: Path, text: str, expected: str) -> None:
    assert_one_line(*_validate(tmp_path, text), expected)


def test_bad_override_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(GOOD, encoding="utf-8")
    one_line_error(["validate", str(path), "--set", "population.devices.compute=-3"], "population.devices.compute")


def test_missing_dataset_names_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.replace("{name: digits}", f"{{name: mnist, root: {tmp_path / 'nodata'}}}"), encoding="utf-8")
    one_line_error(["run", str(path), "--backend", "inline", "--quiet", "--out", str(tmp_path / "out")],
                   str(tmp_path / "nodata"), "download")


def test_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in algorithm_names())
    assert main(["list", "datasets"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in DATASET_NAMES)
    assert main(["list", "scenarios"]) == 0
    out = capsys.readouterr().out
    assert "quickstart" in out and "library/async_heterogeneous" in out


def test_quickstart_runs_and_sync_fedavg_reaches_085(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command, on the inline backend: every run completes and writes its
    files, and sync FedAvg reaches the issue's 0.85 global accuracy."""
    out = tmp_path / "qs"
    assert main(["run", "quickstart", "--backend", "inline", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for run in ("fedavg-sync", "fedavg-deadline", "fedavg-async", "fedasync", "fedbuff"):
        assert run in printed
        for name in ("metrics.parquet", "events.parquet", "clients.parquet", "scenario.resolved.yaml"):
            assert (out / run / name).is_file()
    summary = pd.read_parquet(out / "summary.parquet").set_index("name")
    assert summary.loc["fedavg-sync", "global_accuracy"] >= 0.85
    assert summary.loc["fedavg-deadline", "stragglers_dropped"] > 0
    assert summary.loc["fedasync", "mean_staleness"] > 0
    # the resolved scenario of a run loads again as a valid file
    assert main(["validate", str(out / "fedavg-sync" / "scenario.resolved.yaml")]) == 0


def test_partial_work_rejected_for_multi_phase_algorithm(tmp_path: Path) -> None:
    text = GOOD.replace("{name: fedavg}", "{name: fedpac}").replace(
        "population: {num_clients: 3}", "population: {num_clients: 3, completeness: {type: fraction, value: 0.5}}")
    assert_one_line(*_validate(tmp_path, text),
                    "population.completeness.type: algorithm 'fedpac' always runs its full local work (allowed: full")


def test_list_scenarios_shows_reproduces(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import fedclock.scenarios.cli as cli
    from fedclock.scenarios.loader import load_suite

    (tmp_path / "library").mkdir()
    paper = tmp_path / "library" / "paper.yaml"
    paper.write_text("name: p\ndescription: a paper file\nreproduces: SPFL/PLGA, Table 5\n"
                     "algorithm: {name: local}\nstop: {rounds: 1}\n")
    (tmp_path / "plain.yaml").write_text("name: q\ndescription: no claim\nalgorithm: {name: fedavg}\n"
                                         "stop: {rounds: 1}\n")
    monkeypatch.setattr(cli, "scenario_dir", lambda: tmp_path)
    assert main(["list", "scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("library/paper" in ln and "a paper file" in ln and "[reproduces: SPFL/PLGA, Table 5]" in ln
               for ln in lines)
    assert any("plain" in ln and "reproduces" not in ln for ln in lines)
    assert load_suite(paper).runs[0].reproduces == "SPFL/PLGA, Table 5"
