"""Inheritance that works (issue 44): a subclass of a shipped algorithm keeps its parent's
behaviour unless it overrides something. Its class flags are inherited, except those that
speak of a hook it (or a layer in front of it) overrides (``HOOK_FLAGS`` in
``algorithms/base.py``), which fall to their safe value until declared again.

The run test: ``class MyAvg(FedAvg)`` with one trivial override gives FedAvg's tables bit for
bit in a setting where the flags act (vectorized clients, a deadline whose late tasks are not
computed because the clients are stateless); with the flags reset, as before, the loader
refuses it (not vectorizable)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from fedclock.algorithms.base import HOOK_FLAGS, Algorithm, Arrival, ServerState
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.fedprox import FedProx
from fedclock.scenarios.api import run

FLAGS = sorted(HOOK_FLAGS)


class MyAvg(FedAvg):
    """FedAvg with its server step written out again (calls FedAvg's)."""

    def server_receive(self, state: ServerState, arrivals: list[Arrival], rng: Any) -> tuple[ServerState, bool]:
        return super().server_receive(state, arrivals, rng)


class MyMetrics(FedAvg):
    """FedAvg that overrides a hook no flag speaks of."""

    def server_metrics(self, state: ServerState) -> dict[str, float]:
        return super().server_metrics(state)


class MyStep(FedAvg):
    """FedAvg whose client step is overridden (even trivially): the client-step flags drop."""

    def client_update(self, *args: Any) -> Any:
        return super().client_update(*args)


class MyStepDeclared(MyStep):
    vectorizable = True  # declared again: kept (and inherited from here on)


class _Layer:
    def client_update(self, *args: Any) -> Any:
        return super().client_update(*args)  # type: ignore[misc]


class Layered(_Layer, FedAvg):
    """A layer in front of FedAvg that changes the client step."""


def _flags(cls: type[Algorithm[Any]]) -> dict[str, Any]:
    return {flag: getattr(cls, flag) for flag in FLAGS}


def test_flags_are_inherited_unless_a_hook_they_speak_of_is_overridden() -> None:
    fedavg = _flags(FedAvg)
    assert fedavg["vectorizable"] and fedavg["stateless_clients"] and fedavg["aggregates_deltas"]
    assert _flags(MyMetrics) == fedavg
    assert _flags(MyAvg) == {**fedavg, "aggregates_deltas": False}  # its server step is its own
    safe = {flag: default for flag, (default, _) in HOOK_FLAGS.items()}
    assert _flags(MyStep) == safe and _flags(Layered) == safe
    assert _flags(MyStepDeclared) == {**safe, "vectorizable": True}

    class Below(MyStepDeclared):
        pass

    assert _flags(Below) == _flags(MyStepDeclared)
    # FedProx overrides the client step and declares what it keeps
    assert _flags(FedProx) == fedavg


SOURCE = {"name": "inherit", "dataset": {"name": "digits", "max_train_samples": 400},
          "model": {"name": "mlp", "hidden": [8]},
          "population": {"num_clients": 6, "compute_unit": "samples_per_s",
                         "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 400}}},
          "mode": {"type": "sync", "cohort_size": 4, "deadline_s": 1.0}, "stop": {"rounds": 4},
          "algorithm": {"local_steps": 3, "lr": 0.1, "batch_size": 16},
          "evaluation": {"personalized": False}, "runtime": {"backend": "inline", "vectorize": 4},
          "output": {"progress": False}}


def _tables(out: Path, algorithm: Any) -> dict[str, pd.DataFrame]:
    result = run({**SOURCE, "algorithm": {**SOURCE["algorithm"], "name": algorithm}}, out=out)
    return {"metrics": result.metrics.drop(columns="wall_time"), "events": result.events, "clients": result.clients}


def test_a_subclass_with_one_trivial_override_gives_fedavgs_tables_bit_for_bit(tmp_path: Path) -> None:
    base = _tables(tmp_path / "fedavg", "fedavg")
    mine = _tables(tmp_path / "mine", MyAvg)
    events = base["events"]
    assert set(events.status) >= {"applied", "dropped"}  # the deadline drops some: not every task runs
    assert base["metrics"].version.max() >= 3
    for name in base:
        pd.testing.assert_frame_equal(mine[name], base[name], check_exact=True)
