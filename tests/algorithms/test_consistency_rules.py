"""Update rules of the model-consistency family against hand-computed numbers or an
independent few-line re-implementation on tiny tensors."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedclock.algorithms.base import Arrival, ClientData, ServerState
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedcm import FedCM, FedCMParams
from fedclock.algorithms.fedexp import FedExp, FedExpParams, fedexp_step_size
from fedclock.algorithms.fedmrur import FedMRUR, FedMRURH, FedMRURN, FedMRURParams
from fedclock.algorithms.fedprox import FedProx, FedProxParams
from fedclock.algorithms.fedsam import FedSAM, FedSAMParams
from fedclock.algorithms.hyperbolic import feature_sq_distance, lorentz_inner, lorentz_lift, lorentz_sq_distance, \
    manifold_regularizer
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.mofedsam import MoFedSAM, MoFedSAMParams
from fedclock.algorithms.momentum import NonFiniteUpload, norm_gain, normalized_aggregate, regularizer_warnings
from fedclock.algorithms.registry import algorithm_names, get_algorithm
from fedclock.algorithms.sam import sam_grad_fn
from fedclock.algorithms.scaffold import Scaffold, ScaffoldParams
from fedclock.algorithms.schedules import ROUND_KEY
from fedclock.algorithms.training import local_sgd
from fedclock.scenarios.loader import ScenarioError, parse_suite
from tests.algorithms.server_rules import TINY, gen

LOGISTIC = ModelFactory("logistic", (3,), 2)  # W (2x3) then b (2): 8 flat weights


def tiny_data(n: int = 6) -> ClientData:
    g = gen(3)
    x = torch.randn(n, 3, generator=g)
    y = torch.tensor([0, 1] * (n // 2))
    return ClientData(0, x, y, x[:0], y[:0])


def flat_loss(w: torch.Tensor, data: ClientData) -> torch.Tensor:
    """Mean cross-entropy of the logistic model with flat weights ``w`` (W row-major, then b)."""
    weight, bias = w[:6].view(2, 3), w[6:]
    return F.cross_entropy(data.x_train @ weight.T + bias, data.y_train)


def flat_grad(w: torch.Tensor, data: ClientData, extra=None) -> torch.Tensor:
    w = w.detach().clone().requires_grad_(True)
    loss = flat_loss(w, data)
    if extra is not None:
        loss = loss + extra(w)
    loss.backward()
    return w.grad.detach()


def start_weights() -> torch.Tensor:
    return torch.linspace(-0.4, 0.5, 8)


# ---------------------------------------------------------------------------- SAM
def test_sam_gradient_by_hand() -> None:
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    x = torch.tensor([[1.0, 1.0]])

    def closure() -> torch.Tensor:  # f(w) = (w1 + w2)^2
        return (model(x) ** 2).sum()

    # g = 2 (w1 + w2) [1, 1] = [6, 6]; rho = sqrt(2)/2 gives e = [0.5, 0.5]; at w + e = [1.5, 2.5]
    # the gradient is 2 * 4 * [1, 1] = [8, 8]; the weights come back unchanged.
    sam_grad_fn(math.sqrt(2) / 2)(model, closure)
    torch.testing.assert_close(model.weight.grad, torch.tensor([[8.0, 8.0]]))
    assert torch.equal(model.weight.detach(), torch.tensor([[1.0, 2.0]]))


def test_fedsam_client_step_is_a_sam_step() -> None:
    params = FedSAMParams(lr=0.3, batch_size=6, local_steps=1, rho=0.2)
    alg = FedSAM(params, LOGISTIC)
    data = tiny_data()
    w0 = start_weights()
    result = alg.client_update({"weights": w0}, None, data, gen())
    g = flat_grad(w0, data)
    g_sam = flat_grad(w0 + 0.2 * g / g.norm(), data)
    torch.testing.assert_close(result.upload["delta"], -0.3 * g_sam)


# ---------------------------------------------------------------------------- FedProx
def test_fedprox_client_matches_proximal_gradient_descent() -> None:
    mu, lr, steps = 0.5, 0.2, 3
    alg = FedProx(FedProxParams(lr=lr, batch_size=6, local_steps=steps, mu=mu), LOGISTIC)
    data, w0 = tiny_data(), start_weights()
    result = alg.client_update({"weights": w0}, None, data, gen())
    w = w0.clone()
    for _ in range(steps):
        w = w - lr * (flat_grad(w, data) + mu * (w - w0))
    torch.testing.assert_close(result.upload["delta"], w - w0)


# ---------------------------------------------------------------------------- SCAFFOLD
def test_scaffold_client_option_two() -> None:
    lr, steps = 0.1, 4
    alg = Scaffold(ScaffoldParams(lr=lr, batch_size=6, local_steps=steps), LOGISTIC)
    data, w0 = tiny_data(), start_weights()
    c = torch.linspace(0.3, -0.2, 8)
    c_p = torch.linspace(-0.1, 0.1, 8)
    result = alg.client_update({"weights": w0, "control": c}, {"control": c_p}, data, gen())
    y = w0.clone()
    for _ in range(steps):
        y = y - lr * (flat_grad(y, data) - c_p + c)
    c_new = c_p - c + (w0 - y) / (steps * lr)
    torch.testing.assert_close(result.upload["delta"], y - w0)
    torch.testing.assert_close(result.state["control"], c_new)
    torch.testing.assert_close(result.upload["control_delta"], c_new - c_p)
    # a first task starts from c_p = 0
    first = alg.client_update({"weights": w0, "control": c}, None, data, gen())
    y = w0.clone()
    for _ in range(steps):
        y = y - lr * (flat_grad(y, data) + c)
    torch.testing.assert_close(first.state["control"], -c + (w0 - y) / (steps * lr))


def test_scaffold_server_by_hand() -> None:
    alg = Scaffold(ScaffoldParams(server_lr=0.5), TINY)
    alg.num_clients = 10
    state = ServerState(tensors={"weights": torch.tensor([1.0, 1.0]), "control": torch.tensor([1.0, 1.0])}, version=2)
    arrivals = [Arrival(0, {"delta": torch.tensor([1.0, 2.0]), "control_delta": torch.tensor([2.0, 0.0])}, 5, 2, 0),
                Arrival(3, {"delta": torch.tensor([3.0, 4.0]), "control_delta": torch.tensor([0.0, 4.0])}, 50, 2, 0)]
    new, changed = alg.receive(state, arrivals, gen())
    # w + 0.5 * mean([1,2],[3,4]) = [1,1] + 0.5 [2,3]; c + (2/10) mean([2,0],[0,4]) = [1,1] + [0.2,0.4]
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([2.0, 2.5]))
    torch.testing.assert_close(new.tensors["control"], torch.tensor([1.2, 1.4]))
    assert changed and new.version == 3
    assert TINY.num_params == 4 and alg.download_bytes() == 2 * 4 * 4 and alg.upload_bytes() == 2 * 4 * 4


def test_scaffold_needs_population_size() -> None:
    alg = Scaffold(ScaffoldParams(), TINY)
    state = alg.init_server(gen())
    arrival = Arrival(0, {"delta": torch.zeros(2), "control_delta": torch.zeros(2)}, 1, 0, 0)
    with pytest.raises(ValueError, match="num_clients"):
        alg.receive(state, [arrival], gen())


# ---------------------------------------------------------------------------- FedCM / MoFedSAM / FedMRUR
def test_fedcm_client_mixes_gradient_with_server_momentum() -> None:
    lr, steps, alpha = 0.2, 3, 0.3
    alg = FedCM(FedCMParams(lr=lr, batch_size=6, local_steps=steps, alpha=alpha), LOGISTIC)
    data, w0 = tiny_data(), start_weights()
    delta_t = torch.linspace(1.0, -1.0, 8)
    result = alg.client_update({"weights": w0, "momentum": delta_t}, None, data, gen())
    w = w0.clone()
    for _ in range(steps):
        w = w - lr * (alpha * flat_grad(w, data) + (1 - alpha) * delta_t)
    torch.testing.assert_close(result.upload["delta"], w - w0)
    assert alg.download_bytes() == 2 * 8 * 4 and alg.upload_bytes() == 8 * 4


def test_mofedsam_client_uses_sam_gradient_in_the_mix() -> None:
    lr, alpha, rho = 0.2, 0.4, 0.1
    alg = MoFedSAM(MoFedSAMParams(lr=lr, batch_size=6, local_steps=1, alpha=alpha, rho=rho), LOGISTIC)
    data, w0 = tiny_data(), start_weights()
    delta_t = torch.linspace(1.0, -1.0, 8)
    result = alg.client_update({"weights": w0, "momentum": delta_t}, None, data, gen())
    g = flat_grad(w0, data)
    g_sam = flat_grad(w0 + rho * g / g.norm(), data)
    torch.testing.assert_close(result.upload["delta"], -lr * (alpha * g_sam + (1 - alpha) * delta_t))


def momentum_arrivals() -> list[Arrival]:
    # model deltas of K = 2 steps at eta_l = 0.1 (tau = 0.2): average gradients [1, 0] and [0, 2]
    return [Arrival(0, {"delta": torch.tensor([-0.2, 0.0])}, 10, 4, 0),
            Arrival(1, {"delta": torch.tensor([0.0, -0.4])}, 30, 4, 0)]


def momentum_state() -> ServerState:
    return ServerState(tensors={"weights": torch.tensor([1.0, 1.0]), "momentum": torch.zeros(2)}, version=4)


def test_fedcm_server_delta_and_model_step_by_hand() -> None:
    alg = FedCM(FedCMParams(lr=0.1, local_steps=2, server_lr=1.5), TINY)
    new, changed = alg.receive(momentum_state(), momentum_arrivals(), gen())
    # D = mean Delta_p = [-0.1, -0.2]; w + eta_g D = [1, 1] + 1.5 [-0.1, -0.2];
    # momentum -D / (K eta_l) = [0.5, 1] (FedCM's -1/(eta_l K |S|) sum Delta_p)
    torch.testing.assert_close(new.tensors["momentum"], torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([0.85, 0.7]))
    assert changed and new.version == 5


def unequal_arrivals() -> list[Arrival]:
    # K = 5 and K = 20 steps at eta_l = 0.1 (tau = mean(0.5, 2.0) = 1.25)
    return [Arrival(0, {"delta": torch.tensor([-1.0, 0.0])}, 10, 4, 0, steps=5),
            Arrival(1, {"delta": torch.tensor([0.0, -4.0])}, 40, 4, 0, steps=20)]


def test_unequal_step_counts_move_the_model_by_the_mean_delta() -> None:
    # the example: averaging per-step gradients and rescaling by the mean step count gave
    # 1.25 Delta_1 + 0.3125 Delta_2 = [-1.25, -1.25]; the papers' step is mean_p Delta_p
    for cls in (FedCM, MoFedSAM, FedMRURH):
        alg = cls(cls.Params(lr=0.1), TINY)
        new, _ = alg.server_receive(momentum_state(), unequal_arrivals(), gen())
        torch.testing.assert_close(new.tensors["weights"], torch.tensor([0.5, -1.0]))  # [1, 1] + [-0.5, -2]
        torch.testing.assert_close(new.tensors["momentum"], torch.tensor([0.4, 1.6]))  # [0.5, 2] / 1.25
    # normalized (FedMRUR, FedMRUR-N): mean norm (1 + 4) / 2 = 2.5 along sum [-1, -4] (norm sqrt 17)
    step = 2.5 * torch.tensor([-1.0, -4.0]) / math.sqrt(17)
    for cls in (FedMRUR, FedMRURN):
        alg = cls(cls.Params(lr=0.1), TINY)
        new, _ = alg.server_receive(momentum_state(), unequal_arrivals(), gen())
        torch.testing.assert_close(new.tensors["weights"], torch.tensor([1.0, 1.0]) + step)
        torch.testing.assert_close(new.tensors["momentum"], -step / 1.25)


def test_fedcm_round_at_unequal_step_counts_by_hand() -> None:
    # two clients, 4 and 10 samples, batch 2, one epoch: K = 2 and K = 5 full-batch-free steps
    lr, alpha = 0.2, 0.3
    alg = FedCM(FedCMParams(lr=lr, batch_size=2, local_epochs=1, alpha=alpha), LOGISTIC)
    w0, delta_t = start_weights(), torch.linspace(0.5, -0.5, 8)
    state = ServerState(tensors={"weights": w0, "momentum": delta_t}, version=0)
    arrivals, deltas, horizons = [], [], []
    for client, n in enumerate((4, 10)):
        data = tiny_data(n)
        rng_alg, rng_hand = gen(10 + client), gen(10 + client)
        result = alg.client_update(alg.payload_for(state, client), None, data, rng_alg)
        steps = int(result.metrics["steps"])
        w = w0.clone()
        perm, pos = torch.randperm(n, generator=rng_hand), 0
        for _ in range(steps):  # the batches local_sgd draws: consecutive permutations
            if pos == n:
                perm, pos = torch.randperm(n, generator=rng_hand), 0
            idx = perm[pos:pos + 2]
            pos += 2
            batch = ClientData(0, data.x_train[idx], data.y_train[idx], data.x_test, data.y_test)
            w = w - lr * (alpha * flat_grad(w, batch) + (1 - alpha) * delta_t)
        torch.testing.assert_close(result.upload["delta"], w - w0)
        deltas.append(w - w0)
        horizons.append(steps * lr)
        arrivals.append(Arrival(client, result.upload, n, 0, 0, steps=steps))
    assert horizons == [2 * lr, 5 * lr]
    new, _ = alg.server_receive(state, arrivals, gen())
    mean = (deltas[0] + deltas[1]) / 2
    torch.testing.assert_close(new.tensors["weights"], w0 + mean)
    torch.testing.assert_close(new.tensors["momentum"], -mean / (3.5 * lr))


def test_normalized_aggregation_by_hand() -> None:
    # sum = [1, 2] (norm sqrt 5), mean of norms = (1 + 2) / 2 = 1.5
    out = normalized_aggregate(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    torch.testing.assert_close(out, torch.tensor([1.5 / math.sqrt(5), 3.0 / math.sqrt(5)]))
    torch.testing.assert_close(normalized_aggregate(torch.tensor([[1.0, 1.0], [-1.0, -1.0]])), torch.zeros(2))
    for cls in (FedMRUR, FedMRURN):
        alg = cls(cls.Params(lr=0.1, local_steps=2), TINY)
        new, _ = alg.receive(momentum_state(), momentum_arrivals(), gen())
        # norms 0.2 and 0.4 (mean 0.3) along the sum [-0.2, -0.4] (norm 0.2 sqrt 5)
        step = -0.3 * torch.tensor([1.0, 2.0]) / math.sqrt(5)
        torch.testing.assert_close(new.tensors["weights"], torch.tensor([1.0, 1.0]) + step)
        torch.testing.assert_close(new.tensors["momentum"], -step / 0.2)
        # the norm gain: mean norm 0.3 over the mean's norm |[-0.1, -0.2]| = 0.1 sqrt 5
        assert alg.server_metrics(new)["update_norm_gain"] == pytest.approx(3 / math.sqrt(5))
    alg_h = FedMRURH(FedMRURParams(lr=0.1, local_steps=2), TINY)  # plain mean
    assert math.isnan(alg_h.server_metrics(momentum_state())["update_norm_gain"])  # no aggregation yet
    new, _ = alg_h.receive(momentum_state(), momentum_arrivals(), gen())
    torch.testing.assert_close(new.tensors["momentum"], torch.tensor([0.5, 1.0]))
    # the plain mean records the gain normalization would have given
    assert alg_h.server_metrics(new)["update_norm_gain"] == pytest.approx(3 / math.sqrt(5))


def test_norm_gain_by_hand() -> None:
    """Parallel updates gain 1; P orthogonal updates of equal norm gain sqrt(P); opposite
    updates (a zero mean) have no gain (NaN)."""
    assert norm_gain(torch.tensor([[1.0, 2.0], [2.0, 4.0]])) == pytest.approx(1.0)
    assert norm_gain(torch.eye(4) * 3.0) == pytest.approx(2.0)
    # norms 1 and 2 (mean 1.5); mean [0.5, 1.0], norm sqrt(1.25)
    assert norm_gain(torch.tensor([[1.0, 0.0], [0.0, 2.0]])) == pytest.approx(1.5 / math.sqrt(1.25))
    assert math.isnan(norm_gain(torch.tensor([[1.0, 1.0], [-1.0, -1.0]])))


def test_lorentz_lift_and_distance_by_hand() -> None:
    # Law et al.'s lift: (sqrt(|z|^2 + beta), z)
    x = lorentz_lift(torch.tensor([3.0, 4.0]), beta=1.0)
    torch.testing.assert_close(x, torch.tensor([math.sqrt(26), 3.0, 4.0]))
    x4 = lorentz_lift(torch.tensor([0.0, 5.0], dtype=torch.float64), beta=4.0)
    torch.testing.assert_close(x4, torch.tensor([math.sqrt(29), 0.0, 5.0], dtype=torch.float64))
    torch.testing.assert_close(lorentz_inner(x4, x4), torch.tensor(-4.0, dtype=torch.float64))  # on the hyperboloid
    torch.testing.assert_close(lorentz_lift(torch.zeros(2), 1.0), torch.tensor([1.0, 0.0, 0.0]))  # the origin
    # lift([1,0]) = (sqrt 2, 1, 0), lift([0,1]) = (sqrt 2, 0, 1): <x,y>_L = -2, d^2 = -2 + 4 = 2
    a, b = lorentz_lift(torch.tensor([1.0, 0.0]), 1.0), lorentz_lift(torch.tensor([0.0, 1.0]), 1.0)
    torch.testing.assert_close(lorentz_sq_distance(a, b, 1.0), torch.tensor(2.0))
    torch.testing.assert_close(feature_sq_distance(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), 1.0),
                               torch.tensor([2.0]))
    # [3, 0] vs [0, 4] at beta = 1: 2 (sqrt(10) sqrt(17) - 0 - 1)
    torch.testing.assert_close(feature_sq_distance(torch.tensor([[3.0, 0.0]]), torch.tensor([[0.0, 4.0]]), 1.0),
                               torch.tensor([2 * (math.sqrt(170) - 1)]))
    # the cancellation-free form equals the definition (float64), 0 <= d^2 <= |zp - zg|^2, and it
    # stays accurate in float32 on ResNet-18-GN-sized features (dim 512, norm ~23)
    for scale, dim in ((1.0, 4), (1.0, 512)):
        zp = scale * torch.randn(5, dim, generator=gen(1), dtype=torch.float64)
        zg = zp + 0.05 * torch.randn(5, dim, generator=gen(2), dtype=torch.float64)
        for beta in (1.0, 2.5):
            direct = lorentz_sq_distance(lorentz_lift(zp, beta), lorentz_lift(zg, beta), beta)
            d2 = feature_sq_distance(zp, zg, beta)
            torch.testing.assert_close(d2, direct)
            assert (d2 >= 0).all() and (d2 <= ((zp - zg) ** 2).sum(dim=1)).all()
            torch.testing.assert_close(feature_sq_distance(zp.float(), zg.float(), beta), d2.float(), rtol=1e-4,
                                       atol=0)


def test_manifold_regularizer_batch_mean() -> None:
    zp = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    zg = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    # first row d^2 = 2 (above); the second row's distance is 0
    torch.testing.assert_close(manifold_regularizer(zp, zg, beta=1.0, sigma=2.0),
                               torch.tensor((math.e + 1) / 2))


def test_regularizer_gradient_on_resnet18_gn_sized_features() -> None:
    """The old exponential map at the origin saturated its cap on such features (zero
    gradient); the paper's lift gives a finite, non-zero gradient that matches the formula
    dR/dzp = gamma / (B sigma) exp(d^2 / sigma) grad d^2 at the paper's gamma, sigma, beta."""
    g = gen(7)
    zg = torch.randn(50, 512, generator=g)
    zg = 23.0 * zg / zg.norm(dim=1, keepdim=True)  # norm 23, as ResNet-18-GN's body outputs
    zp = (zg + 0.5 * torch.randn(50, 512, generator=g)).requires_grad_(True)
    gamma, sigma, beta = 0.005, 10000.0, 1.0
    (gamma * manifold_regularizer(zp, zg, beta, sigma)).backward()
    grad = zp.grad
    assert torch.isfinite(grad).all() and float(grad.norm()) > 0
    # by hand: grad d^2 = 2 (zp - zg) - 2 (a - b) zp / a with a, b the lifted time coordinates
    zd = zp.detach()
    a, b = torch.sqrt((zd ** 2).sum(1, keepdim=True) + beta), torch.sqrt((zg ** 2).sum(1, keepdim=True) + beta)
    d2 = ((zd - zg) ** 2).sum(1, keepdim=True) - (a - b) ** 2
    hand = gamma / (50 * sigma) * torch.exp(d2 / sigma) * (2 * (zd - zg) - 2 * (a - b) * zd / a)
    torch.testing.assert_close(grad, hand, rtol=1e-4, atol=1e-12)
    # long features far apart: large, finite R and gradient (no cap cuts it)
    far = (10 * zg + 300.0).requires_grad_(True)
    r = manifold_regularizer(far, zg, beta, sigma)
    r.backward()
    assert 1 < float(r.detach()) < float("inf") and torch.isfinite(far.grad).all() and float(far.grad.norm()) > 0


