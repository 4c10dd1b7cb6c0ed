"""FedPAC: the alignment term, the classifier-collaboration QP, the server's aggregation of
bodies / centroids / heads, the client's statistics, and an end-to-end run on digits."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pydantic
import pytest
import torch

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.base import Arrival, ClientData
from fedclock.algorithms.fedpac import FedPAC, FedPACParams, alignment_loss, combination_matrix, \
    combination_weights
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.registry import get_algorithm
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

TINY = ModelFactory("mlp", (2,), 2, hidden=(2,))  # body Linear(2, 2) + ReLU (6 values), head Linear(2, 2) (6)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_alignment_loss_by_hand() -> None:
    f = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = torch.tensor([0, 1])
    c = torch.tensor([[0.0, 0.0], [3.0, 2.0]])
    # sample 0: (1 + 4) / 2 = 2.5; sample 1: (0 + 4) / 2 = 2; batch mean 2.25
    assert float(alignment_loss(f, y, c, torch.tensor([1.0, 1.0]))) == pytest.approx(2.25)
    # class 1 has no centroid: it counts zero, the mean still divides by the batch
    assert float(alignment_loss(f, y, c, torch.tensor([1.0, 0.0]))) == pytest.approx(1.25)


H = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # two clients, one class, d = 2
V = torch.tensor([0.5, 1.0])


def test_combination_qp_by_hand() -> None:
    # client 0: u_0 = 0, u_1 = H_0 - H_1 = (1, -1): G = [[0, 0], [0, 2]]; Q = [[0.5, 0], [0, 3]]
    torch.testing.assert_close(combination_matrix(H, V, 0), torch.tensor([[0.5, 0.0], [0.0, 3.0]],
                                                                         dtype=torch.float64))
    # argmin 0.5 a^2 + 3 (1 - a)^2 -> a = 3 / 3.5
    torch.testing.assert_close(combination_weights(H, V, 0, 1e-3), torch.tensor([6 / 7, 1 / 7], dtype=torch.float64))
    # client 1: Q = [[0.5 + 2, 0], [0, 1]] -> a = (1, 2.5) / 3.5
    torch.testing.assert_close(combination_weights(H, V, 1, 1e-3), torch.tensor([2 / 7, 5 / 7], dtype=torch.float64))
    # a floor above 1/7 zeroes the small weight and renormalizes
    torch.testing.assert_close(combination_weights(H, V, 0, 0.2), torch.tensor([1.0, 0.0], dtype=torch.float64))


def upload(body_delta: list[float], head: list[float], means: list[list[float]], counts: list[float],
           h: torch.Tensor, v: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"body_delta": torch.tensor(body_delta), "head": torch.tensor(head), "means": torch.tensor(means),
            "counts": torch.tensor(counts), "h_stats": h, "v_stat": v.reshape(1)}


def test_server_aggregates_bodies_centroids_and_heads() -> None:
    alg = FedPAC(FedPACParams(), TINY)
    state = alg.init_server(gen())
    w = state.tensors["weights"]
    assert alg.dim == 2 and state.tensors["centroids"].shape == (2, 2)
    # H as 2 classes x d: class 0 row of the hand example above, class 1 zero
    h0 = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    h1 = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    a0 = Arrival(3, upload([1.0] * 6, [1.0] * 6, [[1.0, 2.0], [0.0, 0.0]], [3.0, 0.0], h0, V[0]), 30, 0, 0)
    a1 = Arrival(7, upload([4.0] * 6, [8.0] * 6, [[5.0, 6.0], [7.0, 9.0]], [1.0, 2.0], h1, V[1]), 10, 0, 0)
    new, changed = alg.receive(state, [a0, a1], gen())
    assert changed and new.version == 1
    nw = new.tensors["weights"]
    # body: w + 3/4 * 1 + 1/4 * 4 = w + 1.75; global head: 3/4 * 1 + 1/4 * 8 = 2.75
    torch.testing.assert_close(nw[TINY.body], w[TINY.body] + 1.75)
    torch.testing.assert_close(nw[TINY.head], torch.full((6,), 2.75))
    # centroids: class 0 = (3 * (1, 2) + 1 * (5, 6)) / 4 = (2, 3); class 1 = (7, 9) from client 7 only
    torch.testing.assert_close(new.tensors["centroids"], torch.tensor([[2.0, 3.0], [7.0, 9.0]]))
    torch.testing.assert_close(new.tensors["centroid_counts"], torch.tensor([4.0, 2.0]))
    # heads: client 3 gets 6/7 h_3 + 1/7 h_7, client 7 gets 2/7 h_3 + 5/7 h_7
    p3, p7, p5 = alg.payload_for(new, 3), alg.payload_for(new, 7), alg.payload_for(new, 5)
    torch.testing.assert_close(p3["head"], torch.full((6,), 6 / 7 * 1 + 1 / 7 * 8))
    torch.testing.assert_close(p7["head"], torch.full((6,), 2 / 7 * 1 + 5 / 7 * 8))
    assert float(p3["personal"][0]) == 1.0 and float(p5["personal"][0]) == 0.0
    torch.testing.assert_close(p5["head"], nw[TINY.head])
    torch.testing.assert_close(p5["body"], nw[TINY.body])
    assert torch.equal(state.tensors["centroids"], torch.zeros(2, 2)), "old state must not change"
    # a later cohort without class 1 keeps its centroid
    a2 = Arrival(3, upload([0.0] * 6, [1.0] * 6, [[4.0, 4.0], [0.0, 0.0]], [2.0, 0.0], h0, V[0]), 5, 1, 0)
    newer, _ = alg.receive(new, [a2], gen())
    torch.testing.assert_close(newer.tensors["centroids"], torch.tensor([[4.0, 4.0], [7.0, 9.0]]))
    torch.testing.assert_close(newer.tensors["head/3"], torch.ones(6))  # a cohort of one keeps its own head
    # without collaboration no client gets a server-built head
    alone = FedPAC(FedPACParams(collaborate_heads=False), TINY)
    solo, _ = alone.receive(state, [a0, a1], gen())
    assert float(alone.payload_for(solo, 3)["personal"][0]) == 0.0


def tiny_data() -> ClientData:
    x = torch.tensor([[1.0, 2.0], [0.5, -1.0], [2.0, 1.0], [-1.0, 0.5], [1.5, 1.5]])
    y = torch.tensor([0, 0, 1, 1, 1])
    return ClientData(0, x, y, x, y)


def hand_features(flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    w, b = flat[0:4].view(2, 2), flat[4:6]
    return torch.relu(x @ w.T + b)


def test_client_statistics_and_alignment_mask() -> None:
    params = FedPACParams(lr=0.1, batch_size=2, local_steps=3, head_epochs=1.0)
    alg = FedPAC(params, TINY)
    state = alg.init_server(gen(1))
    payload = alg.payload_for(state, 0)
    data = tiny_data()
    res = alg.client_update(payload, None, data, gen(5))
    up = res.upload
    # statistics with the received body: p = (2/5, 3/5); H[k] = p_k mu_k = (sum of class-k features) / n
    f = hand_features(state.tensors["weights"], data.x_train).double()
    h = torch.stack([f[:2].sum(0), f[2:].sum(0)]) / 5
    v = ((f * f).sum(1).mean() - (h * h).sum()) / 5
    torch.testing.assert_close(up["h_stats"], h.float())
    torch.testing.assert_close(up["v_stat"], v.float().reshape(1))
    # local centroids with the trained body
    body = state.tensors["weights"][TINY.body] + up["body_delta"]
    f1 = hand_features(torch.cat([body, up["head"]]), data.x_train)
    torch.testing.assert_close(up["means"], torch.stack([f1[:2].mean(0), f1[2:].mean(0)]))
    torch.testing.assert_close(up["counts"], torch.tensor([2.0, 3.0]))
    assert torch.equal(res.state["head"], up["head"])
    assert res.metrics["steps"] == 3 + 3  # ceil(5 / 2) head steps, then 3 body steps
    # no centroids yet (round 0): lambda has no effect; with centroids it changes the body
    plain = FedPAC(params.model_copy(update={"lam": 0.0}), TINY).client_update(payload, None, data, gen(5))
    torch.testing.assert_close(plain.upload["body_delta"], up["body_delta"])
    known = dict(payload, centroids=torch.tensor([[5.0, -5.0], [-5.0, 5.0]]), centroid_counts=torch.ones(2))
    aligned = alg.client_update(known, None, data, gen(5))
    assert not torch.allclose(aligned.upload["body_delta"], up["body_delta"])
    torch.testing.assert_close(aligned.upload["h_stats"], up["h_stats"])  # statistics precede training


def test_start_head_priority_and_costs() -> None:
    alg = FedPAC(FedPACParams(batch_size=2, local_steps=3), TINY)
    own = {"head": torch.full((6,), 2.0)}
    shared = {"head": torch.zeros(6), "personal": torch.tensor([0.0])}
    built = {"head": torch.ones(6), "personal": torch.tensor([1.0])}
    assert torch.equal(alg.start_head(shared, None), torch.zeros(6))
    assert torch.equal(alg.start_head(shared, own), own["head"])
    assert torch.equal(alg.start_head(built, own), torch.ones(6))
    # body 6 + head 6 + centroids 2x2 + counts 2 + flag 1 floats down; up: 2 C x d blocks + C + V
    assert alg.download_bytes() == 4 * (6 + 6 + 4 + 2 + 1)
    assert alg.upload_bytes() == 4 * (6 + 6 + 8 + 2 + 1)
    assert FedPAC.payload_is_shared is False and get_algorithm("fedpac") is FedPAC
    with pytest.raises(pydantic.ValidationError):
        FedPACParams(lam=-1)


def test_fedpac_learns_pathological_digits(tmp_path: Path) -> None:
    s = scenario(dataset={"name": "digits", "partition": {"type": "pathological", "classes_per_client": 2}},
                 model={"name": "mlp", "hidden": [32]}, population={"num_clients": 8},
                 algorithm={"name": "fedpac", "lr": 0.05, "batch_size": 16, "local_epochs": 1},
                 stop={"rounds": 8}, evaluation={"every": 8}, runtime={"backend": "inline"})
    summary = run_scenario(s, Runtime("inline"), tmp_path)
    assert summary.personal_accuracy_mean >= 0.9  # chance on a 2-class client: 0.5
    events = pd.read_parquet(tmp_path / "events.parquet")
    assert len(events) == 64 and (events.status == "applied").all()
    alg = FedPAC(FedPACParams(), ModelFactory("mlp", (64,), 10, hidden=(32,)))
    assert (events.bytes_down == alg.download_bytes()).all() and (events.bytes_up == alg.upload_bytes()).all()
