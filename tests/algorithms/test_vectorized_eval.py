"""Personalized evaluation of many clients at once gives the sequential numbers (on the CPU,
and on the GPU where one is visible: ``device`` parameters marked ``cuda``; the test data on
the device, weights and states as CPU tensors, as an executor has them)."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from fedclock.algorithms.base import ClientData, evaluate_flat
from fedclock.algorithms.ditto import Ditto, DittoParams
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_ft import FedAvgFT, FedAvgFTParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.vectorized_eval import evaluate_clients, evaluate_weights, evaluates_vectorized
from tests.devices import DEVICES, on_device
from tests.numerics import sgd_atol

EVAL_BATCH = 4
"""The evaluation batch of these tests."""


def forward_atol(factory: ModelFactory, shape: tuple[int, ...]) -> float:
    """Per-sample loss tolerance between the batched and the one-model forward pass, which sum
    each product in other orders: the bound of one SGD step (:mod:`tests.numerics`; it
    covers the forward pass's products with room), on losses of order 1."""
    return sgd_atol(factory.build(), shape, EVAL_BATCH, 1)


def client(c: int, n_train: int, n_test: int, shape: tuple[int, ...], classes: int = 3) -> ClientData:
    gen = torch.Generator().manual_seed(200 + c)
    x = torch.randn(n_train + n_test, *shape, generator=gen)
    y = torch.randint(0, classes, (n_train + n_test,), generator=gen)
    return ClientData(c, x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def assert_same(seq: list[Any], vec: list[Any], atol: float) -> None:
    assert len(seq) == len(vec)
    for s, v in zip(seq, vec):
        assert v.count == s.count and v.correct == s.correct
        assert v.loss_sum == pytest.approx(s.loss_sum, abs=atol * max(1, s.count))


@pytest.mark.numerics
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["mlp", "cnn5", "conv_gn", "pfl_cnn"])
def test_many_models_on_their_own_test_sets(name: str, device: str) -> None:
    shape = (6,) if name == "mlp" else (1, 8, 8)
    factory = ModelFactory(name, shape, 3, **({"hidden": (8,)} if name == "mlp" else {}))
    gen = torch.Generator().manual_seed(0)
    weights = [factory.initial_weights(gen) for _ in range(4)]
    datas = [on_device(client(c, 0, n, shape), device) for c, n in enumerate([7, 0, 13, 5])]  # uneven, one empty
    model = factory.build().to(device)
    seq = [evaluate_flat(model, factory, w, d.x_test, d.y_test, 4) for w, d in zip(weights, datas)]
    assert_same(seq, evaluate_weights(factory.build().to(device), weights, [d.x_test for d in datas],
                                      [d.y_test for d in datas], 4), forward_atol(factory, shape))
    assert any(s.correct for s in seq) and seq[1].count == 0


CASES = [(Ditto, DittoParams(lr=0.1, batch_size=5, lam=0.2)),
         (FedAvgFT, FedAvgFTParams(lr=0.1, batch_size=5, momentum=0.5, finetune_epochs=1.5))]


@pytest.mark.numerics
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,params", CASES, ids=[c.name for c, _ in CASES])
def test_evaluate_clients_matches_evaluate_client(cls: Any, params: Any, device: str) -> None:
    factory = ModelFactory("mlp", (6,), 3, hidden=(8,))
    alg = cls(params, factory).to(device)
    payload = alg.payload_for(alg.init_server(torch.Generator().manual_seed(0)), 0)
    datas = [on_device(client(c, n, t, (6,)), device) for c, (n, t) in enumerate([(12, 9), (0, 4), (3, 6), (20, 0)])]
    gen = torch.Generator().manual_seed(3)
    states = [None, None] + [{"personal": factory.initial_weights(gen)} for _ in range(2)] \
        if cls is Ditto else [None] * 4
    seq = [alg.evaluate_client(payload, s, d, 8) for s, d in zip(states, datas)]
    vec = evaluate_clients(alg, [payload] * 4, states, datas, 8)
    # FedAvg-FT fine-tunes 1.5 epochs of the largest client (20 samples, batches of 5: 6 steps) before testing
    assert_same(seq, vec, sgd_atol(factory.build(), (6,), 8, 6 + 1))
    # each client's own model was tested: the same clients with the global model score differently
    plain = evaluate_weights(factory.build().to(device), [payload["weights"]] * 4, [d.x_test for d in datas],
                             [d.y_test for d in datas], 8)
    assert any(abs(p.loss_sum - v.loss_sum) > 1e-3 for p, v in zip(plain, vec))


def test_only_algorithms_with_their_own_plan_evaluate_vectorized() -> None:
    factory = ModelFactory("mlp", (6,), 3, hidden=(8,))
    assert evaluates_vectorized(Ditto(DittoParams(), factory))
    assert evaluates_vectorized(FedAvgFT(FedAvgFTParams(), factory))
    assert not evaluates_vectorized(FedAvg(FedAvgParams(), factory))
    with pytest.raises(ValueError, match="does not evaluate vectorized"):
        evaluate_clients(FedAvg(FedAvgParams(), factory), [], [], [], 8)
