"""The final linear evaluation (:mod:`fedclock.scenarios.linear_eval`): probes trained on cached
features give exactly the probes of :func:`~fedclock.algorithms.linear_eval.linear_probe`
(which extracts the features itself), the transfer rows are the generalization classifiers on
the other styles' test sets, and the style controls are paired with the own-style probe."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedclock.algorithms.fedstyle import FedStyle, FedStyleParams
from fedclock.algorithms.linear_eval import linear_probe
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.linear_eval import _GENERALIZATION, _KEY, _PERSONALIZATION, _donor, linear_evaluation
from fedclock.scenarios.schema import DatasetConfig, LinearEvalConfig
from fedclock.scheduling.rng import Stream, torch_rng

CFG = LinearEvalConfig(epochs=3, lr=0.05, batch_size=32)


@pytest.fixture(scope="module")
def trained():  # type: ignore[no-untyped-def]
    """Four clients (one per digit style, 8x8), a FedStyle model after one task each."""
    fed = build_federation(DatasetConfig(name="digit_styles", image_size=8, client_test_fraction=0,
                                         domains={"samples_per_domain": 60, "test_samples_per_domain": 30}), 4, 0)
    alg = FedStyle(FedStyleParams(batch_size=16, local_steps=2, style_epochs=0.5),
                   ModelFactory("mlp", (1, 8, 8), 10, hidden=(16,)))
    state = alg.init_server(torch.Generator().manual_seed(0))
    states = {c: alg.client_update(alg.payload_for(state, c), None, fed.client_data(c),
                                   torch.Generator().manual_seed(c)).state for c in range(4)}
    return fed, alg, state, states


def _pick(rows: list[dict], kind: str, domain: str | None = None, client: int = -1) -> float:
    [row] = [r for r in rows if r["kind"] == kind and r["client"] == client
             and (domain is None or r["domain"] == domain)]
    return float(row["accuracy"])


def test_cached_features_give_the_probes_of_linear_probe(trained) -> None:  # type: ignore[no-untyped-def]
    """The generalization and transfer figures of style 0 and the personalization of client 1
    equal the ones :func:`linear_probe` gives on the raw images with the same seed (the
    evaluation before features were cached per domain); the transfer average is the mean of
    the styles' rows."""
    fed, alg, state, states = trained
    rows = linear_evaluation(alg, state, states, fed, CFG, seed=3)
    args = dict(epochs=CFG.epochs, lr=CFG.lr, batch_size=CFG.batch_size)
    names = list(fed.domain_names)
    tr = torch.from_numpy(np.flatnonzero(fed.train_domain == 0))
    accs = []
    for j in range(len(names)):
        te = torch.from_numpy(np.flatnonzero(fed.test_domain == j))
        res = linear_probe(alg.global_representation(state), fed.x[tr], fed.y[tr], fed.x_test[te], fed.y_test[te],
                           10, None, torch_rng(3, Stream.INIT, _KEY, _GENERALIZATION, 0), **args)
        accs.append(res.accuracy)
    assert _pick(rows, "generalization", names[0]) == pytest.approx(accs[0], abs=1e-12)
    assert _pick(rows, "transfer", names[0]) == pytest.approx(np.mean(accs[1:]), abs=1e-12)
    assert _pick(rows, "transfer", "average") == pytest.approx(np.mean([_pick(rows, "transfer", n) for n in names]))
    data = fed.client_data(1)
    te = torch.from_numpy(np.flatnonzero(fed.test_domain == fed.client_domain[1]))
    frozen, adapter = alg.personal_probe(alg.payload_for(state, 1), states[1])
    res = linear_probe(frozen, data.x_train, data.y_train, fed.x_test[te], fed.y_test[te], 10, adapter,
                       torch_rng(3, Stream.INIT, _KEY, _PERSONALIZATION, 1), **args)
    assert _pick(rows, "personalization", client=1) == pytest.approx(res.accuracy, abs=1e-12)


