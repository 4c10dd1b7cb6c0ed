"""Start-up cost: what a run imports before its first task (issue 19's start-up budget).

A cold ``fedclock run`` and every Ray actor import the CLI / executor modules and the
algorithm registry. Heavy libraries that only some runs need (SciPy through ``dp-accounting``
for DP runs, pandas for trace files and the Python API's frames, torchvision for image
datasets on disk) are imported where they are used; together they cost about a second of
every process's start-up on a 2-core machine. This test fails when one of them is imported
at module level again."""
from __future__ import annotations

import subprocess
import sys

import pytest

ON_DEMAND = ("scipy", "pandas", "dp_accounting", "torchvision", "matplotlib", "sklearn")


@pytest.mark.parametrize("modules", [
    ["fedclock.scenarios.cli"],
    ["fedclock.actors.executor", "fedclock.actors.server", "fedclock.algorithms.registry",
     "fedclock.algorithms.vectorized"],
])
def test_a_run_imports_no_on_demand_library(modules: list[str]) -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + f"print(' '.join(m for m in {ON_DEMAND!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"imported at start-up: {loaded}"


def test_loading_the_bundled_digits_imports_no_scikit_learn() -> None:
    """The quickstart's data: scikit-learn's digits file is read without importing scikit-learn
    (scenarios/data/datasets.py: _digits_arrays); the arrays equal load_digits' (tests/scenarios/test_datasets.py)."""
    code = ("import sys\nfrom fedclock.scenarios.data.datasets import load_dataset\n"
            "from fedclock.scenarios.schema import DatasetConfig\n"
            "load_dataset(DatasetConfig(name='digits'), seed=0, num_clients=2)\nprint('sklearn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"]
