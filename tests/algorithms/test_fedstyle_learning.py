"""FedStyle's two components against their ablations, on paired seeds ("More Generalized and
Personalized Unsupervised Representation Learning in a Distributed System", Sec. "Local style
infusion" and "Personalizing with stylized content feature", Ablation studies).

Setting: scikit-learn digits in four generated styles at 8x8 (one client per style, 64 images
each, 40 test images per style), the MLP encoder (64 hidden), SimCLR, batch 32, one style
extraction epoch, :data:`ROUNDS` rounds of 2 local steps, then the final linear evaluation
(:mod:`fedclock.scenarios.linear_eval`, 10 probe epochs) with the style controls. Seed ``s``
draws the split, the initial model, the style models and every batch; the arms compared at
one seed share all of them (paired; lambda = 0 still computes the infused term, so its draws
are the same, :class:`~fedclock.algorithms.fedstyle.FedStyle`).

* **Style infusion** (lambda = 0.5 against lambda = 0): cross-style transfer of the global
  content encoder (each style's generalization classifier tested on the other styles) —
  the probe the paper's "Analysis of style-infused representation" argues for, far from
  ceiling here (about 0.17-0.20, chance being 0.10, where the within-style probes sit at
  0.64-0.73).
* **Own style in the personalized feature** (Eq. 4), from the same run's linear evaluation
  (same classifier seed, client by client): the client's own style against another client's
  style encoder (swapped), against zeros in place of the style (zero), and the stylized
  feature against the generalized content feature alone (content; the paper's ablation
  "Stylized content feature").
* **FedStyle against FedAvg** (Table 1, personalization): the same data, objective, batches
  and steps, FedAvg's probe on its encoder alone (``averages(None, seed)``).

Measured on seeds 3-8 (not the seeds tested) by ``python -m tests.algorithms.test_fedstyle_learning``
(paired differences in accuracy, per seed; block means of 3 seeds):

* infusion, transfer (lambda 0.5 - lambda 0): +0.006 -0.004 -0.017 | -0.004 +0.010 -0.008, mean
  -0.003 (transfer itself about 0.17-0.20 in both arms): no advantage;
* own style - swapped: +0.000 +0.031 +0.019 | -0.025 +0.019 -0.018, block means +0.017 -0.008:
  no reliable advantage (personalization itself about 0.64-0.76);
* own style - zero: +0.056 +0.119 +0.037 | +0.025 +0.062 +0.037, block means +0.071 +0.041;
* own style - content alone: +0.006 +0.094 +0.069 | +0.037 +0.081 +0.000, block means +0.056
  +0.039;
* FedStyle - FedAvg, personalization: +0.006 +0.075 +0.037 | +0.031 +0.056 -0.006, block means
  +0.039 +0.027.

So at this scale the personalized feature needs *a* style input, but another client's style
serves about as well as the client's own, and infusion does not make the global features
transfer better across styles. The infusion test asserts the paper's direction with a margin
of :data:`MARGIN` and is ``xfail(strict=True)``: it fails now, and strict xfail turns a future
pass (an advantage that appears) into a failure to look at. Own style against swapped has no
test: its sign depends on the seeds (block means +0.017 and -0.008; at the test seeds 0-2 it
came out above the margin, so a strict xfail would fail there and a plain test elsewhere), a
"cannot tell" that the report carries with its interval. The zero-style, content-alone and
FedAvg tests hold with margins :data:`ZERO_MARGIN`, :data:`CONTENT_MARGIN` and
:data:`FEDAVG_MARGIN`, half the worst block mean above each, on seeds :data:`ZERO_SEEDS` (none
of the measurement's; there the three means were +0.038, +0.037 and +0.048). With a component
switched off (the same arm on both sides: the content feature for both, FedAvg for both) a
paired difference is exactly 0 and every assertion fails.
``docs/reproductions/fedstyle.md`` reports the same comparisons at the quick setting
(``fedclock reproduce fedstyle``).

Cost: 15 short federated runs (FedStyle and FedAvg) and their linear evaluations, cached
between the tests, with one PyTorch thread (the ``one_thread`` fixture, as the measurement
above): the 12 FedStyle runs of the first measurement took 40 s of CPU; with PyTorch's default
threads on a loaded 2-core box the same first test once took 409 s of wall time (threads
spinning against each other).
"""
from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from functools import lru_cache

