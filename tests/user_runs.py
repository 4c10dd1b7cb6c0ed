"""Helpers for the tests that run fedclock as a user does (the CLI in a subprocess, on a
Ray cluster) and compare the result with the same scenario file run inline in this process."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite


def fedasync_on_digits(name: str, seed: int, num_clients: int, versions: int, every: int, runtime: str,
                       output: str) -> str:
    """The YAML text of a small FedAsync run on digits: Dirichlet(0.5) split over
    ``num_clients`` clients with log-uniform compute in [20, 200], an 8-unit MLP, three tasks
    in flight, ``versions`` model versions, global evaluation every ``every`` versions;
    ``runtime`` and ``output`` are the sections' flow mappings."""
    return (f"name: {name}\n"
            f"seed: {seed}\n"
            "dataset: {name: digits, partition: {type: dirichlet, alpha: 0.5}}\n"
            "model: {name: mlp, hidden: [8]}\n"
            "population:\n"
            f"  num_clients: {num_clients}\n"
            "  devices: {compute: {dist: loguniform, low: 20, high: 200}}\n"
            "algorithm: {name: fedasync, lr: 0.1, local_epochs: 1, batch_size: 16}\n"
            "mode: {type: async, concurrency: 3}\n"
            f"stop: {{versions: {versions}}}\n"
            f"evaluation: {{every: {every}, personalized: false}}\n"
            f"runtime: {runtime}\n"
            f"output: {output}\n")


def run_inline(file: Path, out: Path, overrides: Sequence[str] = ()) -> None:
    """Run the one-run scenario ``file`` (with ``overrides``, ``field=value``) on the inline
    backend in this process, writing its results to ``out``."""
    (run,) = load_suite(file, list(overrides)).runs
    run_scenario(run, Runtime("inline"), out)
