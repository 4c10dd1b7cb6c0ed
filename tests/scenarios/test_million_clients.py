"""Populations beyond a million clients (issue 50): no cap, flat per-client state, and the
synthetic data's block draws and natural split at that size."""
from __future__ import annotations

import time

import numpy as np
import pytest

from fedclock.scenarios.data import federation as federation_module
from fedclock.scenarios.data.datasets import load_synthetic
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.data.partitions import partition_indices
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng
from fedclock.scenarios.loader import parse_suite
from fedclock.scenarios.schema import DatasetConfig
from fedclock.scenarios.selection_config import build_selector
from fedclock.scheduling.availability import DiurnalClients
from fedclock.scheduling.clock import Clock, TaskCosts
from fedclock.scheduling.devices import Devices
from fedclock.scheduling.diurnal_index import DiurnalIndex
from fedclock.scheduling.modes import StopConfig
from fedclock.scheduling.population import population_availability


class _Free:
    """Tasks cost nothing and report a loss (Oort reads it)."""

    def __init__(self) -> None:
        self.version = 0

    def start(self, task) -> None:  # type: ignore[no-untyped-def]
        task.metrics = {"train_loss": 1.0 + task.client % 7}

    def apply(self, tasks) -> int:  # type: ignore[no-untyped-def]
        self.version += 1
        return self.version

    def release(self, task, keep_state: bool) -> None:  # type: ignore[no-untyped-def]
        pass

    def failed(self, task) -> None:  # type: ignore[no-untyped-def]
        pass

    def evaluate(self) -> dict[str, float]:
        return {}


class _Rows:
    def __init__(self) -> None:
        self.ended: list = []

    def task_ended(self, task) -> None:  # type: ignore[no-untyped-def]
        self.ended.append(task)

    def evaluated(self, *args) -> None:  # type: ignore[no-untyped-def]
        pass

    def progress(self, *args) -> None:  # type: ignore[no-untyped-def]
        pass


def test_a_population_beyond_a_million_validates_and_runs() -> None:
    n = 1_050_000
    start = time.perf_counter()
    scenario = parse_suite({
        "name": "big", "seed": 3, "algorithm": {"name": "fedavg"}, "stop": {"rounds": 3},
        "dataset": {"name": "synthetic", "synthetic_samples": 4 * n, "synthetic_features": 2,
                    "synthetic_draws": "blocks", "partition": {"type": "natural"}, "client_test_fraction": 0},
        "population": {"num_clients": n, "availability": {"type": "diurnal", "phases": "population"}},
        "mode": {"type": "sync", "cohort_size": 10}, "selection": {"name": "oort"},
        "evaluation": {"personalized": False}, "runtime": {"backend": "inline"}}, "big").runs[0]
    models = population_availability(scenario.population, scenario.seed)
    assert isinstance(models, DiurnalClients) and len(models) == n
    recorder = _Rows()
    clock = Clock(devices=Devices.draw(scenario.population, scenario.seed), availability=models,
                  client_sizes=np.full(n, 4), costs=TaskCosts(1000, 1000, lambda k: float(k)), mode=scenario.mode,
                  stop=StopConfig(rounds=3), eval_every=10**9, backend=_Free(), recorder=recorder,
                  seed=scenario.seed, selector=build_selector(scenario.selection, scenario.seed))
    assert isinstance(clock.cohorts.idle, DiurnalIndex)
    assert clock.run() == "rounds"
    picked = [t.client for t in recorder.ended]
    assert len(picked) == 30
    assert all(len(set(picked[r * 10:r * 10 + 10])) == 10 for r in range(3))
    assert all(models[c].available(t.dispatched_at, 0) for c, t in zip(picked, recorder.ended))
    assert time.perf_counter() - start < 30  # seconds (about 3 on an idle core)


def test_block_draws_keep_the_sizes_and_the_skew_of_the_per_client_draws() -> None:
    one, block = (load_synthetic(DatasetConfig(name="synthetic", synthetic_samples=20_000, synthetic_features=8,
                                               synthetic_draws=d), 5, 2_000) for d in ("client", "blocks"))
    assert one.x_train.shape == block.x_train.shape and one.x_test.shape == block.x_test.shape
    assert np.array_equal(one.natural_clients.offsets, block.natural_clients.offsets)
    assert not np.allclose(one.x_train.numpy()[:50], block.x_train.numpy()[:50])  # other draws

    def top_share(ds) -> float:  # each client's most frequent label's share, averaged: the label skew
        y, ends = ds.y_train.numpy(), ds.natural_clients.offsets
        return float(np.mean([np.bincount(y[a:b]).max() / (b - a) for a, b in zip(ends[:-1], ends[1:]) if b - a >= 20]))

    assert top_share(block) == pytest.approx(top_share(one), abs=0.05)
    assert top_share(block) > 0.4  # far from IID's ~0.1 + noise


def test_nothing_held_out_keeps_each_client_sorted_in_one_pass() -> None:
    flat = np.array([5, 3, 9, 0, 1, 2, 8, 7])
    offsets = np.array([0, 3, 3, 6, 8])
    out = federation_module._sorted_within(flat, offsets)
    assert out.tolist() == [3, 5, 9, 0, 1, 2, 7, 8]
    ordered = np.arange(10)
    assert federation_module._sorted_within(ordered, np.array([0, 4, 10])) is ordered
    cfg = DatasetConfig(name="synthetic", synthetic_samples=3_000, synthetic_features=4, partition={"type": "iid"},
                        client_test_fraction=0)
    fed = build_federation(cfg, 40, seed=1)
    ds = load_synthetic(cfg, 1, 40)
    parts = partition_indices(ds.y_train.numpy(), 40, cfg.partition, numpy_rng(1, Stream.DATA, DataStream.PARTITION))
    assert [a.tolist() for a in fed.client_train] == [np.sort(p).tolist() for p in parts]
    assert len(fed.client_test.flat) == 0