import pytest
import torch

from fedclock.algorithms.base import Algorithm, Arrival
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedstyle import FedStyle, FedStyleParams
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.linear_eval import linear_evaluation
from fedclock.scenarios.schema import DatasetConfig, LinearEvalConfig

ROUNDS, CLIENTS = 3, 4
TEST_SEEDS = (0, 1, 2)
ZERO_SEEDS = (0, 1, 2, 9, 10, 11)
"""The zero-style test's seeds: six, none of the measurement's. Over seeds 3-8 own - zero has
mean +0.056 and standard deviation 0.033; three seeds (standard error 0.019) put
:data:`ZERO_MARGIN` 1.9 standard errors below that mean, and seeds 0-2 came out at +0.023
with PyTorch's AVX2 kernels and +0.019 (a failure) with its default ones
(``ATEN_CPU_CAPABILITY=default``: the same training summed in another order ends elsewhere).
Six seeds (standard error 0.0135) put the margin 2.7 standard errors below: +0.038 (AVX2)
and +0.037 (default) on these seeds."""
MEASURE_SEEDS = tuple(range(3, 9))
MARGIN = 0.005
"""The advantage the xfail test asserts (accuracy / 100): small, since it does not hold even at 0."""
ZERO_MARGIN = 0.02
"""Half the worst 3-seed block mean of own style - zero on seeds 3-8 (module docstring)."""
CONTENT_MARGIN = 0.019
"""Half the worst 3-seed block mean of own style - content alone on seeds 3-8 (module docstring)."""
FEDAVG_MARGIN = 0.013
"""Half the worst 3-seed block mean of FedStyle - FedAvg personalization on seeds 3-8 (module docstring)."""
EVAL = LinearEvalConfig(epochs=10, lr=0.05, batch_size=64, style_controls=True)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One PyTorch thread for these tests, as the measurement that set their margins used."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@lru_cache(maxsize=None)
def averages(style_weight: float | None, seed: int) -> dict[str, float]:
    """The ``average`` rows of the final linear evaluation of one FedStyle run (module
    docstring) at ``style_weight``; ``None``: FedAvg with the same SimCLR objective, batches,
    steps and data (Table 1's baseline)."""
    fed = build_federation(DatasetConfig(name="digit_styles", image_size=8, client_test_fraction=0,
                                         domains={"samples_per_domain": 64, "test_samples_per_domain": 40}),
                           CLIENTS, seed)
    factory = ModelFactory("mlp", (1, 8, 8), 10, hidden=(64,))
    alg: Algorithm
    if style_weight is None:
        alg = FedAvg(FedAvgParams(objective="simclr", lr=0.1, batch_size=32, local_steps=2), factory)
    else:
        alg = FedStyle(FedStyleParams(objective="simclr", lr=0.1, batch_size=32, local_steps=2, style_epochs=1,
                                      style_weight=style_weight), factory)
    state = alg.init_server(torch.Generator().manual_seed(seed))
    states: dict[int, dict[str, torch.Tensor] | None] = {c: None for c in range(CLIENTS)}
    for r in range(ROUNDS):
        arrivals = []
        for c in range(CLIENTS):
            result = alg.client_update(alg.payload_for(state, c), states[c], fed.client_data(c),
                                       torch.Generator().manual_seed(seed * 1000 + r * CLIENTS + c))
            states[c] = result.state
            arrivals.append(Arrival(c, result.upload, result.num_samples, state.version, 0))
        state, _ = alg.receive(state, arrivals, torch.Generator().manual_seed(seed))
    # the controls only for lambda 0.5 (the own-style rows, and so transfer, are the same without them)
    cfg = EVAL if style_weight else EVAL.model_copy(update={"style_controls": False})
    rows = linear_evaluation(alg, state, states, fed, cfg, seed)  # type: ignore[arg-type]
    return {r["kind"]: float(r["accuracy"]) for r in rows if r["domain"] == "average"}


