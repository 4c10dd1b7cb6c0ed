"""Huge but well-typed numbers: every size has a documented upper bound, so a value that could
never be allocated (or would never finish) is a one-line ``validate`` error, not a crash in ``run``."""
from __future__ import annotations

import pytest

from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.schema import DatasetConfig
from tests.scenarios.test_bad_input import assert_one_line_error, validate_text

BASE = "{name: x, algorithm: {name: fedavg}, stop: {rounds: 1}, "


@pytest.mark.parametrize("section, names", [
    ("runtime: {threads_per_actor: 100000000000}", ["runtime.threads_per_actor", "1024"]),
    ("runtime: {num_cpus: 1.0e+40}", ["runtime.num_cpus", "1024"]),
    ("runtime: {num_actors: 100000000000}", ["runtime.num_actors"]),
    ("runtime: {num_gpus: 1.0e+9}", ["runtime.num_gpus"]),
    ("model: {hidden: [100000000000]}", ["model.hidden[0]", "16384"]),
    ("model: {hidden: [8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8]}", ["model.hidden", "16"]),
    ("dataset: {name: synthetic, synthetic_samples: 100000000000}", ["dataset.synthetic_samples"]),
    ("dataset: {name: synthetic, synthetic_features: 100000000000}", ["dataset.synthetic_features"]),
    ("dataset: {name: synthetic, synthetic_samples: 5000000, synthetic_features: 5000}",
     ["dataset.synthetic_samples", "5000 features"]),
    ("population: {num_clients: 2000000}", ["population.num_clients", "1000000"]),
    ("algorithm: {name: fedavg, lr: 1.0e+35}", ["algorithm.lr", "1e+30"]),
    ("algorithm: {name: fedasync, a: -1.0e+35}", ["algorithm.a"]),
    ("algorithm: {name: fedavg, local_epochs: 1.0e+300}", ["algorithm.local_epochs"]),
    ("algorithm: {name: fedavg, local_steps: 100000000000000}", ["algorithm.local_steps"]),
], ids=lambda v: str(v)[:40])
def test_huge_values_are_one_line_errors(section: str, names: list[str]) -> None:
    if section.startswith("algorithm"):
        mode = "mode: {type: async}, " if "fedasync" in section else ""
        text = "{name: x, stop: {rounds: 1}, " + mode + section + "}\n"
    else:
        text = BASE + section + "}\n"
    assert_one_line_error(validate_text(text), *names)


def test_too_many_synthetic_clients_is_a_dataset_error_before_any_allocation() -> None:
    cfg = DatasetConfig(name="synthetic", synthetic_samples=1000)
    with pytest.raises(DatasetError, match=r"^population.num_clients: 1000000 clients of at least 4 synthetic samples"):
        build_federation(cfg, 1_000_000, seed=0)
