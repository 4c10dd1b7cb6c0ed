"""FedCR: the Gaussian-encoder model wrapper, the KL and the batch objective against direct
formulas, the server's body / prior aggregation by hand, and an end-to-end run on digits."""
from __future__ import annotations

import math
from pathlib import Path

import pydantic
import pytest
import torch
import torch.nn.functional as F

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.base import Arrival, ClientData
from fedclock.algorithms.fedcr import PRIOR_MIN_STD, FedCR, FedCRParams, GaussianEncoderFactory, \
    GaussianEncoderModel, fedcr_loss, gaussian_kl
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.registry import get_algorithm
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

BASE = ModelFactory("logistic", (3,), 2)  # identity (flatten) body of width 3


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_gaussian_kl_by_hand() -> None:
    # KL(N(0, 1) || N(1, 2^2)) = ln 2 + (1 + 1) / 8 - 1/2
    kl = gaussian_kl(torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), torch.full((1, 1), 2.0))
    assert float(kl) == pytest.approx(math.log(2) + 0.25 - 0.5)
    # sums over dimensions, zero for equal distributions
    mu, std = torch.tensor([[0.3, -1.0]]), torch.tensor([[0.5, 2.0]])
    assert float(gaussian_kl(mu, std, mu, std)) == pytest.approx(0.0, abs=1e-7)


def test_wrapper_layout_and_forward() -> None:
    factory = GaussianEncoderFactory.wrapping(BASE, z_dim=2)
    model = factory.build()
    assert isinstance(model, GaussianEncoderModel)
    # body: Linear(3, 4) = 16 values, head: Linear(2, 2) = 6 values
    assert factory.num_params == 22 and factory.body == slice(0, 16) and factory.head == slice(16, 22)
    x = torch.randn(4, 3, generator=gen())
    mu, sigma = model.distribution(x)
    w = factory.flatten(model)
    out = x @ w[0:12].view(4, 3).T + w[12:16]
    torch.testing.assert_close(mu, out[:, :2])
    torch.testing.assert_close(sigma, F.softplus(out[:, 2:]))
    torch.testing.assert_close(model(x), mu @ w[16:20].view(2, 2).T + w[20:22])
    assert set(model.stages) == {"encoder", "gaussian", "head"}


def test_batch_objective_against_direct_formula() -> None:
    factory = GaussianEncoderFactory.wrapping(BASE, z_dim=2)
    model = factory.build()
    w = factory.flatten(model)
    x = torch.tensor([[1.0, 0.0, -1.0], [0.5, 2.0, 1.0]])
    y = torch.tensor([1, 0])
    eps = torch.randn(3, 2, 2, generator=gen(1))
    prior_mean = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    prior_std = torch.tensor([[1.0, 0.5], [2.0, 1.0]])
    out = x @ w[0:12].view(4, 3).T + w[12:16]
    mu, sigma = out[:, :2], torch.log1p(torch.exp(out[:, 2:]))
    ce = 0.0
    for s in range(3):
        logits = (mu + sigma * eps[s]) @ w[16:20].view(2, 2).T + w[20:22]
        ce += float((torch.logsumexp(logits, 1) - logits[torch.arange(2), y]).mean()) / 3
    m, sd = prior_mean[y], prior_std[y]
    kl = float((torch.log(sd / sigma) + (sigma**2 + (mu - m) ** 2) / (2 * sd**2) - 0.5).sum(1).mean())
    with torch.no_grad():
        got = fedcr_loss(model, x, y, prior_mean, prior_std, 0.1, eps)
    assert float(got) == pytest.approx(ce + 0.1 * kl, rel=1e-5)


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_server_aggregates_body_heads_and_class_priors(rate: float) -> None:
    factory = ModelFactory("logistic", (3,), 3)  # three classes: class 2 is held by nobody
    alg = FedCR(FedCRParams(z_dim=1, prior_rate=rate), factory)
    state = alg.init_server(gen())
    w = state.tensors["weights"]
    f = alg.model_factory
    assert (f.body, f.head) == (slice(0, 8), slice(8, 14))
    a0 = Arrival(0, {"body_delta": torch.full((8,), 1.0), "head": torch.full((6,), 1.0),
                     "counts": torch.tensor([2.0, 0.0, 0.0]), "sum_mu": torch.tensor([[2.0], [0.0], [0.0]]),
                     "sum_sq": torch.tensor([[6.0], [0.0], [0.0]])}, 30, 0, 0)
    a1 = Arrival(1, {"body_delta": torch.full((8,), 5.0), "head": torch.full((6,), 9.0),
                     "counts": torch.tensor([2.0, 1.0, 0.0]), "sum_mu": torch.tensor([[6.0], [1.0], [0.0]]),
                     "sum_sq": torch.tensor([[20.0], [3.0], [0.0]])}, 10, 0, 0)
    new, changed = alg.receive(state, [a0, a1], gen())
    assert changed and new.version == 1
    # body w + 3/4 * 1 + 1/4 * 5 = w + 2; head 3/4 * 1 + 1/4 * 9 = 3
    torch.testing.assert_close(new.tensors["weights"][f.body], w[f.body] + 2.0)
    torch.testing.assert_close(new.tensors["weights"][f.head], torch.full((6,), 3.0))
    # class 0: N = 4, mean 8/4 = 2, E[mu^2 + sigma^2] = 26/4 -> var 2.5; class 1: mean 1, var 3 - 1 = 2
    mean = torch.tensor([[2.0], [1.0], [0.0]])
    std = torch.tensor([[math.sqrt(2.5)], [math.sqrt(2.0)], [1.0]])
    expected_mean = rate * mean
    expected_std = (1 - rate) * 1.0 + rate * std
    expected_mean[2], expected_std[2] = 0.0, 1.0  # unseen class keeps N(0, 1)
    torch.testing.assert_close(new.tensors["prior_mean"], expected_mean)
    torch.testing.assert_close(new.tensors["prior_std"], expected_std)
    payload = alg.payload_for(new, 4)
    assert set(payload) == {"body", "head", "prior_mean", "prior_std"}


