"""BatchedNet's explicit batched forward/backward equals autograd on each client's own model."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedclock.algorithms.base import AlgorithmParams
from fedclock.algorithms.batched_net import BatchedNet
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.vectorized import SGDTask

from tests.algorithms.test_vectorized import assert_same, client, rng, run_both
from tests.numerics import sgd_atol

CASES = [("mlp", (1, 6, 6)), ("logistic", (7,)), ("spfl_cnn_padded", (1, 8, 8)), ("cnn5", (1, 6, 6)),
         ("spfl_cnn_padded", (2, 5, 7)), ("spfl_cnn", (1, 17, 19))]  # odd sides: floor pooling; two input channels


def per_client(factory: ModelFactory, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
               mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked mean cross-entropy and its flat gradient by autograd on an ordinary model."""
    model = factory.build()
    factory.load_flat(model, flat)
    per_sample = F.cross_entropy(model(x), y, reduction="none")
    loss = (per_sample * mask).sum() / mask.sum().clamp(min=1.0)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return loss.detach(), torch.cat([g.reshape(-1) for g in grads])


def one_step_atol(factory: ModelFactory, shape: tuple[int, ...], b: int = 4) -> float:
    """The batched pass and autograd sum each product in other orders: the bound of one SGD
    step of the model on batches of ``b`` (:mod:`tests.numerics`), on values of order 1."""
    return sgd_atol(factory.build(), shape, b, 1)


def setup(name: str, shape: tuple[int, ...], k: int = 3, b: int = 4):
    factory = ModelFactory(name, shape, 4, hidden=(5,))
    gen = torch.Generator().manual_seed(3)
    starts = [factory.initial_weights(torch.Generator().manual_seed(c)) for c in range(k)]
    x = torch.randn(k, b, *shape, generator=gen)
    y = torch.randint(0, 4, (k, b), generator=gen)
    mask = torch.ones(k, b)
    mask[1, b - 1] = 0.0  # a padded sample
    mask[2] = 0.0  # a client without samples in this step
    net = BatchedNet.plan(factory.build())
    assert net is not None
    return factory, starts, x, y, mask, net


@pytest.mark.numerics
@pytest.mark.parametrize("name,shape", CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in CASES])
def test_losses_and_gradients_match_autograd(name: str, shape: tuple[int, ...]) -> None:
    factory, starts, x, y, mask, net = setup(name, shape)
    weights = net.split(starts)
    grads = [torch.full_like(w, float("nan")) for w in weights]
    losses = net.step(weights, x, y, mask, grads)
    atol = one_step_atol(factory, shape)
    for j, start in enumerate(starts):
        loss, grad = per_client(factory, start, x[j], y[j], mask[j])
        assert float(losses[j]) == pytest.approx(float(loss), abs=atol)
        torch.testing.assert_close(BatchedNet.join(grads, j), grad, atol=atol, rtol=0)
        torch.testing.assert_close(BatchedNet.join(weights, j), start, atol=0, rtol=0)  # not changed
    assert float(BatchedNet.join(grads, 2).abs().max()) == 0.0  # no samples: no gradient


@pytest.mark.numerics
@pytest.mark.parametrize("name,shape", CASES[:4], ids=[n for n, _ in CASES[:4]])
def test_fused_update_is_sgd_step(name: str, shape: tuple[int, ...]) -> None:
    factory, starts, x, y, mask, net = setup(name, shape)
    weights = net.split(starts)
    net.step(weights, x, y, mask, None, lr=0.3)
    for j, start in enumerate(starts):
        _, grad = per_client(factory, start, x[j], y[j], mask[j])
        torch.testing.assert_close(BatchedNet.join(weights, j), start - 0.3 * grad, atol=one_step_atol(factory, shape),
                                   rtol=0)


def test_step_needs_grads_or_lr() -> None:
    _, starts, x, y, mask, net = setup("mlp", (1, 6, 6))
    weights = net.split(starts)
    with pytest.raises(ValueError, match="either grads or lr"):
        net.step(weights, x, y, mask, None)


def test_plan_only_for_supported_layer_chains() -> None:
    assert BatchedNet.plan(ModelFactory("conv_gn", (1, 8, 8), 4).build()) is None  # GroupNorm: vmap
    assert BatchedNet.plan(torch.nn.Sequential(torch.nn.Linear(2, 2))) is None  # not a FedModel
    model = ModelFactory("spfl_cnn_padded", (1, 8, 8), 4).build()
    model.body[0].stride = (2, 2)  # type: ignore[index]
    assert BatchedNet.plan(model) is None
    model = ModelFactory("spfl_cnn_padded", (1, 8, 8), 4).build()
    model.body[2] = torch.nn.MaxPool2d(3, stride=1)  # type: ignore[index]
    assert BatchedNet.plan(model) is None
    plan = BatchedNet.plan(ModelFactory("cnn5", (1, 8, 8), 4).build())
    assert plan is not None and plan.uses_images()


def test_cnn_plain_sgd_and_partial_work_match_sequential() -> None:
    """The fused update (plain SGD, every client active) and, once a client has finished,
    the gradient path with finished clients masked out, against the sequential loop."""
    factory = ModelFactory("spfl_cnn_padded", (1, 8, 8), 4)
    start = factory.initial_weights(torch.Generator().manual_seed(2))
    data = [client(c, n, (1, 8, 8), 4) for c, n in enumerate([9, 4, 6])]
    p = AlgorithmParams(lr=0.1, batch_size=4)

    def make() -> list[SGDTask]:
        return [SGDTask(start, data[c], p, rng(c), s) for c, s in enumerate([4, 2, 3])]

    assert_same(*run_both(factory, make))
