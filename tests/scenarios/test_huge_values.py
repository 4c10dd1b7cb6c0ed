"""Huge but well-typed numbers: every size has a documented upper bound, so a value that could
never be allocated (or would never finish) is a one-line ``validate`` error, not a crash in ``run``."""
from __future__ import annotations

import pytest

from fedclock.scenarios.data import datasets
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
    ("population: {num_clients: 100000000000}", ["population.num_clients", "GiB", "estimated before allocating",
                                                 "this machine's"]),
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


def test_too_many_synthetic_clients_is_a_dataset_error_before_any_allocation(monkeypatch) -> None:
    monkeypatch.setattr(datasets, "machine_memory", lambda: 200 * 2**20)  # 4M samples x 248 B do not fit
    cfg = DatasetConfig(name="synthetic", synthetic_samples=1000)
    with pytest.raises(DatasetError, match=r"^population.num_clients: 1,000,000 clients of at least 4 synthetic "
                                           r"samples x 60 features need about 0.9 GiB \(estimated before allocating\), "
                                           r"more than this machine's 0.2 GiB"):
        build_federation(cfg, 1_000_000, seed=0)


def test_a_population_beyond_a_million_validates_without_a_cap() -> None:
    text = BASE + "population: {num_clients: 2000000}, runtime: {backend: inline}}\n"
    assert validate_text(text).code == 0


def test_the_memory_estimate_names_the_field_and_the_estimate() -> None:
    from fedclock.scenarios.memory_estimate import FIXED_B, PER_CLIENT_B, memory_problem
    # 10^7 clients at PER_CLIENT_B each, no data, inline: fits in 8 GiB, not in 2 GiB
    need = FIXED_B + 10**7 * PER_CLIENT_B
    assert memory_problem(10**7, 0, "dataset.synthetic_samples", memory=8 * 2**30) is None
    problem = memory_problem(10**7, 0, "dataset.synthetic_samples", memory=2 * 2**30)
    assert problem == (f"population.num_clients: 10,000,000 clients and their data need about {need / 2**30:,.1f} GiB "
                       f"(clients {10**7 * PER_CLIENT_B / 2**30:,.1f} GiB, data 0.0 GiB, fixed "
                       f"{FIXED_B / 2**30:,.1f} GiB; estimated before allocating), more than this machine's 2.0 GiB "
                       f"of memory; use fewer clients or samples")
    # the data weigh more than the clients: the data's field is named
    assert memory_problem(10, 3 * 2**30, "dataset.synthetic_samples", memory=2 * 2**30).startswith(
        "dataset.synthetic_samples: 10 clients")
