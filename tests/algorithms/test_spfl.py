"""SPFL / SPFL-w / SPFL (1-step): SNGS per stage, the refresh schedule and the server rules
against hand-computed numbers on a 12-parameter MLP (stages: hidden = 6 values, head = 6)."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.base import Arrival, ClientData, ServerState
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.similarity import cosine, leap_weight, row_softmax, stage_cosines
from fedclock.algorithms.spfl import SPFL, SPFLW, SPFLOneStep, SPFLParams, SPFLWOneStep

FACTORY = ModelFactory("mlp", (2,), 2, hidden=(2,))
GEN = torch.Generator().manual_seed(0)

# refresh updates: hidden stage = first 6 values, head stage = last 6
R0 = [1, 0, 0, 0, 0, 0] + [1, 0, 0, 0, 0, 0]
R1 = [1, 0, 0, 0, 0, 0] + [0, 1, 0, 0, 0, 0]
R2 = [0, 2, 0, 0, 0, 0] + [-3, 0, 0, 0, 0, 0]
# hand-computed cosines per stage
SIM = {"hidden": [[1, 1, 0], [1, 1, 0], [0, 0, 1]], "head": [[1, 0, -1], [0, 1, 0], [-1, 0, 1]]}


def arrival(client: int, upload: dict[str, torch.Tensor], n: int) -> Arrival:
    return Arrival(client=client, upload=upload, num_samples=n, version_dispatched=0, staleness=0)


def test_factory_stages_split_the_vector_in_two() -> None:
    stages = SPFL(SPFLParams(), FACTORY).stages
    assert [s for s in stages] == ["hidden", "head"]
    assert stages["hidden"].tolist() == list(range(6)) and stages["head"].tolist() == list(range(6, 12))


def test_stage_cosines_and_softmax_by_hand() -> None:
    g = torch.tensor([R0, R1, R2], dtype=torch.float32)
    stages = {"hidden": torch.arange(6), "head": torch.arange(6, 12)}
    cos = stage_cosines(g, stages)
    for name in stages:
        assert torch.allclose(cos[name], torch.tensor(SIM[name], dtype=torch.float32), atol=1e-6)
    soft = row_softmax(torch.tensor([[1.0, 0.0, -1.0]]))
    e = math.e
    assert soft[0].tolist() == pytest.approx([e / (e + 1 + 1 / e), 1 / (e + 1 + 1 / e), (1 / e) / (e + 1 + 1 / e)])
    assert cosine(torch.zeros(3), torch.ones(3)) == 0.0
    assert leap_weight(1.0) == pytest.approx(0.5) and leap_weight(0.0) == pytest.approx(1 / (e + 1))


def refreshed(alg: SPFL, state: ServerState | None = None) -> tuple[ServerState, ServerState]:
    """Run one similarity round with the refresh updates R0, R1, R2 of clients 0, 1, 2."""
    state = alg.init_server(GEN) if state is None else state
    payload = alg.payload_for(state, 0)
    assert "refresh_from" in payload  # a similarity round
    assert torch.equal(payload["refresh_from"], alg.mean_model(state))
    arrivals = [arrival(c, {"refresh": torch.tensor(r, dtype=torch.float32)}, 1) for c, r in enumerate([R0, R1, R2])]
    state2, changed = alg.receive(state, arrivals, GEN)
    assert not changed and state2.version == state.version and "refresh_from" not in alg.payload_for(state2, 0)
    return state, state2


def softmax_row(values: list[float]) -> list[float]:
    exps = [math.exp(v) for v in values]
    return [x / sum(exps) for x in exps]


def by_hand(models: dict[int, torch.Tensor], g: dict[int, torch.Tensor], scale: dict[int, float]) -> dict:
    """eq. (7) per stage: w_i - sum_j scale_j S~(i, j) g_j, S~ the row softmax of SIM."""
    out = {}
    for i, w in models.items():
        expected = w.clone()
        for name, idx in (("hidden", range(6)), ("head", range(6, 12))):
            weights = softmax_row(SIM[name][i])
            for k in idx:
                expected[k] = w[k] - sum(scale[j] * weights[j] * float(g[j][k]) for j in range(3))
        out[i] = expected
    return out


G = {0: torch.arange(12.0), 1: torch.ones(12), 2: -torch.arange(12.0) / 2}
N = {0: 1, 1: 1, 2: 2}


def test_spfl_code_step_several_rounds_and_restart_from_the_mean_at_each_refresh() -> None:
    """Authors' code reading: w_i <- w_i - sum_j S~(i, j) g_j (no alpha, no |D_j|/|D|);
    every gamma updates the models restart from their mean (Algorithm 1's w_gi = 1/N sum w_i)."""
    alg = SPFL(SPFLParams(alpha=0.5, gamma=2), FACTORY)  # alpha is not used by the code step
    state0, state = refreshed(alg)
    w0 = state0.tensors["init"]
    for c in range(3):  # every client of the refresh now holds the mean (here: the initial model)
        assert torch.equal(state.tensors[f"model{c}"], w0)
    models = {c: w0 for c in range(3)}
    for step in range(2):
        state, changed = alg.receive(state, [arrival(c, {"update": G[c] * (step + 1)}, N[c]) for c in range(3)],
                                            GEN)
        assert changed and state.version == step + 1
        models = by_hand(models, {c: G[c] * (step + 1) for c in G}, {0: 1.0, 1: 1.0, 2: 1.0})
        for i in range(3):
            assert torch.allclose(alg.payload_for(state, i)["weights"], models[i], atol=1e-5)
    mean = torch.stack([models[i] for i in range(3)]).mean(0)
    assert torch.allclose(alg.mean_model(state), mean, atol=1e-5)
    # gamma = 2 updates: the next round refreshes from w_bar, and the models restart from it
    before, state = refreshed(alg, state)
    assert torch.allclose(alg.payload_for(before, 1)["refresh_from"], mean, atol=1e-5)
    for i in range(3):
        assert torch.allclose(state.tensors[f"model{i}"], mean, atol=1e-5)
    rows = alg.diagnostics(state)
    assert len(rows) == 2 * 2 * 3  # two refreshes x two stages x three clients
    hidden = [r for r in rows if r["stage"] == "hidden" and r["updates"] == 2]
    # mean cosine with the two other clients: client 0 -> (1 + 0) / 2, client 2 -> (0 + 0) / 2
    assert [r["mean_similarity"] for r in hidden] == pytest.approx([0.5, 0.5, 0.0])
    head = [r for r in rows if r["stage"] == "head" and r["updates"] == 0]
    assert [r["mean_similarity"] for r in head] == pytest.approx([-0.5, 0.0, -0.5])


def test_spfl_eq7_step_is_literal_and_inert_at_the_papers_alpha() -> None:
    alpha = 0.5
    alg = SPFL(SPFLParams(alpha=alpha, gamma=5, server_step="eq7"), FACTORY)
    state0, state = refreshed(alg)
    w0 = state0.tensors["init"]
    state, _ = alg.server_receive(state, [arrival(c, {"update": G[c]}, N[c]) for c in range(3)], GEN)
    expected = by_hand({c: w0 for c in range(3)}, G, {j: alpha * N[j] / 4 for j in range(3)})
    for i in range(3):
        assert torch.allclose(state.tensors[f"model{i}"], expected[i], atol=1e-6)
    # at the paper's alpha = 0.01 the step is ~1/300 of the code reading's
    code = SPFL(SPFLParams(gamma=5), FACTORY)
    _, sc = refreshed(code)
    sc, _ = code.server_receive(sc, [arrival(c, {"update": G[c]}, N[c]) for c in range(3)], GEN)
    lit = SPFL(SPFLParams(gamma=5, server_step="eq7"), FACTORY)
    _, sl = refreshed(lit)
    sl, _ = lit.server_receive(sl, [arrival(c, {"update": G[c]}, N[c]) for c in range(3)], GEN)
    moved_code = float((sc.tensors["model0"] - sc.tensors["init"]).norm())
    moved_lit = float((sl.tensors["model0"] - sl.tensors["init"]).norm())
    assert moved_lit < moved_code / 100


@pytest.mark.parametrize("cls", [SPFLW, SPFLWOneStep])
def test_spfl_w_fuses_weights_with_row_normalized_similarity(cls: type) -> None:
    alg = cls(SPFLParams(gamma=5), FACTORY)
    _, state = refreshed(alg)
    w = {c: torch.randn(12, generator=torch.Generator().manual_seed(c)) for c in range(3)}
    for _ in range(2):  # two rounds: the second fuses the same uploads again (fusion is idempotent on them)
        state, _ = alg.receive(state, [arrival(c, {"weights": w[c]}, 10 * (c + 1)) for c in range(3)], GEN)
        for i in range(3):
            expected = torch.zeros(12)
            for name, idx in (("hidden", range(6)), ("head", range(6, 12))):
                weights = softmax_row(SIM[name][i])
                for k in idx:
                    expected[k] = sum(weights[j] * float(w[j][k]) for j in range(3))
            assert torch.allclose(state.tensors[f"model{i}"], expected, atol=1e-6)


def logistic_grad(w: torch.Tensor, x: torch.Tensor, y: int) -> torch.Tensor:
    """Cross-entropy gradient of a 2-class logistic model (W 2x2 row-major, then b) on one sample."""
    logits = torch.tensor([w[0] * x[0] + w[1] * x[1] + w[4], w[2] * x[0] + w[3] * x[1] + w[5]])
    r = torch.softmax(logits, 0) - torch.nn.functional.one_hot(torch.tensor(y), 2).float()
    return torch.tensor([r[0] * x[0], r[0] * x[1], r[1] * x[0], r[1] * x[1], r[0], r[1]])


@pytest.mark.parametrize("cls", [SPFL, SPFLOneStep, SPFLW, SPFLWOneStep])
def test_client_update_twice_local_update_recomputes_the_gradient(cls: type) -> None:
    """Twice local update: per batch, w1 = w - beta g(w), w2 = w1 - beta g(w1) (gradient
    recomputed at w1), for two batches; the 1-step variants take w - beta g(w) per batch."""
    factory = ModelFactory("logistic", (2,), 2)
    beta = 0.5
    alg = cls(SPFLParams(lr=beta, batch_size=1, local_steps=2), factory)
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    y = torch.tensor([1, 0])
    data = ClientData(0, x, y, x[:0], torch.tensor([], dtype=torch.long))
    w = torch.tensor([0.1, -0.2, 0.3, 0.0, 0.05, -0.05])
    order = torch.randperm(2, generator=torch.Generator().manual_seed(0)).tolist()  # the batches' order
    expected = w.clone()
    for i in order:
        expected = expected - beta * logistic_grad(expected, x[i], int(y[i]))
        if alg.twice:
            expected = expected - beta * logistic_grad(expected, x[i], int(y[i]))
    result = alg.client_update({"weights": w}, None, data, torch.Generator().manual_seed(0))
    assert result.metrics["steps"] == 2
    if alg.fuse_weights:
        assert torch.allclose(result.upload["weights"], expected, atol=1e-6)
    else:
        assert torch.allclose(result.upload["update"], w - expected, atol=1e-6)
    # not one step of 2 beta (the reading this replaces)
    one_big = w.clone()
    for i in order:
        one_big = one_big - 2 * beta * logistic_grad(one_big, x[i], int(y[i]))
    assert alg.twice is False or not torch.allclose(expected, one_big, atol=1e-4)
    refresh = alg.client_update({"weights": w + 1, "refresh_from": w}, None, data, torch.Generator().manual_seed(0))
    assert torch.allclose(refresh.upload["refresh"], w - expected, atol=1e-6)


def test_spfl_rejects_momentum() -> None:
    with pytest.raises(ValueError, match="momentum must be 0"):
        SPFLParams(momentum=0.9)


def test_perfedavg_two_step_is_the_authors_two_plain_steps() -> None:
    """Per-FedAvg ``two_step`` (the PLGA authors' baseline): per batch w1 = w - alpha g(w),
    w2 = w1 - beta g(w1) on the same sample, for two batches; upload delta = w_end - w."""
    from fedclock.algorithms.perfedavg import PerFedAvg, PerFedAvgParams

    factory = ModelFactory("logistic", (2,), 2)
    alpha, beta = 0.3, 0.5
    alg = PerFedAvg(PerFedAvgParams(lr=beta, inner_lr=alpha, batch_size=1, local_steps=2, variant="two_step"),
                    factory)
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    y = torch.tensor([1, 0])
    data = ClientData(0, x, y, x[:0], torch.tensor([], dtype=torch.long))
    w = torch.tensor([0.1, -0.2, 0.3, 0.0, 0.05, -0.05])
    order = torch.randperm(2, generator=torch.Generator().manual_seed(0)).tolist()
    expected = w.clone()
    for i in order:
        expected = expected - alpha * logistic_grad(expected, x[i], int(y[i]))
        expected = expected - beta * logistic_grad(expected, x[i], int(y[i]))
    result = alg.client_update({"weights": w}, None, data, torch.Generator().manual_seed(0))
    assert torch.allclose(result.upload["delta"], expected - w, atol=1e-6)


def test_spfl_uniform_weights_control_moves_every_model_by_the_mean_update() -> None:
    """``similarity_weights: uniform`` (SNGS off): w_i <- w_i - 1/3 (g_0 + g_1 + g_2) for every
    client i, e.g. element 2: (2 + 1 - 1) / 3 = 2/3 subtracted from every model."""
    alg = SPFL(SPFLParams(gamma=2, similarity_weights="uniform"), FACTORY)
    state0, state = refreshed(alg)
    w0 = state0.tensors["init"]
    state, _ = alg.receive(state, [arrival(c, {"update": G[c]}, N[c]) for c in range(3)], GEN)
    mean_update = (G[0] + G[1] + G[2]) / 3
    assert float(mean_update[2]) == pytest.approx(2 / 3)
    for i in range(3):
        assert torch.allclose(alg.payload_for(state, i)["weights"], w0 - mean_update, atol=1e-6)
