"""FedStyle's evaluation protocol and data preparation (paper: "More Generalized and
Personalized Unsupervised Representation Learning in a Distributed System", Sec.
"Evaluations and Results" and App. A): personalization is tested on the style's test set,
each style's pool is the average size with duplicates, and a single client holding every
style is the Centralized baseline."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedclock.algorithms.fedstyle import FedStyle, FedStyleParams
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.linear_eval import linear_evaluation
from fedclock.scenarios.schema import DatasetConfig, LinearEvalConfig
from tests.scenarios.test_domains import _write_tree


def _trained(fed, num_clients: int):  # type: ignore[no-untyped-def]
    alg = FedStyle(FedStyleParams(batch_size=16, local_steps=1, style_epochs=0.5),
                   ModelFactory("mlp", (1, 8, 8), 10, hidden=(16,)))
    state = alg.init_server(torch.Generator().manual_seed(0))
    states = {c: alg.client_update(alg.payload_for(state, c), None, fed.client_data(c),
                                   torch.Generator().manual_seed(c)).state for c in range(num_clients)}
    return alg, state, states


def test_personalization_is_tested_on_the_style_test_set() -> None:
    """The probe trains on the client's local data and tests on its style's test set, also
    when clients keep no test split of their own (client_test_fraction 0)."""
    cfg = DatasetConfig(name="digit_styles", image_size=8, client_test_fraction=0,
                        partition={"type": "dirichlet", "alpha": 0.2},
                        domains={"samples_per_domain": 64, "test_samples_per_domain": 40})
    fed = build_federation(cfg, 8, seed=0)
    alg, state, states = _trained(fed, 8)
    rows = linear_evaluation(alg, state, states, fed, LinearEvalConfig(epochs=2), seed=0)
    per_client = [r for r in rows if r["kind"] == "personalization" and r["client"] >= 0]
    assert len(per_client) == 8
    for r in per_client:
        c = r["client"]
        assert r["num_test"] == int(np.sum(fed.test_domain == fed.client_domain[c])) == 40
        assert r["num_train"] == len(fed.client_train[c]) and 0.0 <= r["accuracy"] <= 1.0


def test_each_style_pool_is_the_average_size_with_duplicates(tmp_path: Path) -> None:
    """App. A: "the average number of total training images in all style datasets is
    sampled (duplicate sampling if necessary)"."""
    _write_tree(tmp_path / "a", ["Art"], ["chair", "mug"], per_class=5)  # 8 train images (0.2 test)
    _write_tree(tmp_path / "a", ["Clipart"], ["chair", "mug"], per_class=3)  # 4 train images
    cfg = DatasetConfig(name="office_home", root=tmp_path / "a", image_size=8, global_test_fraction=0.2,
                        domains={"names": ["Art", "Clipart"]})
    fed = build_federation(cfg, 2, seed=0)
    assert np.bincount(fed.train_domain).tolist() == [6, 6]
    art, clip = fed.x[fed.train_domain == 0], fed.x[fed.train_domain == 1]
    assert len(torch.unique(art.flatten(1), dim=0)) == 6  # the larger style: a subsample, no repeats
    assert len(torch.unique(clip.flatten(1), dim=0)) == 4  # the smaller style: all 4, two drawn twice


def test_one_client_holding_every_style_is_the_centralized_baseline() -> None:
    cfg = DatasetConfig(name="digit_styles", image_size=8, client_test_fraction=0,
                        domains={"samples_per_domain": 32, "test_samples_per_domain": 20})
    fed = build_federation(cfg, 1, seed=0)
    assert sorted(fed.client_train[0].tolist()) == list(range(len(fed.y)))
    alg, state, states = _trained(fed, 1)
    rows = linear_evaluation(alg, state, states, fed, LinearEvalConfig(epochs=2), seed=0)
    gen = [r for r in rows if r["kind"] == "generalization"]
    assert sorted(r["domain"] for r in gen) == sorted(["original", "inverted", "blurred", "thick", "average"])
    assert not [r for r in rows if r["kind"] == "personalization"]  # no local model, no personalization
