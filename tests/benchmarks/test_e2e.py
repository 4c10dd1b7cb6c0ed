"""The end-to-end benchmark script: its scenario files are valid fedclock scenarios with the
workload's numbers, and its plain loop draws the same mini-batches as fedclock's
:func:`~fedclock.algorithms.training.batches` (so both sides do the same SGD steps)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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


def test_plain_loop_draws_fedclocks_batches() -> None:
    """The plain loop's indices for a client of 50 samples in batches of 12 (a batch straddles
    two permutations) are those of ``batches`` with the same generator seed. The labels are a
    subclass of ``torch.Tensor`` that notes each index it is read with: patching
    ``torch.Tensor.__getitem__`` itself (this test's first version) leaves the type with a
    sequence slot after the patch is undone, and a later test's ``torch.tensor`` of 0-d
    tensors in the same process then fails ("len() of a 0-d tensor")."""
    e2e = load_script("e2e")
    seen: list[torch.Tensor] = []

    class Labels(torch.Tensor):
        def __getitem__(self, idx: object) -> torch.Tensor:
            seen.append(idx.clone())  # type: ignore[attr-defined]
            return super().__getitem__(idx).as_subclass(torch.Tensor)  # type: ignore[index]

    x, y = torch.randn(50, 1, 28, 28), torch.randint(0, 10, (50,)).as_subclass(Labels)
    model = e2e.build_model(e2e.WORKLOADS["mlp"])
    e2e.local_sgd(model, x, y, {**e2e.WORKLOADS["mlp"], "batch": 12}, seed=7)
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


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("workload", ["cifar_cnn5", "cifar_resnet"])
def test_cifar_scenarios_are_the_workloads(tmp_path: Path, workload: str, device: str) -> None:
    """The CIFAR workloads: 1,000 clients, cohorts of 50, no client test split, the device
    and GPU fractions in ``runtime`` (a file the loader accepts without a GPU)."""
    e2e = load_script("e2e")
    work = e2e.WORKLOADS[workload]
    assert (work["clients"], work["cohort"], work["samples"], work["rounds"]) == (1000, 50, 50, 5)
    extra = {"device": device, "num_actors": 4, "num_gpus": 0.25} if device == "cuda" else {}
    (scenario,) = parse_suite(json.loads(e2e.scenario_text("w", work, tmp_path, 1, "ray", extra)), "e2e").runs
    assert (scenario.dataset.name, scenario.dataset.client_test_fraction, scenario.mode.cohort_size) == \
        ("cifar10", 0, 50)
    assert (scenario.runtime.device, scenario.runtime.num_gpus) == (device, 0.25 if device == "cuda" else 0.0)
    tiny = e2e.sized(work, tiny=True, rounds=3)
    assert (tiny["clients"], tiny["cohort"], tiny["rounds"]) == (e2e.TINY["clients"], e2e.TINY["cohort"], 3)


def test_generated_cifar_pickles_are_what_fedclock_and_the_plain_loop_read(tmp_path: Path) -> None:
    """The generated files are CIFAR-10's python pickles as fedclock's reader takes them: the
    same images and labels, the same standardization, as the plain loop's own reader."""
    from fedclock.scenarios.data.datasets import load_dataset
    from fedclock.scenarios.schema import DatasetConfig

    e2e = load_script("e2e")
    e2e.write_cifar10(tmp_path, train=20, test=6)
    ours = load_dataset(DatasetConfig(name="cifar10", root=str(tmp_path)), seed=0, num_clients=2)
    x_tr, y_tr, x_te, y_te = e2e.read_cifar10(tmp_path)
    assert x_tr.shape == (20, 3, 32, 32) and x_te.shape == (6, 3, 32, 32) and set(y_tr) <= set(range(10))
    # fedclock holds the training pool in its own order; compare as sorted rows
    key = lambda x: sorted(map(tuple, np.round(x.reshape(len(x), -1), 4).tolist()))  # noqa: E731
    assert key(ours.x_train.numpy()) == key(x_tr) and key(ours.x_test.numpy()) == key(x_te)
    assert sorted(ours.y_train.tolist()) == sorted(y_tr.tolist())
    assert sorted(ours.y_test.tolist()) == sorted(y_te.tolist())
    with pytest.raises(ValueError, match="multiple of 5"):
        e2e.write_cifar10(tmp_path / "bad", train=7, test=1)


def test_a_failing_or_hanging_side_is_reported_not_fatal() -> None:
    """A side that exits with an error or outlives ``--side-timeout`` raises ``SideFailed``
    (the script reports it and goes on with the other sides)."""
    import sys

    e2e = load_script("e2e")
    with pytest.raises(e2e.SideFailed, match="exit status 3: boom"):
        e2e.timed([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])
    with pytest.raises(e2e.SideFailed, match="timed out after 0.5 s"):
        e2e.timed([sys.executable, "-c", "import time; time.sleep(30)"], limit=0.5)
    wall, _ = e2e.timed([sys.executable, "-c", "pass"], limit=30)
    assert wall < 30
