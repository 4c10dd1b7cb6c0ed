"""local_sgd and batches against hand computations."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.base import AlgorithmParams, ClientData
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import SGDStep, batches, local_sgd, proximal_loss

FACTORY = ModelFactory("logistic", (3,), 2)
X = torch.tensor([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0], [-1.0, 1.0, 1.0], [0.0, -0.5, 2.0]])
Y = torch.tensor([0, 1, 1, 0])


def make_data(x: torch.Tensor = X, y: torch.Tensor = Y) -> ClientData:
    return ClientData(client=0, x_train=x, y_train=y, x_test=x[:0], y_test=y[:0])


def start_weights() -> torch.Tensor:
    # flat order: head.weight (2x3) then head.bias (2)
    return torch.tensor([0.1, -0.2, 0.3, 0.0, 0.5, -0.1, 0.05, -0.05])


def manual_ce_grad(flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Closed-form gradient of the mean softmax cross-entropy of a linear model."""
    w, b = flat[:6].view(2, 3), flat[6:]
    logits = x @ w.T + b
    p = torch.softmax(logits, dim=1)
    onehot = torch.nn.functional.one_hot(y, 2).to(p)
    g = (p - onehot) / x.shape[0]
    loss = float(-(onehot * torch.log(p)).sum() / x.shape[0])
    return torch.cat([(g.T @ x).reshape(-1), g.sum(0)]), loss


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_one_full_batch_step_matches_closed_form() -> None:
    params = AlgorithmParams(lr=0.1, batch_size=4, local_steps=1)
    w0 = start_weights()
    out, metrics = local_sgd(FACTORY.build(), FACTORY, w0, make_data(), params, gen(), steps=1)
    grad, loss = manual_ce_grad(w0, X, Y)
    torch.testing.assert_close(out, w0 - 0.1 * grad)
    assert metrics["steps"] == 1
    assert metrics["train_loss"] == pytest.approx(loss, rel=1e-5)
    assert torch.equal(w0, start_weights()), "start weights must not be modified"


def test_weight_decay_and_momentum_two_steps() -> None:
    lr, mom, wd = 0.1, 0.9, 0.01
    params = AlgorithmParams(lr=lr, batch_size=8, momentum=mom, weight_decay=wd)
    w = start_weights()
    out, _ = local_sgd(FACTORY.build(), FACTORY, w, make_data(), params, gen(), steps=2)
    # torch SGD: d = g + wd w; buf = d (first step), buf = mom buf + d; w -= lr buf
    g0, _ = manual_ce_grad(w, X, Y)
    buf = g0 + wd * w
    w1 = w - lr * buf
    g1, _ = manual_ce_grad(w1, X, Y)
    buf = mom * buf + g1 + wd * w1
    w2 = w1 - lr * buf
    torch.testing.assert_close(out, w2)


def test_gradient_clipping() -> None:
    params = AlgorithmParams(lr=1.0, batch_size=4, max_grad_norm=1e-3)
    w0 = start_weights()
    out, _ = local_sgd(FACTORY.build(), FACTORY, w0, make_data(), params, gen(), steps=1)
    grad, _ = manual_ce_grad(w0, X, Y)
    assert float(grad.norm()) > 1e-3
    torch.testing.assert_close(out, w0 - 1e-3 * grad / grad.norm(), rtol=1e-4, atol=1e-7)


def test_extra_loss_proximal_term() -> None:
    mu = 0.5
    center = torch.linspace(-1, 1, 8)
    model = FACTORY.build()
    w0 = start_weights()
    FACTORY.load_flat(model, w0)
    term = proximal_loss(center, mu, model)
    assert float(term(model).detach()) == pytest.approx(0.5 * mu * float(((w0 - center) ** 2).sum()), rel=1e-6)
    params = AlgorithmParams(lr=0.1, batch_size=4)
    out, metrics = local_sgd(model, FACTORY, w0, make_data(), params, gen(), steps=1, extra_loss=term)
    grad, loss = manual_ce_grad(w0, X, Y)
    torch.testing.assert_close(out, w0 - 0.1 * (grad + mu * (w0 - center)))
    assert metrics["train_loss"] == pytest.approx(loss, rel=1e-5), "train_loss reports the data loss only"


def test_deterministic_given_rng_and_sensitive_to_it() -> None:
    torch.manual_seed(123)
    x, y = torch.randn(50, 3), torch.randint(0, 2, (50,))
    data = make_data(x, y)
    params = AlgorithmParams(lr=0.2, batch_size=8)
    model = FACTORY.build()
    a, ma = local_sgd(model, FACTORY, start_weights(), data, params, gen(7), steps=13)
    b, mb = local_sgd(model, FACTORY, start_weights(), data, params, gen(7), steps=13)
    c, _ = local_sgd(FACTORY.build(), FACTORY, start_weights(), data, params, gen(8), steps=13)
    assert torch.equal(a, b) and ma == mb
    assert not torch.equal(a, c)


