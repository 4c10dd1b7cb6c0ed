"""``evaluation.adapted``'s step (:mod:`fedclock.algorithms.adapted`) against hand numbers:
zero steps test the global model itself; one full-batch SGD step of a 2-input logistic
model moves the weights by the hand-computed cross-entropy gradient (with the option's lr
and batch size over the algorithm's, and with none of the algorithm's momentum, weight
decay or clipping), which turns one of three test points from wrong to right."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.adapted import AdaptedEvaluation, adaptation_params, adapted_evaluate, adapted_weights
from fedclock.algorithms.base import AlgorithmParams, ClientData, evaluate_flat
from fedclock.algorithms.models import ModelFactory
from tests.algorithms import tiny

LOGISTIC = ModelFactory("logistic", (2,), 2)
"""Flat layout: W (2 classes x 2 inputs, row-major), then b (2)."""
GLOBAL = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.1])
"""W = 0, b = (0, 0.1): every input is predicted class 1."""
X_TRAIN, Y_TRAIN = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1])
X_TEST, Y_TEST = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 2.0]]), torch.tensor([0, 1, 0])
DATA = ClientData(4, X_TRAIN, Y_TRAIN, X_TEST, Y_TEST)
ALGORITHM = AlgorithmParams(lr=0.05, batch_size=1, momentum=0.9, weight_decay=0.5, max_grad_norm=0.01)
"""The algorithm's own settings: the option overrides lr and batch size, the rest is not used."""


def one_step_by_hand() -> torch.Tensor:
    """One SGD step, lr 1, on the mean cross-entropy of both training points (one batch).

    The logits of every point are b = (0, 0.1), so p = softmax(0, 0.1) = (p0, p1) for both;
    dL/dz_i = (p - onehot(y_i)) / 2, dL/dW[c, j] = sum_i dL/dz_i[c] x_i[j], dL/db = sum_i dL/dz_i.
    x_1 = (1, 0) with y_1 = 0 and x_2 = (0, 1) with y_2 = 1 give
    dW = [[(p0 - 1)/2, p0/2], [p1/2, (p1 - 1)/2]] and db = (p0 - 1/2, p1 - 1/2)."""
    p0 = 1.0 / (1.0 + math.exp(0.1))
    p1 = 1.0 - p0
    dw = [(p0 - 1) / 2, p0 / 2, p1 / 2, (p1 - 1) / 2]
    db = [p0 - 0.5, p1 - 0.5]
    return GLOBAL - torch.tensor(dw + db)


def test_one_step_gives_the_hand_computed_weights_and_accuracy() -> None:
    adaptation = AdaptedEvaluation(steps=1, lr=1.0, batch_size=2)
    model = LOGISTIC.build()
    tuned = adapted_weights(model, LOGISTIC, GLOBAL, DATA, ALGORITHM, adaptation, torch.Generator().manual_seed(0))
    expected = one_step_by_hand()  # about W = [[0.2625, -0.2375], [-0.2625, 0.2375]], b = (0.0250, 0.0750)
    assert torch.allclose(tuned, expected, atol=1e-6), (tuned, expected)
    # test points: (2, 0) -> logits (0.550, -0.450): 0, right; (0, 3) -> (-0.688, 0.788): 1, right;
    # (1, 2) -> (-0.188, 0.288): 1, wrong. The global model predicts 1 everywhere: only (0, 3) right.
    result = adapted_evaluate(model, LOGISTIC, GLOBAL, DATA, ALGORITHM, adaptation,
                              torch.Generator().manual_seed(0), batch_size=2)
    assert (result.correct, result.count) == (2.0, 3)
    assert result.accuracy == pytest.approx(2 / 3)
    assert evaluate_flat(model, LOGISTIC, GLOBAL, X_TEST, Y_TEST, 2).correct == 1.0
    assert torch.equal(GLOBAL, torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.1]))  # the global model is untouched


def test_zero_steps_is_exactly_the_global_model_on_the_client_test_split() -> None:
    model = tiny.FACTORY.build()
    data = ClientData(1, tiny.X, tiny.Y, tiny.X[:3] * 1.7, torch.tensor([1, 0, 1]))
    params = AlgorithmParams(lr=0.3, batch_size=2)
    got = adapted_evaluate(model, tiny.FACTORY, tiny.W, data, params, AdaptedEvaluation(steps=0), tiny.gen(), 2)
    want = evaluate_flat(model, tiny.FACTORY, tiny.W, data.x_test, data.y_test, 2)
    assert (got.correct, got.count, got.loss_sum) == (want.correct, want.count, want.loss_sum)
    assert torch.equal(adapted_weights(model, tiny.FACTORY, tiny.W, data, params, AdaptedEvaluation(steps=0),
                                       tiny.gen()), tiny.W)


def test_settings_default_to_the_algorithm_lr_and_batch_size_and_plain_sgd() -> None:
    plain = adaptation_params(ALGORITHM, AdaptedEvaluation(steps=3))
    assert (plain.lr, plain.batch_size) == (0.05, 1)
    assert (plain.momentum, plain.weight_decay, plain.max_grad_norm) == (0.0, 0.0, None)
    own = adaptation_params(ALGORITHM, AdaptedEvaluation(steps=3, lr=0.2, batch_size=8))
    assert (own.lr, own.batch_size) == (0.2, 8)


def test_batches_come_from_the_given_generator_only() -> None:
    """Two steps of batch 1 on two points: the generator decides the order (the same seed gives
    the same weights, and the global torch generator is not drawn from)."""
    adaptation = AdaptedEvaluation(steps=2, lr=0.5, batch_size=1)
    model = LOGISTIC.build()
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = adapted_weights(model, LOGISTIC, GLOBAL, DATA, ALGORITHM, adaptation, torch.Generator().manual_seed(7))
    assert torch.equal(torch.random.get_rng_state(), before)
    b = adapted_weights(model, LOGISTIC, GLOBAL, DATA, ALGORITHM, adaptation, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


@pytest.mark.parametrize("fields", [{"steps": -1}, {"steps": 1, "lr": 0.0}, {"steps": 1, "batch_size": 0},
                                    {"steps": 1, "momentum": 0.9}, {}])
def test_bad_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        AdaptedEvaluation.model_validate(fields)
