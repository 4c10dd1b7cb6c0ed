"""LGA / PLGA: S(k), S~(k), the eq (10)/(11) leap and the eq (12)-(14) personalization
against direct formulas on a 12-parameter MLP (stages: hidden = 6 values, head = 6)."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.base import Arrival, ClientData
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.plga import LGA, PLGA, PLGAParams

FACTORY = ModelFactory("mlp", (2,), 2, hidden=(2,))
GEN = torch.Generator().manual_seed(0)
HIDDEN, HEAD = slice(0, 6), slice(6, 12)


def vec(seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(12, generator=torch.Generator().manual_seed(seed))


D = {0: vec(10), 1: vec(11), 2: vec(12), 3: vec(13, 2.0), 4: vec(14)}


def arr(client: int, t0: int, tau: int) -> Arrival:
    return Arrival(client=client, upload={"delta": D[client]}, num_samples=5, version_dispatched=t0,
                   staleness=tau - t0)


def s_tilde(a: torch.Tensor, b: torch.Tensor) -> float:
    s = float(torch.dot(a, b) / (a.norm() * b.norm()))
    return math.exp(s) / (math.exp(1.0) + math.exp(s))


def three_rounds(alg: LGA) -> tuple:
    """Round A: client 0 (punctual); B: client 1 punctual + client 2 one round late;
    C: client 3 two rounds late + client 4 punctual."""
    s0 = alg.init_server(GEN)
    s1, _ = alg.receive(s0, [arr(0, 0, 0)], GEN)
    s2, _ = alg.receive(s1, [arr(1, 1, 1), arr(2, 0, 1)], GEN)
    s3, changed = alg.receive(s2, [arr(3, 0, 2), arr(4, 2, 2)], GEN)
    assert changed and s3.version == 3
    return s0, s1, s2, s3


@pytest.mark.parametrize("leap", ["eq10", "eq11"])
def test_leap_approximation_and_aggregation(leap: str) -> None:
    alg = LGA(PLGAParams(leap=leap), FACTORY)
    s0, s1, s2, s3 = three_rounds(alg)
    w0 = s0.tensors["weights"]
    w1 = w0 + D[0]
    assert torch.allclose(s1.tensors["weights"], w1, atol=1e-6)
    # round B: straggler 2 (t0 = 0, t1 = 1 = tau): the leap term vanishes
    m2 = (w0 if leap == "eq10" else w1) + D[2]
    w2 = ((w1 + D[1]) + m2) / 2
    assert torch.allclose(s2.tensors["weights"], w2, atol=1e-6)
    # round C: straggler 3 (t0 = 0, t1 = 1, tau = 2)
    st = s_tilde(w1 - w0, D[3])
    m3 = (w0 if leap == "eq10" else w2) + st * D[3] * D[3] * (w2 - w1) + D[3]
    w3 = (m3 + (w2 + D[4])) / 2
    assert torch.allclose(s3.tensors["weights"], w3, atol=1e-5)
    # LGA sends everyone the global model
    assert torch.equal(alg.payload_for(s3, 3)["weights"], s3.tensors["weights"])
    assert LGA.payload_is_shared and not PLGA.payload_is_shared


@pytest.mark.parametrize("stagewise", [True, False])
def test_plga_personalized_models(stagewise: bool) -> None:
    alg = PLGA(PLGAParams(leap="eq11", stagewise=stagewise), FACTORY)
    s0, s1, s2, s3 = three_rounds(alg)
    w0, w1, w2, w3 = (s.tensors["weights"] for s in (s0, s1, s2, s3))
    groups = [HIDDEN, HEAD] if stagewise else [slice(0, 12)]

    def personal(w_t0: torch.Tensor, w_t1: torch.Tensor, d: torch.Tensor, w_k: torch.Tensor,
                 w_tau: torch.Tensor) -> torch.Tensor:
        """eq. (12)/(14) with w^{tau}, the global model of the round before aggregation."""
        out = torch.empty(12)
        for g in groups:
            s = s_tilde(w_t1[g] - w_t0[g], d[g])
            out[g] = w_t0[g] + (1 - s) * (w_k[g] - w_t0[g]) + s * (w_tau[g] - w_t0[g])
        return out

    st = s_tilde(w1 - w0, D[3])  # the leap uses the whole-model weight
    m3 = w2 + st * D[3] * D[3] * (w2 - w1) + D[3]
    expected3 = personal(w0, w1, D[3], m3, w2)  # round C: tau = 2, w^{tau} = w2 (not w3)
    assert not torch.allclose(expected3, personal(w0, w1, D[3], m3, w3), atol=1e-3)
    expected4 = personal(w2, w3, D[4], w2 + D[4], w2)  # punctual: t1 is the new model, w^{tau} = w^{t0}
    assert torch.allclose(alg.payload_for(s3, 3)["personal"], expected3, atol=1e-5)
    assert torch.allclose(alg.payload_for(s3, 4)["personal"], expected4, atol=1e-5)
    expected2 = personal(w0, w1, D[2], w1 + D[2], w1)  # round B: tau = 1
    assert torch.allclose(alg.payload_for(s3, 2)["personal"], expected2, atol=1e-5)
    expected0 = personal(w0, w1, D[0], w0 + D[0], w0)  # round A, punctual: w0 + (1 - S~) d
    assert torch.allclose(alg.payload_for(s1, 0)["personal"], expected0, atol=1e-5)
    # a client never aggregated gets the global model
    assert torch.equal(alg.payload_for(s3, 7)["weights"], w3)
    # Alg. 2: every client trains from the global model w^t; the personalized one is for evaluation
    assert torch.equal(alg.payload_for(s3, 3)["weights"], w3)
    personal_start = PLGA(PLGAParams(leap="eq11", stagewise=stagewise, train_from="personal"), FACTORY)
    assert torch.allclose(personal_start.payload_for(s3, 3)["weights"], expected3, atol=1e-5)
    # the stage-wise weights really differ per stage here
    if stagewise:
        assert s_tilde((w1 - w0)[HIDDEN], D[3][HIDDEN]) != pytest.approx(s_tilde((w1 - w0)[HEAD], D[3][HEAD]))


def test_too_stale_arrivals_are_ignored_and_history_is_pruned() -> None:
    alg = LGA(PLGAParams(max_staleness=1), FACTORY)
    s0 = alg.init_server(GEN)
    s1, _ = alg.receive(s0, [arr(0, 0, 0)], GEN)
    s2, _ = alg.receive(s1, [arr(1, 1, 1)], GEN)
    assert sorted(k for k in s2.tensors if k.startswith("hist")) == ["hist1", "hist2"]
    s3, changed = alg.receive(s2, [arr(3, 0, 2)], GEN)
    assert not changed and s3.version == 2 and s3.extra["ignored_too_stale"] == 1


def test_client_uploads_its_update_from_what_it_received() -> None:
    alg = PLGA(PLGAParams(lr=0.1, batch_size=4, local_steps=2), ModelFactory("logistic", (2,), 2))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.5]])
    data = ClientData(0, x, torch.tensor([0, 1, 1, 0]), x[:0], torch.tensor([], dtype=torch.long))
    start = torch.zeros(6)
    result = alg.client_update({"weights": start}, None, data, torch.Generator().manual_seed(1))
    # two full-batch steps from zero: the first gradient is the mean of (p - y) x with p = 1/2
    assert result.upload["delta"].shape == (6,) and float(result.upload["delta"].norm()) > 0
    r = 0.5 - torch.nn.functional.one_hot(data.y_train, 2)
    g1 = torch.cat([(r.T @ x / 4).reshape(-1), r.mean(0)])
    w1 = start - 0.1 * g1
    logits = x @ w1[:4].view(2, 2).T + w1[4:]
    r2 = torch.softmax(logits, 1) - torch.nn.functional.one_hot(data.y_train, 2)
    g2 = torch.cat([(r2.T @ x / 4).reshape(-1), r2.mean(0)])
    assert torch.allclose(result.upload["delta"], -0.1 * g1 - 0.1 * g2, atol=1e-6)


def test_lga_without_the_taylor_term() -> None:
    """``taylor: false``: a straggler's model is w^tau + d (eq11) or w^t0 + d (eq10) exactly;
    with the term, w^tau + S~ d*d*(w^tau - w^t1) + d. Hand numbers: w^t0 = (0, 0),
    w^t1 = (1, 0), w^tau = (3, 2), d = (2, 1): cos((1, 0), (2, 1)) = 2/sqrt(5) = 0.894427,
    S~ = e^0.894427 / (e + e^0.894427) = 0.473631; Taylor term S~ (4, 1) * (2, 2) = (3.789050,
    0.947263)."""
    w_t0, w_t1, w_tau, d = (torch.tensor(v) for v in ([0.0, 0.0], [1.0, 0.0], [3.0, 2.0], [2.0, 1.0]))
    with_term = LGA(PLGAParams(leap="eq11"), FACTORY).leap(w_t0, w_t1, w_tau, d)
    assert torch.allclose(with_term, torch.tensor([5.0 + 3.789050, 3.0 + 0.947263]), atol=1e-5)
    assert torch.equal(LGA(PLGAParams(leap="eq11", taylor=False), FACTORY).leap(w_t0, w_t1, w_tau, d),
                       torch.tensor([5.0, 3.0]))
    assert torch.equal(LGA(PLGAParams(leap="eq10", taylor=False), FACTORY).leap(w_t0, w_t1, w_tau, d),
                       torch.tensor([2.0, 1.0]))
