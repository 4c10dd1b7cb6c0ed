"""The end-to-end benchmark script: its scenario files are valid fedclock scenarios with the
workload's numbers, and its plain loop draws the same mini-batches as fedclock's
:func:`~fedclock.algorithms.training.batches` (so both sides do the same SGD steps)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedclock.algorithms.training import batches
from fedclock.scenarios.loader import parse_suite
from tests.benchmarks.scripts import load_script


@pytest.mark.parametrize("backend,vectorize", [("ray", 1), ("ray", 32), ("inline", 1), ("inline", 32)])
@pytest.mark.parametrize("workload", ["mlp", "cnn5"])
def test_scenario_files_are_the_workloads(tmp_path: Path, workload: str, backend: str, vectorize: int) -> None:
    e2e = load_script("e2e")
    work = e2e.WORKLOADS[workload]
    text = e2e.scenario_text("w", work, tmp_path, vectorize, backend)
    (scenario,) = parse_suite(json.loads(text), "e2e").runs
    assert scenario.population.num_clients == work["clients"]
    params = scenario.algorithm.params
    assert (params.batch_size, params.lr, params.local_epochs, scenario.stop.rounds) == \
        (work["batch"], e2e.LR, 1, work["rounds"])
    assert (scenario.runtime.backend, scenario.runtime.vectorize) == (backend, vectorize)


def test_plain_loop_draws_fedclocks_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain loop's indices for a client of 50 samples in batches of 12 (a batch straddles
    two permutations) are those of ``batches`` with the same generator seed."""
    e2e = load_script("e2e")
    seen: list[torch.Tensor] = []
    x, y = torch.randn(50, 1, 28, 28), torch.randint(0, 10, (50,))
    model = e2e.build_model(e2e.WORKLOADS["mlp"])
    real_index = torch.Tensor.__getitem__

    def spy(self: torch.Tensor, idx: object) -> torch.Tensor:
        if self is y:
            seen.append(idx.clone())  # type: ignore[union-attr]
        return real_index(self, idx)

    monkeypatch.setattr(torch.Tensor, "__getitem__", spy)
    e2e.local_sgd(model, x, y, {**e2e.WORKLOADS["mlp"], "batch": 12}, seed=7)
    monkeypatch.undo()
    expected = list(batches(50, 12, 5, torch.Generator().manual_seed(7)))
    assert len(seen) == 5 and all(torch.equal(a, b) for a, b in zip(seen, expected))


@pytest.mark.parametrize("workload", ["mlp", "cnn5"])
def test_plain_model_is_fedclocks_layer_for_layer(workload: str) -> None:
    """The plain loop (and Flower) train the model fedclock builds for the scenario: the
    same parameter shapes in the same order."""
    from fedclock.algorithms.models import ModelFactory

    e2e = load_script("e2e")
    work = e2e.WORKLOADS[workload]
    ours = ModelFactory(work["model"], (1, 28, 28), 10, hidden=tuple(work["hidden"]) or (128,)).build()
    plain = e2e.build_model(work)
    assert [tuple(p.shape) for p in plain.parameters()] == [tuple(p.shape) for p in ours.parameters()]
