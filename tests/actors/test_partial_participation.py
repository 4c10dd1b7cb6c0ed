"""Partial participation at scale: with 200 clients and 5% sampled per round, only the
sampled clients do work; unsampled clients cost nothing but their stored state (and a client
never sampled has none)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.actors.executor import ClientExecutor
from fedclock.actors.runtime import Runtime, Session
from fedclock.actors.server import Server
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario


def test_unsampled_clients_cost_only_their_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, int] = {"train": 0, "evaluate": 0, "payload_for": 0}
    sessions: list[Session] = []

    def counting(cls: type, method: str) -> None:
        original = getattr(cls, method)

        def wrapper(self: Any, *args: Any) -> Any:
            calls[method] += 1
            return original(self, *args)

        monkeypatch.setattr(cls, method, wrapper)

    counting(ClientExecutor, "train")
    counting(ClientExecutor, "evaluate")
    counting(Server, "payload_for")
    original_session = Runtime.session

    def keep_session(self: Runtime, *args: Any, **kwargs: Any) -> Session:
        sessions.append(original_session(self, *args, **kwargs))
        return sessions[-1]

    monkeypatch.setattr(Runtime, "session", keep_session)
    rounds = 4
    s = scenario(population={"num_clients": 200}, dataset={"name": "digits", "partition": {"type": "iid"}},
                 algorithm={"name": "scaffold", "local_steps": 1, "batch_size": 4},
                 mode={"type": "sync", "cohort_fraction": 0.05}, stop={"rounds": rounds},
                 evaluation={"every": 2, "personalized": False})
    run_scenario(s, Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    assert len(events) == 10 * rounds and events.groupby("round").size().tolist() == [10] * rounds
    assert calls["train"] == 10 * rounds  # no work for the 190 unsampled clients of a round
    assert calls["payload_for"] == rounds  # one shared payload per server version, not per client
    assert calls["evaluate"] == 0  # no per-client evaluation when personalized accuracy is off
    sampled = set(events.client.tolist())
    assert set(sessions[0].client_state) == sampled and len(sampled) < 200  # state only for those that ran