def test_style_controls_are_paired_with_the_own_probe(trained) -> None:  # type: ignore[no-untyped-def]
    """With ``style_controls`` the own-style rows are unchanged and each control is the
    own-style probe with only the style replaced (same classifier seed): the probe of an
    algorithm whose ``probe_style`` is zero / swapped, or whose ``personal_features`` is
    content; swapped takes the next client's style encoder (client 2's for client 1)."""
    fed, alg, state, states = trained
    plain = linear_evaluation(alg, state, states, fed, CFG, seed=1)
    both = linear_evaluation(alg, state, states, fed, CFG.model_copy(update={"style_controls": True}), seed=1)
    assert [r for r in both if r["kind"] in ("generalization", "transfer", "personalization")] == plain
    data = fed.client_data(1)
    te = torch.from_numpy(np.flatnonzero(fed.test_domain == fed.client_domain[1]))
    for control, params in (("zero", {"probe_style": "zero"}), ("content", {"personal_features": "content"}),
                            ("swapped", {"probe_style": "swapped"})):
        other = FedStyle(alg.params.model_copy(update=params), alg.model_factory)
        frozen, adapter = other.personal_probe(alg.payload_for(state, 1), states[1], states[2])
        res = linear_probe(frozen, data.x_train, data.y_train, fed.x_test[te], fed.y_test[te], 10, adapter,
                           torch_rng(1, Stream.INIT, _KEY, _PERSONALIZATION, 1), epochs=CFG.epochs, lr=CFG.lr,
                           batch_size=CFG.batch_size)
        assert _pick(both, f"personalization_{control}", client=1) == pytest.approx(res.accuracy, abs=1e-12)
    controls = [r for r in both if r["kind"] == "personalization_zero" and r["client"] >= 0]
    assert _pick(both, "personalization_zero", "average") == pytest.approx(np.mean([r["accuracy"] for r in controls]))


def test_the_swap_donor_is_the_next_client_with_a_state() -> None:
    states = {0: {"a": torch.zeros(1)}, 1: None, 2: {"a": torch.ones(1)}, 3: None}
    assert _donor(0, [0, 1, 2, 3], states) is states[2]
    assert _donor(2, [0, 1, 2, 3], states) is states[0]  # wraps round
    assert _donor(1, [0, 1, 2, 3], states) is states[2]
    assert _donor(0, [0, 1], {0: None, 1: None}) is None


def test_probe_seeds_average_probes_with_their_own_seeds_and_fresh_adapters(trained) -> None:  # type: ignore[no-untyped-def]
    """``probe_seeds: 3``: style 0's generalization figure is the mean of three
    :func:`linear_probe` accuracies with the generators (seed, kind, style) and (seed, kind,
    style, 1), (..., 2); client 1's personalization is the mean of three probes, each starting
    from its own fresh copy of the client's adapter (G); the first repeat is the single probe."""
    fed, alg, state, states = trained
    cfg = CFG.model_copy(update={"probe_seeds": 3})
    rows = linear_evaluation(alg, state, states, fed, cfg, seed=3)
    single = linear_evaluation(alg, state, states, fed, CFG, seed=3)
    args = dict(epochs=CFG.epochs, lr=CFG.lr, batch_size=CFG.batch_size)
    keys = [(_KEY, _GENERALIZATION, 0), (_KEY, _GENERALIZATION, 0, 1), (_KEY, _GENERALIZATION, 0, 2)]
    tr = torch.from_numpy(np.flatnonzero(fed.train_domain == 0))
    te = torch.from_numpy(np.flatnonzero(fed.test_domain == 0))
    accs = [linear_probe(alg.global_representation(state), fed.x[tr], fed.y[tr], fed.x_test[te], fed.y_test[te], 10,
                         None, torch_rng(3, Stream.INIT, *k), **args).accuracy for k in keys]
    name = fed.domain_names[0]
    assert _pick(rows, "generalization", name) == pytest.approx(np.mean(accs), abs=1e-12)
    assert _pick(single, "generalization", name) == pytest.approx(accs[0], abs=1e-12)
    assert len(set(accs)) > 1  # the repeats differ: they are not one probe counted three times
    data = fed.client_data(1)
    te = torch.from_numpy(np.flatnonzero(fed.test_domain == fed.client_domain[1]))
    keys = [(_KEY, _PERSONALIZATION, 1), (_KEY, _PERSONALIZATION, 1, 1), (_KEY, _PERSONALIZATION, 1, 2)]
    accs = []
    for k in keys:
        frozen, adapter = alg.personal_probe(alg.payload_for(state, 1), states[1])  # a fresh G each time
        accs.append(linear_probe(frozen, data.x_train, data.y_train, fed.x_test[te], fed.y_test[te], 10, adapter,
                                 torch_rng(3, Stream.INIT, *k), **args).accuracy)
    assert _pick(rows, "personalization", client=1) == pytest.approx(np.mean(accs), abs=1e-12)
