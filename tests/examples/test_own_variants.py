"""The user-written device distribution and partition of ``examples/own_variants`` (walked
through in ``docs/own_variants.md``): each rule by hand, and the scenario file run from a copy
of its folder, whose clients have exactly the speeds the user's distribution draws and the
label-sorted blocks the user's partition makes (the shipped defaults give neither). One short
inline run (4 versions, 6 clients): 19 s measured at load 14 on the shared 2-core machine, most
of it the start-up of the first run of a session; not measured on a quiet machine."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from fedclock.scenarios.cli import main
from fedclock.scenarios.loader import load_suite
from fedclock.scenarios.data.partitions import partition_indices
from fedclock.scenarios.plugins import import_module
from fedclock.scenarios.results import resolved_dict
from fedclock.scheduling.rng import Stream, numpy_rng

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_variants"


class FixedPareto:
    """Stands in for a generator: ``pareto`` returns the given draws."""

    def pareto(self, shape: float, n: int) -> np.ndarray:
        return np.array([0.0, 1.0, 3.0])[:n]


def test_the_rules_by_hand() -> None:
    """Pareto: 50 * (1 + [0, 1, 3]) = [50, 100, 200]. Sorted blocks of labels [2, 0, 1, 0, 2]
    for two clients: sorted order 1, 3, 2, 0, 4, so samples 1, 3, 2 go to client 0."""
    mod = import_module("variants", EXAMPLE, "test")
    dist = mod.ParetoCompute(shape=1.5, low=50)
    assert dist.sample(3, FixedPareto()).tolist() == [50.0, 100.0, 200.0]
    owners = mod.SortedBlocks().owners(np.array([2, 0, 1, 0, 2]), 2, np.random.default_rng(0))
    assert owners.tolist() == [1, 0, 0, 0, 1]


def test_the_scenario_runs_with_its_own_variants(tmp_path: Path) -> None:
    """Copied elsewhere, the scenario finds variants.py beside it; the clients' speeds are the
    user's draws from the compute stream and every client's labels lie in its own block."""
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    assert main(["run", str(folder / "scenario.yaml"), "--set", "stop.versions=4", "--set",
                 "runtime.backend=inline", "--quiet", "--out", str(out)]) == 0
    scenario = load_suite(folder / "scenario.yaml").runs[0]
    resolved = resolved_dict(scenario)  # what scenario.resolved.yaml holds: the user's own fields
    assert resolved["population"]["devices"]["compute"] == {"dist": "variants:ParetoCompute", "shape": 1.5,
                                                            "low": 50.0}
    assert resolved["dataset"]["partition"] == {"type": "variants:SortedBlocks"}
    n = scenario.population.num_clients
    clients = pd.read_parquet(out / "clients.parquet").sort_values("client")
    drawn = scenario.population.devices.compute.sample(n, numpy_rng(scenario.seed, Stream.DEVICES, 0))
    assert np.array_equal(clients.compute.to_numpy(), drawn) and clients.compute.min() >= 50.0
    labels = np.repeat(np.arange(10), 7)
    parts = partition_indices(labels, n, scenario.dataset.partition, np.random.default_rng(0))
    assert all(labels[a].max() <= labels[b].min() for a, b in zip(parts, parts[1:]))
