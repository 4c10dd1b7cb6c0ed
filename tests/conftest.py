"""Shared fixtures: one Ray instance per test session, and small scenario builders."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from fedclock.scenarios.loader import parse_suite
from fedclock.scenarios.schema import Scenario

os.environ.setdefault("FEDCLOCK_CACHE_DIR", "off")
"""Counts are not kept on disk during tests (algorithms/task_cost.py): every test counts as it
did before the cache, and nothing is written to the home folder; tests/algorithms/test_count_cache.py
turns the cache on in a temporary folder."""

REPORTED_PACKAGES = ("torch", "numpy", "pandas", "pyarrow", "PyYAML", "pydantic", "ray", "scipy", "simpy")
"""The dependencies whose versions every test run prints in its header."""


def pytest_report_header() -> list[str]:
    """The CPU kernel path PyTorch runs on (``ATEN_CPU_CAPABILITY`` when set) and the installed
    versions of the main dependencies: what a failure on another machine must be read with."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def found(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    return [f"torch CPU kernels: {torch.backends.cpu.get_cpu_capability()}"
            + (f" (ATEN_CPU_CAPABILITY={forced})" if forced else ""),
            "versions: " + ", ".join(f"{name} {found(name)}" for name in REPORTED_PACKAGES)]


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[Any]:
    """A Ray runtime (2 CPUs) shared by every test that needs real actors, started as a local
    run starts it (no dashboard, on loopback)."""
    import ray

    from fedclock.actors.ray_start import start_ray
    from fedclock.actors.runtime import Runtime

    start_ray(None, num_cpus=2)
    runtime = Runtime("ray")
    try:
        yield runtime
    finally:
        runtime.close()
        ray.shutdown()


def scenario(**sections: Any) -> Scenario:
    """A one-run scenario from sections given as dicts (validated like a file). The tests'
    hand-computed durations are in training samples per second, so the population says
    ``compute_unit: samples_per_s`` unless a test gives the unit itself (or a device mix,
    whose library classes are in GFLOP/s)."""
    data = {"name": "test", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
            "population": {"num_clients": 3}, "algorithm": {"name": "fedavg"}, "stop": {"rounds": 2}}
    data.update(sections)
    population = data["population"]
    if isinstance(population, dict) and "compute_unit" not in population and "device_mix" not in population:
        data["population"] = {**population, "compute_unit": "samples_per_s"}
    return parse_suite(data, "test").runs[0]


@pytest.fixture
def make_scenario() -> Any:
    return scenario


def read_table(path: Path) -> Any:
    import pandas as pd

    return pd.read_parquet(path)
