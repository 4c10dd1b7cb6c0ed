"""FedStyle's Table 1 baselines FedProx, FedPer, FedRep, APFL and Ditto with the unlabeled
objectives (SimCLR, SimSiam): the same classes with ``objective`` set, the uploads' parts and
shapes, a label-free loss, the client representation, and a short end-to-end run that writes
the linear evaluation."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.apfl import APFL, APFLParams, _apfl_loss, apfl_objective
from fedclock.algorithms.base import ClientData
from fedclock.algorithms.ditto import Ditto, DittoParams
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedper import FedPer, FedPerParams
from fedclock.algorithms.fedprox import FedProx, FedProxParams
from fedclock.algorithms.fedrep import FedRep, FedRepParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.ssl import SSLModelFactory
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

FACTORY = ModelFactory("conv_gn", (1, 8, 8), 10)
OBJECTIVES = ["simclr", "simsiam"]
BASELINES: dict[str, tuple[type, type]] = {
    "fedprox": (FedProx, FedProxParams), "fedper": (FedPer, FedPerParams), "fedrep": (FedRep, FedRepParams),
    "apfl": (APFL, APFLParams), "ditto": (Ditto, DittoParams)}
EXTRA: dict[str, dict[str, Any]] = {"fedprox": {"mu": 0.1}, "fedper": {}, "fedrep": {"head_epochs": 0.5},
                                    "apfl": {"alpha": 0.5}, "ditto": {"lam": 0.1}}


def _data(shuffled: bool = False) -> ClientData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    if shuffled:
        y = y[torch.randperm(16, generator=torch.Generator().manual_seed(9))]
    return ClientData(0, x, y, x[:6], y[:6])


def _build(name: str, objective: str) -> Any:
    cls, params = BASELINES[name]
    return cls(params(objective=objective, lr=0.05, batch_size=8, local_steps=2, projector_hidden=32,
                      projector_out=16, predictor_hidden=8, **EXTRA[name]), FACTORY)


def _uploads_and_state(alg: Any, seed: int, shuffled: bool) -> tuple[dict[str, torch.Tensor], Any, dict]:
    state = alg.init_server(torch.Generator().manual_seed(0))
    r = alg.client_update(alg.payload_for(state, 0), None, _data(shuffled), torch.Generator().manual_seed(seed))
    return r.upload, r.state, r.metrics


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baseline_client_update_is_self_supervised(name: str, objective: str) -> None:
    alg = _build(name, objective)
    f = alg.model_factory
    assert type(alg).supported_objectives() == frozenset({"supervised", "simclr", "simsiam"})
    assert isinstance(f, SSLModelFactory) and (f.predictor_hidden is not None) == (objective == "simsiam")
    assert f.body == FACTORY.body  # the encoder is the supervised model's body
    upload, state, metrics = _uploads_and_state(alg, 3, shuffled=False)
    # the expected parts and shapes
    if name in ("fedper", "fedrep"):
        assert set(upload) == {"body_delta"} and upload["body_delta"].shape == (f.body.stop - f.body.start,)
        assert set(state) == {"head", "local_body"} and state["head"].shape == (f.num_params - f.body.stop,)
    else:
        assert set(upload) == {"delta"} and upload["delta"].shape == (f.num_params,)
    if name == "ditto":
        assert set(state) == {"personal"} and state["personal"].shape == (f.num_params,)
    if name == "apfl":
        assert set(state) == {"personal", "alpha"} and state["personal"].shape == (f.num_params,)
        assert state["alpha"].shape == (1,) and 0.0 <= float(state["alpha"][0]) <= 1.0
    moved = next(iter(upload.values()))
    assert float(moved.abs().sum()) > 0 and math.isfinite(metrics["train_loss"])
    # the loss ignores the labels: shuffled labels give the very same result
    upload2, state2, _ = _uploads_and_state(alg, 3, shuffled=True)
    for k in upload:
        assert torch.equal(upload[k], upload2[k])
    for k in state or {}:
        assert torch.equal(state[k], state2[k])
    sup = BASELINES[name][0](BASELINES[name][1](lr=0.05, batch_size=8, local_steps=2, **EXTRA[name]), FACTORY)
    if objective == "simclr":  # a supervised twin moves differently with shuffled labels (the check can fail)
        s1, _, _ = _uploads_and_state(sup, 3, shuffled=False)
        s2, _, _ = _uploads_and_state(sup, 3, shuffled=True)
        assert not torch.equal(next(iter(s1.values())), next(iter(s2.values())))
    # evaluation: the k-NN monitor on the client's representation
    ev = alg.evaluate_client(alg.payload_for(alg.init_server(torch.Generator().manual_seed(0)), 0), state,
                             _data(), 64)
    assert ev.count == 6 and ev.loss_sum == 0.0


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedper", "fedrep"])
def test_personal_representation_is_the_local_model(name: str) -> None:
    """FedStyle's protocol "fix[es] local model(s)": after a task the client keeps its
    locally trained encoder, and its personalization features come from it (not from the
    global encoder it receives later)."""
    alg = FedAvg(FedAvgParams(objective="simclr", lr=0.05, batch_size=8, local_steps=2, projector_hidden=32,
                              projector_out=16), FACTORY) if name == "fedavg" else _build(name, "simclr")
    f = alg.model_factory
    payload = alg.payload_for(alg.init_server(torch.Generator().manual_seed(0)), 0)
    r = alg.client_update(payload, None, _data(), torch.Generator().manual_seed(1))
    moved = r.upload["delta"][f.body] if "delta" in r.upload else r.upload["body_delta"]
    local_body = payload["weights"][f.body] + moved
    assert torch.allclose(r.state["local_body"], local_body, atol=1e-6)
    later = alg.payload_for(alg.init_server(torch.Generator().manual_seed(5)), 0)  # a later global model
    expected = f.build()
    f.load_flat(expected, torch.cat([local_body, later["weights"][f.body.stop:]]))
    x = _data().x_test
    with torch.no_grad():
        frozen, adapter = alg.personal_probe(later, r.state)
        assert adapter is None and torch.allclose(frozen(x), expected.body(x), atol=1e-5)
    assert not alg.stateless_clients  # the runtime must not skip or refuse its states
    sup = FedAvg(FedAvgParams(lr=0.05, batch_size=8, local_steps=2), FACTORY)  # supervised: nothing kept
    assert sup.stateless_clients
    assert sup.client_update(sup.payload_for(sup.init_server(torch.Generator().manual_seed(0)), 0), None, _data(),
                             torch.Generator().manual_seed(1)).state is None


@pytest.mark.parametrize("name", ["ditto", "apfl"])
def test_personal_representation_is_the_personal_model(name: str) -> None:
    alg = _build(name, "simclr")
    state = alg.init_server(torch.Generator().manual_seed(0))
    payload = alg.payload_for(state, 0)
    r = alg.client_update(payload, None, _data(), torch.Generator().manual_seed(1))
    x = _data().x_test
    personal = r.state["personal"]
    if name == "apfl":
        a = float(r.state["alpha"][0])
        personal = a * personal + (1 - a) * payload["weights"]
    expected = alg.model_factory.build()
    alg.model_factory.load_flat(expected, personal)
    with torch.no_grad():
        got = alg.representation(payload, r.state)(x)
        assert torch.allclose(got, expected.body(x), atol=1e-6)
        assert not torch.allclose(got, alg.global_representation(state)(x), atol=1e-4)


def test_apfl_objective_equals_the_supervised_form_with_cross_entropy() -> None:
    """:func:`apfl_objective` with cross-entropy is :func:`_apfl_loss`, gradients included."""
    from fedclock.algorithms.apfl import _Pair
    from fedclock.algorithms.training import cross_entropy_loss

    f = ModelFactory("mlp", (4,), 3, hidden=(5,))
    pair = _Pair(f)
    torch.manual_seed(0)
    with torch.no_grad():
        pair.alpha.fill_(0.3)
        for p in pair.v.parameters():
            p.add_(torch.randn_like(p))
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    a = _apfl_loss(pair, x, y)
    ga = torch.autograd.grad(a, list(pair.parameters()))
    b = apfl_objective(cross_entropy_loss, cross_entropy_loss)(pair, x, y)
    gb = torch.autograd.grad(b, list(pair.parameters()))
    assert torch.allclose(a, b) and all(torch.allclose(u, v) for u, v in zip(ga, gb))


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baseline_quick_run_writes_linear_evaluation(name: str, objective: str, tmp_path: Path) -> None:
    sc = scenario(dataset={"name": "digit_styles", "image_size": 8,
                           "domains": {"names": ["original", "inverted"], "samples_per_domain": 80}},
                  model={"name": "conv_gn"}, population={"num_clients": 2},
                  algorithm={"name": name, "objective": objective, "lr": 0.1, "batch_size": 32,
                             "local_steps": 1, "projector_hidden": 32, "projector_out": 16,
                             "predictor_hidden": 8, **EXTRA[name]},
                  stop={"rounds": 1}, evaluation={"every": 1, "linear": {"epochs": 2, "lr": 0.05}},
                  runtime={"backend": "inline"}, output={"progress": False})
    summary = run_scenario(sc, Runtime("inline"), tmp_path)
    rows = pd.read_parquet(tmp_path / "linear_eval.parquet")
    for kind in ("generalization", "personalization"):
        part = rows[(rows.kind == kind) & (rows.client == -1)]
        assert sorted(part.domain) == ["average", "inverted", "original"]
    assert sorted(rows[rows.client >= 0].client) == [0, 1]
    assert 0.0 <= summary.linear_generalization <= 1.0 and 0.0 <= summary.linear_personalization <= 1.0