def test_collapsed_class_prior_is_floored() -> None:
    alg = FedCR(FedCRParams(z_dim=1), ModelFactory("logistic", (3,), 2))
    state = alg.init_server(gen())
    a = Arrival(0, {"body_delta": torch.zeros(8), "head": torch.zeros(4), "counts": torch.tensor([2.0, 0.0]),
                    "sum_mu": torch.tensor([[2.0], [0.0]]), "sum_sq": torch.tensor([[2.0], [0.0]])}, 2, 0, 0)
    new, _ = alg.receive(state, [a], gen())
    assert float(new.tensors["prior_std"][0, 0]) == pytest.approx(PRIOR_MIN_STD)


def test_client_uploads_class_moments_and_keeps_its_head() -> None:
    alg = FedCR(FedCRParams(z_dim=2, lr=0.1, batch_size=2, local_steps=3, z_samples=2), BASE)
    state = alg.init_server(gen(1))
    payload = alg.payload_for(state, 0)
    x = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 1.0], [2.0, 1.0, -1.0], [-1.0, 0.5, 0.5], [1.5, 1.5, 1.5]])
    y = torch.tensor([0, 0, 1, 1, 1])
    data = ClientData(0, x, y, x, y)
    res = alg.client_update(payload, None, data, gen(5))
    up = res.upload
    f = alg.model_factory
    body = state.tensors["weights"][f.body] + up["body_delta"]
    out = x @ body[0:12].view(4, 3).T + body[12:16]
    mu, sigma = out[:, :2], F.softplus(out[:, 2:])
    torch.testing.assert_close(up["counts"], torch.tensor([2.0, 3.0]))
    torch.testing.assert_close(up["sum_mu"], torch.stack([mu[:2].sum(0), mu[2:].sum(0)]))
    sq = mu * mu + sigma * sigma
    torch.testing.assert_close(up["sum_sq"], torch.stack([sq[:2].sum(0), sq[2:].sum(0)]))
    assert torch.equal(res.state["head"], up["head"]) and res.metrics["steps"] == 3
    # the same task is reproducible; the client's own head is what it trains next time
    again = alg.client_update(payload, None, data, gen(5))
    torch.testing.assert_close(again.upload["body_delta"], up["body_delta"])
    assert torch.equal(alg.own_head(payload, res.state), up["head"])
    assert torch.equal(alg.own_head(payload, None), payload["head"])
    # the regularizer changes training
    free = FedCR(alg.params.model_copy(update={"beta": 0.0}), BASE).client_update(payload, None, data, gen(5))
    strong = FedCR(alg.params.model_copy(update={"beta": 1.0}), BASE).client_update(payload, None, data, gen(5))
    assert not torch.allclose(free.upload["body_delta"], strong.upload["body_delta"])


def test_costs_and_params() -> None:
    alg = FedCR(FedCRParams(z_dim=2, batch_size=2, local_steps=3), BASE)
    c, z = 2, 2
    assert alg.download_bytes() == 4 * (16 + 6 + 2 * c * z)
    assert alg.upload_bytes() == 4 * (16 + 6 + c + 2 * c * z)
    assert get_algorithm("fedcr") is FedCR and FedCR.payload_is_shared
    for bad in ({"z_dim": 0}, {"beta": -1.0}, {"prior_rate": 1.5}, {"z_samples": 0}):
        with pytest.raises(pydantic.ValidationError):
            FedCRParams(**bad)


def test_fedcr_learns_pathological_digits(tmp_path: Path) -> None:
    s = scenario(dataset={"name": "digits", "partition": {"type": "pathological", "classes_per_client": 2}},
                 model={"name": "mlp", "hidden": [32]}, population={"num_clients": 8},
                 algorithm={"name": "fedcr", "lr": 0.05, "batch_size": 16, "local_epochs": 1, "z_dim": 16},
                 stop={"rounds": 8}, evaluation={"every": 8}, runtime={"backend": "inline"})
    summary = run_scenario(s, Runtime("inline"), tmp_path)
    assert summary.personal_accuracy_mean >= 0.9  # chance on a 2-class client: 0.5