def test_steps_honored_and_batch_size_capped() -> None:
    seen: list[int] = []

    def counting_loss(model: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        seen.append(int(yb.shape[0]))
        return torch.nn.functional.cross_entropy(model(xb), yb)

    params = AlgorithmParams(lr=0.1, batch_size=32, local_steps=5)
    _, metrics = local_sgd(FACTORY.build(), FACTORY, start_weights(), make_data(), params, gen(), steps=5,
                           loss_fn=counting_loss)
    assert seen == [4] * 5 and metrics["steps"] == 5


def test_trainable_subset_and_hooks() -> None:
    factory = ModelFactory("mlp", (3,), 2, hidden=(4,))
    w0 = factory.initial_weights(gen(1))
    model = factory.build()
    calls: list[str] = []

    def grad_fn(m: torch.nn.Module, closure):  # type: ignore[no-untyped-def]
        calls.append("grad")
        closure().backward()

    def after(m: torch.nn.Module) -> None:
        calls.append("after")

    params = AlgorithmParams(lr=0.5, batch_size=4)
    out, _ = local_sgd(model, factory, w0, make_data(), params, gen(), steps=3, grad_fn=grad_fn,
                       after_backward=after, trainable=list(model.head.parameters()))
    body, head = factory.body, factory.head
    assert torch.equal(out[body], w0[body])
    assert not torch.equal(out[head], w0[head])
    assert calls == ["grad", "after"] * 3
    assert all(p.requires_grad for p in model.parameters()), "frozen flags are restored"


def test_no_samples_returns_start() -> None:
    empty = make_data(X[:0], Y[:0])
    out, metrics = local_sgd(FACTORY.build(), FACTORY, start_weights(), empty, AlgorithmParams(), gen(), steps=3)
    assert torch.equal(out, start_weights()) and metrics["steps"] == 0 and math.isnan(metrics["train_loss"])


def test_batches_cover_each_epoch_and_straddle() -> None:
    out = list(batches(10, 4, 5, gen(3)))
    assert [len(b) for b in out] == [4] * 5
    stream = torch.cat(out)  # 20 indices = two full permutations of range(10)
    assert sorted(stream[:10].tolist()) == list(range(10))
    assert sorted(stream[10:].tolist()) == list(range(10))
    assert torch.equal(torch.cat(list(batches(10, 4, 5, gen(3)))), stream)
    small = list(batches(3, 32, 2, gen(0)))
    assert [sorted(b.tolist()) for b in small] == [[0, 1, 2], [0, 1, 2]]
    assert list(batches(5, 2, 0, gen(0))) == []
    with pytest.raises(ValueError):
        list(batches(0, 2, 1, gen(0)))


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.01), (0.9, 0.01)])
def test_sgd_step_is_torch_optim_sgd_bit_for_bit(momentum: float, weight_decay: float) -> None:
    """SGDStep against torch.optim.SGD over six steps of a two-layer net, one parameter
    without a gradient on the first three steps (it is skipped, and its momentum buffer
    starts at its first gradient, as the optimizer's)."""
    torch.manual_seed(3)
    nets = [torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    reference = torch.optim.SGD(nets[0].parameters(), lr=0.1, momentum=momentum, weight_decay=weight_decay)
    ours = SGDStep(list(nets[1].parameters()), lr=0.1, momentum=momentum, weight_decay=weight_decay)
    for step in range(6):
        for net, opt in zip(nets, (reference, ours)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            if step < 3:  # the last bias has no gradient for three steps
                net[2].bias.grad = None
            opt.step()
        for a, b in zip(nets[0].parameters(), nets[1].parameters()):
            assert torch.equal(a, b), f"step {step}"
    assert not torch.equal(nets[1][2].bias, nets[1][2].bias.new_zeros(3))


def test_dropout_masks_depend_on_the_task_alone() -> None:
    """pfl_cnn has dropout: a task's masks are seeded from its generator's seed, so the same
    task gives the same weights whatever the global generator's state (another executor, other
    tasks before it), and the global generator is left as it was. Ablation: the same loop with
    the masks drawn from the global generator (seed_dropout off) differs between two states."""
    from unittest import mock

    factory = ModelFactory("pfl_cnn", (3, 8, 8), 3)
    model = factory.build()
    start = factory.flatten(model)
    gen = torch.Generator().manual_seed(5)
    data = make_data(torch.randn(12, 3, 8, 8, generator=gen), torch.randint(0, 3, (12,), generator=gen))
    params = AlgorithmParams(lr=0.1, batch_size=4)

    def run(global_seed: int, restored: bool = True) -> torch.Tensor:
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        out, _ = local_sgd(model, factory, start, data, params, torch.Generator().manual_seed(11), 3)
        assert torch.equal(torch.get_rng_state(), before) == restored
        return out

    assert torch.equal(run(1), run(2))
    with mock.patch("fedclock.algorithms.training.seed_dropout", return_value=False):
        assert not torch.equal(run(1, False), run(2, False))