def test_lifted_regularizer_is_to_first_order_a_feature_distance_penalty() -> None:
    """With d^2 / sigma small, grad (gamma R) = (gamma / sigma) grad mean d^2 up to a factor
    exp(d^2 / sigma) ~ 1 (here d^2 / sigma < 1e-3)."""
    zg = torch.randn(5, 4, generator=gen(11))
    zp = (zg + 0.1 * torch.randn(5, 4, generator=gen(12))).requires_grad_(True)
    gamma, sigma = 0.5, 1000.0
    (gamma * manifold_regularizer(zp, zg, 1.0, sigma)).backward()
    d2 = feature_sq_distance(zp, zg, 1.0)
    assert float(d2.detach().max()) / sigma < 1e-3
    (penalty,) = torch.autograd.grad(gamma / sigma * d2.mean(), zp)
    torch.testing.assert_close(zp.grad, penalty, rtol=1e-3, atol=0.0)


def test_fedmrur_client_loss_adds_the_regularizer() -> None:
    factory = ModelFactory("mlp", (3,), 2, hidden=(4,))
    params = FedMRURParams(lr=0.2, batch_size=6, local_steps=1, alpha=1.0, rho=0.0, gamma=0.5, sigma=3.0)
    alg = FedMRURH(params, factory)
    data = tiny_data()
    w_global = factory.initial_weights(gen(5))
    w_start = w_global + 0.3 * torch.randn(w_global.shape, generator=gen(6))
    # global features h_g(x) from the received weights; loss at the local start weights
    model_g, model_p = factory.build(), factory.build()
    factory.load_flat(model_g, w_global)
    factory.load_flat(model_p, w_start)
    zg = model_g.features(data.x_train).detach()
    zp = model_p.features(data.x_train)
    loss = F.cross_entropy(model_p.head(zp), data.y_train) + 0.5 * manifold_regularizer(zp, zg, 1.0, 3.0)
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model_p.parameters()])
    # with alpha = 1 and rho = 0 the step is plain gradient descent on the regularized loss;
    # the regularizer's centre is the payload's weights, the step starts there too, so use a
    # payload whose weights are w_start and a frozen copy loaded with w_global by hand
    loss_fn = alg.regularized_loss(w_global)
    out, _ = local_sgd(alg.workspace, factory, w_start, data, params, gen(), 1, loss_fn=loss_fn)
    torch.testing.assert_close(out, w_start - 0.2 * grad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_upload_is_rejected_naming_the_client(bad: float) -> None:
    for cls in (FedMRUR, FedMRURN, FedMRURH, MoFedSAM):
        alg = cls(cls.Params(), TINY)
        state = alg.init_server(gen(0))
        good = torch.zeros_like(state.tensors["weights"])
        broken = good.clone()
        broken[3] = bad
        arrivals = [Arrival(4, {"delta": good}, 5, 0, 0), Arrival(9, {"delta": broken}, 5, 0, 0)]
        with pytest.raises(NonFiniteUpload, match=f"{cls.name}: client 9 uploaded a non-finite model delta"):
            alg.server_receive(state, arrivals, gen(1))


def test_regularizer_warns_for_batchnorm_dropout_and_parameterless_bodies() -> None:
    assert regularizer_warnings("fedmrur", nn.Sequential(nn.Linear(3, 4), nn.GroupNorm(2, 4))) == []
    norm, = regularizer_warnings("fedmrur", nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.1)))
    assert "BatchNorm1d, Dropout layers" in norm and "not zero at equal weights" in norm
    empty, = regularizer_warnings("fedmrur", nn.Flatten())
    assert "no trainable parameters" in empty
    # through the algorithm: the logistic model's body is a bare flatten, warned when the
    # regularizer is first built, and only when it is on (gamma > 0)
    with pytest.warns(UserWarning, match="fedmrur_h: the model's body has no trainable parameters"):
        FedMRURH(FedMRURParams(), LOGISTIC).regularized_loss(LOGISTIC.initial_weights(gen(0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FedMRURH(FedMRURParams(gamma=0.0), LOGISTIC).regularized_loss(LOGISTIC.initial_weights(gen(0)))
        FedMRUR(FedMRURParams(), ModelFactory("mlp", (3,), 2, hidden=(4,))).regularized_loss(
            ModelFactory("mlp", (3,), 2, hidden=(4,)).initial_weights(gen(0)))


# ---------------------------------------------------------------------------- FedExp
def test_fedexp_step_size_by_hand() -> None:
    # sum ||D_p||^2 = 16 + 4 + 4 = 24, mean = [2/3, 2/3] (||.||^2 = 8/9): 24 / (6 (8/9 + 1e-3))
    deltas = torch.tensor([[4.0, 0.0], [0.0, 2.0], [-2.0, 0.0]])
    eta = 24 / (6 * (8 / 9 + 1e-3))
    assert fedexp_step_size(deltas, 1e-3) == pytest.approx(eta)
    assert fedexp_step_size(torch.tensor([[2.0, 0.0], [0.0, 2.0]]), 1e-3) == 1.0  # 8 / (4 * 2.001) < 1
    alg = FedExp(FedExpParams(), TINY)
    state = ServerState(tensors={"weights": torch.tensor([1.0, 1.0])}, version=0)
    arrivals = [Arrival(i, {"delta": d}, 7 * (i + 1), 0, 0) for i, d in enumerate(deltas)]
    new, changed = alg.receive(state, arrivals, gen())
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([1.0, 1.0]) + eta * torch.tensor([2 / 3, 2 / 3]))
    assert changed and new.extra["eta_g"] == pytest.approx(eta)


# ---------------------------------------------------------------------------- schedules
def test_round_reaches_the_client_and_decays_local_lr() -> None:
    params = FedAvgParams(lr=0.4, batch_size=6, local_steps=2, lr_decay=0.5, weight_decay=0.1)
    alg = FedAvg(params, LOGISTIC)
    state = ServerState(tensors={"weights": start_weights()}, version=3)
    payload = alg.payload_for(state, 0)
    assert payload[ROUND_KEY].tolist() == [3] and payload[ROUND_KEY].dtype == torch.int64
    assert alg.download_bytes() == 8 * 4 + 8
    data = tiny_data()
    result = alg.client_update(payload, None, data, gen())
    w = start_weights()
    for _ in range(2):  # lr 0.4 * 0.5^3 = 0.05, weight decay 0.1 added to the gradient
        w = w - 0.05 * (flat_grad(w, data) + 0.1 * w)
    torch.testing.assert_close(result.upload["delta"], w - start_weights())
    # no decay: no round in the payload, bytes unchanged
    plain = FedAvg(FedAvgParams(), LOGISTIC)
    assert ROUND_KEY not in plain.payload_for(state, 0) and plain.download_bytes() == 8 * 4


def test_server_lr_decay() -> None:
    alg = FedAvg(FedAvgParams(server_lr=2.0, server_lr_decay=0.5), TINY)
    state = ServerState(tensors={"weights": torch.zeros(2)}, version=3)
    new, _ = alg.receive(state, [Arrival(0, {"delta": torch.tensor([1.0, -1.0])}, 1, 3, 0)], gen())
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([0.25, -0.25]))  # 2 * 0.5^3


def test_decayed_lr_in_scaffold_control_and_fedcm_horizon() -> None:
    lr, decay, t = 0.2, 0.5, 2
    alg = Scaffold(ScaffoldParams(lr=lr, lr_decay=decay, batch_size=6, local_steps=2), LOGISTIC)
    data, w0 = tiny_data(), start_weights()
    zero = torch.zeros(8)
    result = alg.client_update({"weights": w0, "control": zero, ROUND_KEY: torch.tensor([t])}, None, data, gen())
    eta = lr * decay ** t
    y = w0.clone()
    for _ in range(2):
        y = y - eta * flat_grad(y, data)
    torch.testing.assert_close(result.state["control"], (w0 - y) / (2 * eta))
    # the FedCM server uses K eta_l of the round each task was dispatched in (version_dispatched)
    cm = FedCM(FedCMParams(lr=lr, lr_decay=decay, local_steps=2), TINY)
    state = ServerState(tensors={"weights": torch.zeros(2), "momentum": torch.zeros(2)}, version=t + 1)
    new, _ = cm.receive(state, [Arrival(0, {"delta": torch.tensor([1.0, 0.0])}, 5, t, 0)], gen())
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(new.tensors["momentum"], torch.tensor([-1 / (2 * eta), 0.0]))


# ---------------------------------------------------------------------------- registry and scenario errors
def test_registered_names_and_params() -> None:
    for name in ("fedprox", "scaffold", "fedcm", "fedsam", "mofedsam", "fedexp", "fedmrur", "fedmrur_n", "fedmrur_h"):
        assert name in algorithm_names()
        cls = get_algorithm(name)
        assert cls.name == name and cls.__doc__ and cls.modes == frozenset({"sync"})
    p = FedMRURParams()
    assert (p.rho, p.alpha, p.gamma, p.sigma, p.beta) == (0.5, 0.1, 0.005, 10000.0, 1.0)
    assert "gamma" not in MoFedSAMParams.model_fields  # FedMRUR-N has no regularizer to tune


@pytest.mark.parametrize("algo, message", [
    ({"name": "fedmrur_n", "gamma": 0.1}, "algorithm.gamma"),
    ({"name": "fedsam", "rho": -1}, "algorithm.rho"),
    ({"name": "fedexp", "server_lr": 2.0}, "algorithm.server_lr"),
    ({"name": "fedcm", "alpha": 0}, "algorithm.alpha"),
])
def test_scenario_mistakes_name_the_field(algo: dict, message: str) -> None:
    raw = {"name": "x", "algorithm": algo, "stop": {"rounds": 1}}
    with pytest.raises(ScenarioError, match=message):
        parse_suite(raw, "test.yaml")


def test_fedmrur_and_fedmrur_n_train_resnet18_gn_differently() -> None:
    """The issue's new-user check at the paper's defaults (gamma 0.005, sigma 10^4, beta 1, rho
    0.5, alpha 0.1): on ResNet-18-GN the old capped exponential map left FedMRUR's weights
    bit-identical to FedMRUR-N's. FedMRUR with gamma = 0 must still equal FedMRUR-N bit for bit
    (same path), so any difference at gamma = 0.005 is the regularizer's gradient."""
    factory = ModelFactory("resnet18_gn", (3, 8, 8), 10)
    g = gen(11)
    data = ClientData(0, torch.randn(4, 3, 8, 8, generator=g), torch.arange(4), torch.zeros(0, 3, 8, 8),
                      torch.zeros(0, dtype=torch.long))
    w0 = factory.initial_weights(gen(12))
    payload = {"weights": w0, "momentum": 1e-3 * torch.randn(w0.shape, generator=g)}
    common = dict(lr=0.1, batch_size=2, local_steps=2)
    runs = {}
    for key, alg in (("n", FedMRURN(FedMRURN.Params(**common), factory)),
                     ("gamma0", FedMRUR(FedMRURParams(gamma=0.0, **common), factory)),
                     ("paper", FedMRUR(FedMRURParams(**common), factory))):
        runs[key] = alg.client_update(payload, None, data, gen(13)).upload["delta"]
    assert torch.equal(runs["n"], runs["gamma0"])
    assert not torch.equal(runs["n"], runs["paper"])
