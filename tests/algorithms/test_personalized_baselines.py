"""Per-FedAvg (FO / HF), pFedMe and FedUpdate update rules against direct formulas on a
6-parameter logistic model (flat layout: W row-major, then b)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.functional import hessian

from fedclock.algorithms.base import Arrival, ClientData
from fedclock.algorithms.fedupdate import FedUpdate, FedUpdateParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.perfedavg import PerFedAvg, PerFedAvgParams
from fedclock.algorithms.pfedme import PFedMe, PFedMeParams
from fedclock.algorithms.training import batches

FACTORY = ModelFactory("logistic", (2,), 2)
X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.5], [0.3, -0.7], [2.0, 0.1]])
Y = torch.tensor([0, 1, 1, 0, 1, 0])
DATA = ClientData(0, X, Y, X[:2], Y[:2])
W = torch.tensor([0.1, -0.2, 0.3, 0.0, 0.05, -0.05])


def loss(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x @ w[:4].view(2, 2).T + w[4:], y)


def grad(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    w = w.clone().requires_grad_(True)
    return torch.autograd.grad(loss(w, x, y), w)[0]


@pytest.mark.parametrize("variant", ["fo", "hf"])
def test_perfedavg_step(variant: str) -> None:
    a, b, B = 0.3, 0.2, 2
    k = 2 if variant == "fo" else 3
    alg = PerFedAvg(PerFedAvgParams(lr=b, inner_lr=a, batch_size=B, local_steps=1, variant=variant), FACTORY)
    result = alg.client_update({"weights": W}, None, DATA, torch.Generator().manual_seed(5))
    idx = next(batches(6, k * B, 1, torch.Generator().manual_seed(5)))  # the same draw, split in k
    parts = [(X[i], Y[i]) for i in idx.chunk(k)]
    w_tmp = W - a * grad(W, *parts[0])
    g2 = grad(w_tmp, *parts[1])
    if variant == "fo":
        direction = g2
    else:
        h = hessian(lambda w: loss(w, *parts[2]), W)  # full 6x6 Hessian
        direction = g2 - a * h @ g2
    assert torch.allclose(result.upload["delta"], -b * direction, atol=1e-6)


def test_perfedavg_evaluates_after_one_adaptation_step() -> None:
    alg = PerFedAvg(PerFedAvgParams(inner_lr=0.5, batch_size=6), FACTORY)
    adapted = alg.adapt(W, DATA)  # batch of 6 = the whole train set
    assert torch.allclose(adapted, W - 0.5 * grad(W, X, Y), atol=1e-6)


def test_pfedme_local_round_and_server_mix() -> None:
    plr, lam, eta, K = 0.1, 2.0, 0.05, 3
    alg = PFedMe(PFedMeParams(lr=eta, personal_lr=plr, lamda=lam, inner_steps=K, batch_size=6, local_steps=2,
                              beta=0.5), FACTORY)
    result = alg.client_update({"weights": W}, None, DATA, torch.Generator().manual_seed(0))
    w = W.clone()
    for _ in range(2):  # full-batch local rounds: order of samples is irrelevant
        theta = w.clone()
        for _ in range(K):
            theta = theta - plr * (grad(theta, X, Y) + lam * (theta - w))
        w = w - eta * lam * (w - theta)
    assert torch.allclose(result.upload["weights"], w, atol=1e-6)
    assert torch.allclose(result.state["theta"], theta, atol=1e-6)
    state = alg.init_server(torch.Generator().manual_seed(0))
    w_g = state.tensors["weights"]
    ups = [torch.ones(6), 3 * torch.ones(6)]
    new, changed = alg.receive(state, [Arrival(c, {"weights": u}, 1 + c, 0, 0) for c, u in enumerate(ups)],
                                      torch.Generator())
    assert changed and torch.allclose(new.tensors["weights"], 0.5 * w_g + 0.5 * 2 * torch.ones(6))


def test_fedupdate_phases_and_server_steps() -> None:
    alg = FedUpdate(FedUpdateParams(fedavg_versions=1, server_lr=1.0, meta_server_lr=0.25, lr=0.1, meta_lr=0.2,
                                    batch_size=6, local_steps=1, finetune_steps=1), FACTORY)
    state = alg.init_server(torch.Generator().manual_seed(0))
    w0 = state.tensors["weights"]
    p0 = alg.payload_for(state, 0)
    assert p0["meta_phase"].item() == 0
    up = alg.client_update(p0, None, DATA, torch.Generator())
    assert torch.allclose(up.upload["delta"], -0.1 * grad(w0, X, Y), atol=1e-6)
    d = [torch.ones(6), -torch.ones(6)]
    arrivals = [Arrival(c, {"delta": d[c], "meta_phase": p0["meta_phase"]}, n, 0, 0) for c, n in ((0, 3), (1, 1))]
    state, _ = alg.receive(state, arrivals, torch.Generator())
    w1 = w0 + 0.75 * d[0] + 0.25 * d[1]
    assert torch.allclose(state.tensors["weights"], w1)
    p1 = alg.payload_for(state, 0)  # version 1 >= fedavg_versions: Reptile phase
    assert p1["meta_phase"].item() == 1
    up = alg.client_update(p1, None, DATA, torch.Generator())
    assert torch.allclose(up.upload["delta"], -0.2 * grad(w1, X, Y), atol=1e-6)
    arrivals = [Arrival(c, {"delta": d[c], "meta_phase": p1["meta_phase"]}, n, 1, 0) for c, n in ((0, 3), (1, 1))]
    state, _ = alg.receive(state, arrivals, torch.Generator())
    assert torch.allclose(state.tensors["weights"], w1 + 0.25 * (0.75 * d[0] + 0.25 * d[1]))
    # personalized evaluation fine-tunes one full-batch step (lr) before testing
    tuned = w1 - 0.1 * grad(w1, X, Y)
    got = alg.evaluate_client(p1, None, DATA, 16)
    logits = X[:2] @ tuned[:4].view(2, 2).T + tuned[4:]
    assert got.correct == float((logits.argmax(1) == Y[:2]).sum())
    assert got.loss_sum == pytest.approx(float(F.cross_entropy(logits, Y[:2], reduction="sum")), rel=1e-5)