def infusion_gain(seed: int) -> float:
    """Transfer accuracy with style infusion (lambda 0.5) minus without (lambda 0)."""
    return averages(0.5, seed)["transfer"] - averages(0.0, seed)["transfer"]


def own_style_gain(seed: int, control: str) -> float:
    """Personalization with the client's own style minus the ``control`` kind of the same run
    (lambda 0.5)."""
    run = averages(0.5, seed)
    return run["personalization"] - run[control]


@pytest.mark.xfail(strict=True, reason="style infusion does not improve cross-style transfer at this scale "
                   "(lambda 0.5 - lambda 0 on seeds 3-8: +0.006 -0.004 -0.017 -0.004 +0.010 -0.008)")
def test_style_infusion_improves_cross_style_transfer() -> None:
    gains = [infusion_gain(s) for s in TEST_SEEDS]
    assert statistics.mean(gains) > MARGIN, gains


@pytest.mark.numerics
def test_a_style_input_beats_zeros() -> None:
    """The stylized feature with the client's style against zeros in its place (module docstring;
    seeds: :data:`ZERO_SEEDS`)."""
    gains = [own_style_gain(s, "personalization_zero") for s in ZERO_SEEDS]
    assert statistics.mean(gains) > ZERO_MARGIN, gains


def fedstyle_gain(seed: int) -> float:
    """Personalization of FedStyle (lambda 0.5, its stylized feature) minus FedAvg's (Table 1)."""
    return averages(0.5, seed)["personalization"] - averages(None, seed)["personalization"]


@pytest.mark.numerics
def test_stylized_feature_beats_the_content_feature_alone() -> None:
    """The stylized content feature [f_c, G(f_c, f_s)] against f_c alone, the same run and
    classifier seed (the paper's ablation "Stylized content feature"; seeds :data:`ZERO_SEEDS`)."""
    gains = [own_style_gain(s, "personalization_content") for s in ZERO_SEEDS]
    assert statistics.mean(gains) > CONTENT_MARGIN, gains


@pytest.mark.numerics
def test_fedstyle_personalizes_better_than_fedavg() -> None:
    """FedStyle's personalization probe against FedAvg's, the same data and seeds (Table 1;
    seeds :data:`ZERO_SEEDS`)."""
    gains = [fedstyle_gain(s) for s in ZERO_SEEDS]
    assert statistics.mean(gains) > FEDAVG_MARGIN, gains


if __name__ == "__main__":  # regenerate the measured numbers of the module docstring
    torch.set_num_threads(1)
    for name, fn in (("infusion (transfer)", infusion_gain),
                     ("own - swapped", lambda s: own_style_gain(s, "personalization_swapped")),
                     ("own - zero", lambda s: own_style_gain(s, "personalization_zero")),
                     ("own - content", lambda s: own_style_gain(s, "personalization_content")),
                     ("FedStyle - FedAvg (personalization)", fedstyle_gain)):
        values = [fn(s) for s in MEASURE_SEEDS]
        sys.stdout.write(f"{name}: " + " ".join(f"{v:+.3f}" for v in values)
                         + f"  mean {statistics.mean(values):+.4f}\n")
    for s in MEASURE_SEEDS:
        off = averages(0.0, s)["transfer"]
        sys.stdout.write(f"seed {s}: lambda 0.5 {averages(0.5, s)}; lambda 0 transfer {off:.3f}\n")
