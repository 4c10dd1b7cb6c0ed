"""Linear CKA on hand-made matrices, per-layer CKA of models, and the scenario's analysis field."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.cka import layer_cka, layer_names, linear_cka, local_model_after_training
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.loader import ScenarioError, parse_suite
from tests.algorithms.tiny import DATA, FACTORY, W, gen


def matrix(n: int, p: int, seed: int) -> torch.Tensor:
    return torch.randn(n, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_identical_representations_give_one() -> None:
    x = matrix(20, 5, 0)
    assert linear_cka(x, x) == pytest.approx(1.0)
    assert linear_cka(torch.eye(6), torch.eye(6)) == pytest.approx(1.0)


def test_invariance_to_orthogonal_transform_and_isotropic_scaling() -> None:
    x, y = matrix(30, 6, 1), matrix(30, 4, 2)
    q, _ = torch.linalg.qr(matrix(6, 6, 3))
    base = linear_cka(x, y)
    assert 0 < base < 1
    assert linear_cka(x @ q, y) == pytest.approx(base)
    assert linear_cka(3.5 * x, 0.1 * y) == pytest.approx(base)
    assert linear_cka(x + 7.0, y) == pytest.approx(base)  # centering removes offsets


def test_hand_computed_value() -> None:
    # centered x = (-1, 0, 1), y = (-1, -1, 2): <x,y>^2 / (|x|^2 |y|^2) = 3^2 / (2 * 6) = 0.75
    x = torch.tensor([[1.0], [2.0], [3.0]])
    y = torch.tensor([[0.0], [0.0], [3.0]])
    assert linear_cka(x, y) == pytest.approx(0.75)
    assert math.isnan(linear_cka(torch.ones(4, 2), matrix(4, 2, 0)))  # a constant side has no variance


def test_layer_cka_per_layer() -> None:
    model = FACTORY.build()
    assert layer_names(model) == ["body.1", "head"]
    same = layer_cka(model, FACTORY, W, W, DATA.x_train)
    assert same == pytest.approx({"body.1": 1.0, "head": 1.0})
    scaled = W.clone()
    scaled[4:] *= 2.0  # the head's output doubles: isotropic scaling, CKA stays 1
    assert layer_cka(model, FACTORY, W, scaled, DATA.x_train)["head"] == pytest.approx(1.0)
    cnn = ModelFactory("cnn5", (1, 8, 8), 10)
    assert layer_names(cnn.build()) == ["body.0", "body.3", "body.7", "body.9", "head"]


def test_fedavg_local_model_is_weights_plus_delta() -> None:
    alg = FedAvg(FedAvgParams(lr=0.3, batch_size=4, local_steps=1), FACTORY)
    local = local_model_after_training(alg, {"weights": W}, None, DATA, gen(1))
    delta = alg.client_update({"weights": W}, None, DATA, gen(1)).upload["delta"]
    assert torch.allclose(local, W + delta)


def test_analysis_field_errors() -> None:
    base = {"name": "t", "algorithm": {"name": "fedreco"}, "stop": {"rounds": 1}}
    assert parse_suite({**base, "analysis": "cka"}, "f").runs[0].analysis.samples == 256
    with pytest.raises(ScenarioError, match=r"analysis.type: Input should be 'cka'"):
        parse_suite({**base, "analysis": "svcca"}, "f")
    with pytest.raises(ScenarioError, match=r"analysis.clients: client 10 does not exist \(allowed: 0..9\)"):
        parse_suite({**base, "analysis": {"type": "cka", "clients": [10]}}, "f")
    with pytest.raises(ScenarioError, match=r"analysis.samples"):
        parse_suite({**base, "analysis": {"type": "cka", "samples": 1}}, "f")
    with pytest.raises(ScenarioError, match=r"analysis: cka needs an algorithm .* 'fedbuff' does not"):
        parse_suite({**base, "algorithm": {"name": "fedbuff"}, "mode": {"type": "async"},
                     "stop": {"versions": 1}, "analysis": "cka"}, "f")
