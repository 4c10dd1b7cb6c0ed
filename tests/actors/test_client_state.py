"""Per-client state the runtime keeps: none for stateless algorithms, the returned state
(compact, and identical on every backend) for stateful ones."""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from fedclock.actors.executor import compact
from fedclock.actors.runtime import Runtime, Session
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[Session]:
    """Every Session the runtimes create during the test."""
    kept: list[Session] = []
    original = Session.__init__

    def keep(self: Session, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        kept.append(self)

    monkeypatch.setattr(Session, "__init__", keep)
    return kept


def _run(runtime: Runtime, out: Path, algorithm: str, clients: int, **runtime_cfg: Any) -> None:
    s = scenario(population={"num_clients": clients}, dataset={"name": "digits", "partition": {"type": "iid"}},
                 algorithm={"name": algorithm, "local_steps": 1, "batch_size": 4},
                 mode={"type": "sync", "cohort_fraction": 0.5}, stop={"rounds": 3},
                 evaluation={"every": 3, "personalized": False}, runtime={"backend": runtime.backend, **runtime_cfg})
    run_scenario(s, runtime, out)


def test_stateless_algorithm_keeps_no_per_client_reference(sessions: list[Session], tmp_path: Path) -> None:
    _run(Runtime("inline"), tmp_path / "fedavg", "fedavg", clients=60)
    _run(Runtime("inline"), tmp_path / "scaffold", "scaffold", clients=60)
    fedavg, scaffold = sessions
    assert fedavg.client_state == {}
    assert len(scaffold.client_state) > 30  # the stateful one keeps a state per client that trained
    _, states = scaffold.final_states()
    assert all(set(s) == {"control"} for s in states.values())


def test_ray_state_comes_back_identical(ray_runtime: Runtime, sessions: list[Session],
                                                              tmp_path: Path) -> None:
    _run(ray_runtime, tmp_path / "fedavg", "fedavg", clients=12, num_actors=1, placement="pooled")
    _run(ray_runtime, tmp_path / "ditto", "ditto", clients=12, num_actors=1, placement="pooled")
    _run(Runtime("inline"), tmp_path / "inline", "ditto", clients=12)
    fedavg, ray_ditto, inline_ditto = sessions
    assert fedavg.client_state == {}
    _, on_ray = ray_ditto.final_states()
    _, inline = inline_ditto.final_states()
    assert len(on_ray) > 6 and sorted(on_ray) == sorted(inline)
    for c in inline:
        assert torch.equal(on_ray[c]["personal"], inline[c]["personal"])


def test_compact_copies_views_only() -> None:
    flat = torch.arange(1000.0)
    state = {"head": flat[990:], "whole": torch.ones(3), "pair": (flat[:2], torch.zeros(2)), "n": 4}
    out = compact(state)
    assert torch.equal(out["head"], flat[990:]) and out["head"].untyped_storage().nbytes() == 40
    assert out["whole"] is state["whole"] and out["pair"][1] is state["pair"][1] and out["n"] == 4
    assert out["pair"][0].untyped_storage().nbytes() == 8
    assert len(pickle.dumps(out)) < len(pickle.dumps(state)) // 2  # the view no longer ships all 1000 floats
