"""The user-written availability model of ``examples/weibull_availability`` (walked through in
``docs/own_availability.md``): its switching rule by hand, and its scenario file run from its
folder, where no task starts while its client is offline and the dispatch times differ from
the same run with every client always available (the model's ablation). Two short inline
runs (6 versions, 8 clients; about 9 s on a quiet 2-core machine): the example run end to end,
against its ablation, is what the test is for."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedclock.scenarios.cli import main
from fedclock.scenarios.loader import load_suite
from fedclock.scenarios.plugins import import_module
from fedclock.scheduling.availability_config import TraceFiles

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "weibull_availability"


class FixedDraws:
    """Stands in for a generator: ``weibull`` returns the given draws in order."""

    def __init__(self, draws: list[float]) -> None:
        self.draws = iter(draws)

    def weibull(self, shape: float) -> float:
        return next(self.draws)


def test_switch_times_by_hand() -> None:
    """Up for 2 * 1.5 = 3 s, down for 5 * 0.4 = 2 s, up for 2 * 0.5 = 1 s, down ...: online on
    [0, 3) and [5, 6)."""
    mod = import_module("weibull", EXAMPLE, "test")
    model = mod.WeibullSwitching((0.7, 2.0), (0.7, 5.0), True, FixedDraws([1.5, 0.4, 0.5, 1.0, 1.0]))
    assert model.state(0.0) == (True, 3.0) and model.state(2.999) == (True, 3.0)
    assert model.state(3.0) == (False, 5.0) and model.state(5.0) == (True, 6.0)
    assert model.available(6.5, 0) is False and model.next_change(6.5) == 11.0


def _dispatches(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "events.parquet")[["client", "dispatched_at"]]


def test_the_scenario_runs_with_its_own_model(tmp_path: Path) -> None:
    """Copied elsewhere, the scenario finds weibull.py beside it; every task starts while its
    client is online by the model the file names, and the run differs from the ablation."""
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    sets = ["--set", "stop.versions=6", "--set", "runtime.backend=inline"]
    assert main(["run", str(folder / "scenario.yaml"), *sets, "--quiet", "--out", str(tmp_path / "weibull")]) == 0
    assert main(["run", str(folder / "scenario.yaml"), *sets, "--set", "population.availability={type: always}",
                 "--quiet", "--out", str(tmp_path / "always")]) == 0
    scenario = load_suite(folder / "scenario.yaml").runs[0]
    models: list[Any] = [scenario.population.availability.build(scenario.seed, c, TraceFiles())
                         for c in range(scenario.population.num_clients)]
    weibull = _dispatches(tmp_path / "weibull")
    assert all(models[c].available(t, 0) for c, t in zip(weibull.client, weibull.dispatched_at))
    always = _dispatches(tmp_path / "always")
    assert not all(models[c].available(t, 0) for c, t in zip(always.client, always.dispatched_at))
    assert not np.array_equal(weibull.to_numpy(), always.to_numpy())
