"""Vectorized clients in runs: grouping by virtual instant, the same curves as sequential
execution, a killed executor's group re-run with the same numbers, and the loader's errors."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedclock.actors import executor as executor_module
from fedclock.actors.grouping import InstantGroups, split_balanced
from fedclock.actors.launcher import Launcher
from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError
from fedclock.scenarios.run_costs import CountedCosts
from tests.conftest import scenario
from tests.numerics import RunBounds, assert_close_events, assert_close_metrics, run_bounds

SYNC = dict(population={"num_clients": 10},
            dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
            model={"name": "mlp", "hidden": [32]}, algorithm={"name": "fedavg", "lr": 0.1, "batch_size": 10},
            mode={"type": "sync", "cohort_size": 6}, stop={"rounds": 4}, evaluation={"every": 2}, seed=3)


def test_split_balanced_and_instant_groups() -> None:
    assert split_balanced(list(range(10)), 8) == [list(range(5)), list(range(5, 10))]
    assert split_balanced(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_balanced([], 4) == [] and split_balanced([1], 4) == [[1]]
    groups: InstantGroups[str] = InstantGroups(2)
    assert groups.add(0.0, "a") == [] and groups.add(0.0, "b") == [] and groups.add(0.0, "c") == []
    assert groups.add(1.5, "d") == [["a", "b"], ["c"]]  # a later instant closes the earlier one's groups
    assert len(groups) == 1 and groups.flush() == [["d"]] and groups.flush() == []
    with pytest.raises(ValueError):
        InstantGroups(0)


def _run(out: Path, rt: Runtime, costs: CountedCosts | None = None,
         **sections: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    run_scenario(scenario(**{**SYNC, **sections}), rt, out, costs=costs)
    return (pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(out / "events.parquet"))


def _bounds(out: Path, **sections: Any) -> RunBounds:
    """The tolerances between this module's sequential and vectorized runs (:func:`run_bounds`)."""
    return run_bounds(scenario(**{**SYNC, **sections}), pd.read_parquet(out / "clients.parquet"))


def _assert_close_runs(a: tuple[pd.DataFrame, pd.DataFrame], b: tuple[pd.DataFrame, pd.DataFrame],
                       bounds: RunBounds) -> None:
    assert_close_metrics(a[0], b[0], bounds)
    assert_close_events(a[1], b[1], bounds)


@pytest.mark.numerics
def test_vectorized_run_gives_the_sequential_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = Launcher._start_groups

    def record(self: Launcher, groups: list[Any]) -> None:
        calls.extend(len(g) for g in groups)
        original(self, groups)

    monkeypatch.setattr(Launcher, "_start_groups", record)
    plain = _run(tmp_path / "one", Runtime("inline"), runtime={"backend": "inline"})
    assert calls == []
    vec = _run(tmp_path / "eight", Runtime("inline"), runtime={"backend": "inline", "vectorize": 8})
    assert calls == [6] * 4  # one group per round: the cohort, dispatched at one instant
    again = _run(tmp_path / "again", Runtime("inline"), runtime={"backend": "inline", "vectorize": 4})
    assert calls[4:] == [3, 3] * 4  # 6 tasks, at most 4 per group: two balanced groups
    bounds = _bounds(tmp_path / "one")
    _assert_close_runs(plain, vec, bounds)
    _assert_close_runs(plain, again, bounds)
    assert plain[0].global_accuracy.iloc[-1] > 0.5  # it learns (10 classes)


@pytest.mark.numerics
def test_async_vectorized_run_matches_and_groups_only_one_instant(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sections = dict(algorithm={"name": "fedbuff", "lr": 0.1, "batch_size": 10, "buffer_size": 2},
                    mode={"type": "async", "concurrency": 4}, stop={"versions": 6},
                    population={"num_clients": 10, "devices": {"compute": {"dist": "loguniform", "low": 20,
                                                                           "high": 200}}})
    seen: list[list[int]] = []
    original = Launcher._start_groups

    def record(self: Launcher, groups: list[Any]) -> None:
        if groups:
            seen.append([len(g) for g in groups])
        original(self, groups)

    monkeypatch.setattr(Launcher, "_start_groups", record)
    plain = _run(tmp_path / "one", Runtime("inline"), runtime={"backend": "inline"}, **sections)
    vec = _run(tmp_path / "vec", Runtime("inline"), runtime={"backend": "inline", "vectorize": 8}, **sections)
    assert seen[0] == [4]  # the four slots filled at time 0 train together; refills arrive one at a time
    _assert_close_runs(plain, vec, _bounds(tmp_path / "one", **sections))


def test_a_killed_executor_reruns_its_group_with_the_same_numbers(ray_runtime: Runtime, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    cfg = {"backend": "ray", "num_actors": 2, "placement": "pooled", "vectorize": 3}
    calm = _run(tmp_path / "calm", Runtime("inline"), runtime={**cfg, "backend": "inline"}, stop={"rounds": 2})
    original = Launcher._start_groups
    kills: list[int] = []

    def start_and_kill(self: Launcher, groups: list[Any]) -> None:
        original(self, groups)
        if groups and len(kills) < 2:  # the executor of the first group dies with the round's groups in flight
            ray.kill(self.calls.executors[groups[0][0].slot], no_restart=True)
            kills.append(len(groups))

    monkeypatch.setattr(Launcher, "_start_groups", start_and_kill)
    hit = _run(tmp_path / "hit", ray_runtime, runtime=cfg, stop={"rounds": 2})
    assert kills == [2, 2]
    pd.testing.assert_frame_equal(calm[0], hit[0], check_exact=True)
    pd.testing.assert_frame_equal(calm[1], hit[1], check_exact=True)


def _assert_same_clients(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """The clients tables: the devices, counts and busy times come from the clock, which the
    vectorized path does not change (exact)."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for col in a.columns:
        if a[col].dtype.kind == "f":
            np.testing.assert_array_equal(b[col].to_numpy(), a[col].to_numpy())
        else:
            assert [list(v) if isinstance(v, np.ndarray) else v for v in a[col]] == \
                [list(v) if isinstance(v, np.ndarray) else v for v in b[col]]


@pytest.mark.numerics
@pytest.mark.parametrize("algorithm", [
    {"name": "scaffold", "lr": 0.1, "batch_size": 10, "momentum": 0.5},
    {"name": "fedcm", "lr": 0.1, "batch_size": 10, "alpha": 0.3},
    {"name": "ditto", "lr": 0.1, "batch_size": 10, "lam": 0.1, "personal_steps": 4},
    {"name": "fedavg_ft", "lr": 0.1, "batch_size": 10, "finetune_epochs": 1},
], ids=lambda a: a["name"])
def test_more_algorithms_vectorized_give_the_sequential_run(tmp_path: Path, algorithm: dict[str, Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Stateful clients (SCAFFOLD's controls, Ditto's personal models) and server vectors
    (FedCM's momentum) over three rounds: metrics (personalized accuracy included, Ditto's
    personal models and FedAvg-FT's fine-tuned ones evaluated many at once), events and the
    clients table as without vectorizing. 600 training samples: clients of 16 to 83 (2 to 9 local
    steps, so groups stay ragged), where Ditto's task, counted per client size, is cheaper to
    count than on the whole pool (50 to 206 samples, 5 to 21 steps)."""
    sections = dict(algorithm=algorithm, stop={"rounds": 3}, evaluation={"every": 1},
                    dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5},
                             "client_test_fraction": 0.2, "max_train_samples": 600})
    batched: list[int] = []
    original = executor_module.evaluate_clients

    def spy(algorithm: Any, payloads: Any, *rest: Any) -> Any:
        batched.append(len(payloads))
        return original(algorithm, payloads, *rest)

    monkeypatch.setattr(executor_module, "evaluate_clients", spy)
    costs = CountedCosts()  # counted once for both runs, as the runs of one file share them (Ditto: per size)
    plain = _run(tmp_path / "one", Runtime("inline"), runtime={"backend": "inline"}, costs=costs, **sections)
    assert batched == []
    vec = _run(tmp_path / "vec", Runtime("inline"), runtime={"backend": "inline", "vectorize": 8}, costs=costs,
               **sections)
    assert (max(batched, default=0) > 1) == (algorithm["name"] in ("ditto", "fedavg_ft"))
    _assert_close_runs(plain, vec, _bounds(tmp_path / "one", **sections))
    _assert_same_clients(pd.read_parquet(tmp_path / "one" / "clients.parquet"),
                         pd.read_parquet(tmp_path / "vec" / "clients.parquet"))
    if algorithm["name"] in ("ditto", "fedavg_ft"):
        assert plain[0]["personal_accuracy_mean"].notna().all()


@pytest.mark.parametrize("sections,message", [
    (dict(algorithm={"name": "mofedsam"}), "runtime.vectorize: algorithm 'mofedsam' does not support vectorized "
     "clients (allowed: ditto, fedasync, fedavg, fedavg_async, fedavg_ft, fedbuff, fedcm, fedexp, fednova, fedprox, "
     "local, scaffold); 1 turns it off"),
    (dict(model={"name": "resnet18_gn"}), "runtime.vectorize: model 'resnet18_gn' is not supported"),
    (dict(algorithm={"name": "fedavg", "objective": "simclr"}), "runtime.vectorize: vectorized clients train the "
     "supervised objective only (algorithm.objective is 'simclr')"),
    (dict(placement="dedicated"), "runtime.vectorize: vectorized clients need pooled placement"),
])
def test_loader_errors(sections: dict[str, Any], message: str) -> None:
    runtime = {"vectorize": 4, **({"placement": sections.pop("placement")} if "placement" in sections else {})}
    with pytest.raises(ScenarioError, match=None) as info:
        scenario(**sections, runtime=runtime)
    assert message in str(info.value) and "\n" not in str(info.value)
    scenario(**sections, runtime={**runtime, "vectorize": 1})  # the same settings are fine without it
