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
  +0.039 +0.027;
* FedStyle - Table 1's other baselines (:data:`BASELINES`), personalization: FedPer +0.013
  +0.088 +0.050 | +0.038 +0.063 -0.006 (block means +0.050 +0.031), FedRep +0.013 +0.113 +0.044
  | +0.031 +0.100 +0.031 (+0.056 +0.054), FedProx +0.006 +0.075 +0.038 | +0.031 +0.056 -0.006
  (+0.040 +0.027), APFL +0.000 +0.113 +0.063 | +0.056 +0.081 +0.013 (+0.058 +0.050), Ditto +0.019
  +0.131 +0.063 | +0.038 +0.069 -0.006 (+0.071 +0.033);
* lambda 5 - lambda 0.5, personalization (Table 4's collapse): -0.038 -0.038 -0.025 | +0.019
  -0.063 -0.006, block means -0.033 -0.017; but -0.025 -0.019 -0.006 +0.019 -0.025 +0.013 on
  seeds 0-2 and 9-11 and +0.050 -0.050 +0.063 +0.006 +0.025 -0.006 +0.025 +0.044 on seeds 12-19:
  over the 20 seeds a mean of -0.002 (standard deviation 0.034).

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

Table 1's baselines: every SimCLR baseline whose test holds here gets one
(:data:`HOLDING_BASELINES`: FedPer, FedProx, APFL and Ditto; FedProx's and APFL's rows hold in
the report since its runs were all made at one commit, FedPer's holds, Ditto's cannot tell at
its seeds), margin half the worst block mean above (:data:`BASELINE_MARGINS`), seeds
:data:`ZERO_SEEDS`, whose FedStyle runs the tests above share. FedProx there: +0.056 +0.056
+0.019 +0.025 +0.069 +0.063, mean +0.048 (margin 0.013); APFL +0.038 +0.056 +0.012 +0.025 +0.050
+0.062, mean +0.041 (margin 0.025). FedPer there: +0.056 +0.063 +0.019 +0.031 +0.075 +0.063, mean +0.051;
at the spread of seeds 3-8 (sd 0.034, standard error 0.014 over six seeds) its test passes with
80 % power for a true gain of 0.027 or more. Ditto there: +0.056 +0.006 -0.006 -0.006 +0.094
+0.063, mean +0.034; at its spread on seeds 3-8 (sd 0.048, standard error 0.020) 80 % power for
a true gain of 0.032 or more. With FedStyle's arm replaced by the baseline itself the difference
is exactly 0 and each test fails (checked: six zeros each). FedRep's row holds in the report
(+1.77 points [+0.06, +3.48] over 5 seeds), but at this scale its test, margin
:data:`BASELINE_MARGINS` 0.027 set on seeds 3-8 before the test seeds were run, fails there:
+0.038 +0.031 -0.019 -0.019 +0.069 +0.044, mean +0.024; it has no test (the margin is not
lowered after the fact). At :data:`FEDREP_STEPS` = 8 local steps a round (a margin set again
before the test seeds were run) it fails too: FedStyle - FedRep +0.056 +0.150 +0.075 | +0.031
+0.106 +0.019 on seeds 3-8 (block means +0.094 +0.052, margin 0.026), then +0.031 +0.006 -0.000
+0.062 +0.031 +0.019 on :data:`ZERO_SEEDS`, mean +0.025: the ordering is there on every seed
but under the margin, so it has no test (``fedrep_gain``, no test). Table 1's SimSiam rows
(:func:`test_fedstyle_personalizes_better_than_a_baseline_with_simsiam`): FedStyle and FedAvg
and the five baselines with the SimSiam objective, otherwise as above, FedStyle - arm
personalization on seeds 3-8: FedAvg +0.012 +0.106 +0.050 | +0.038 +0.094 -0.006, FedPer +0.025
+0.112 +0.050 | +0.044 +0.100 +0.000, FedRep +0.031 +0.119 +0.050 | +0.050 +0.100 -0.006, FedProx
as FedAvg (mu 0.01 changes no probe here), APFL +0.031 +0.112 +0.050 | +0.044 +0.106 +0.000,
Ditto +0.019 +0.106 +0.050 | +0.031 +0.119 -0.013; margins (:data:`SIMSIAM_MARGINS`) half the
worst block mean, set before the test seeds were run; on :data:`ZERO_SEEDS` the means are
+0.049 (FedAvg), +0.048 (FedPer), +0.046 (FedRep), +0.049 (FedProx), +0.045 (APFL) and +0.042
(Ditto). The report's SimSiam rows against all six hold (APFL and Ditto at 6 seeds). With
FedStyle's arm replaced by the arm it is compared with, every difference is exactly 0 and
each test fails. The twelve SimSiam arms' runs add about 45 s of CPU. Table 3's He@0.2
personalization row (:func:`test_fedstyle_personalizes_better_than_fedavg_at_he02`): three
clients per style (:data:`HE_PER_STYLE`, 96 images a style split by the per-class Dirichlet at
0.2), every client every round, otherwise as above; FedStyle - FedAvg personalization on seeds
3-8: -0.008 -0.002 +0.025 | +0.019 +0.002 +0.010 (block means +0.005 +0.010, margin
:data:`HE_MARGIN` half the worst), then on :data:`ZERO_SEEDS` -0.013 +0.017 +0.033 +0.004
-0.002 +0.010, mean +0.008 (+0.008 with PyTorch's default kernels). The gain is small, as in the
report (+0.62 points over 9 seeds, the paper's +1.17); generalization shows none (seeds 3-8 mean
+0.002, the test seeds -0.005) and He@0.8, whose rows cannot tell in the report, has no test
(personalization +0.011, generalization +0.004 on seeds 3-8). With FedAvg on both sides the
difference is exactly 0 and the test fails. Its twelve runs add about 20 s of CPU. Lambda 5 against lambda 0.5
has no test: at this scale the personalization drop of the quick setting (-0.68 points over 6
seeds in the report, sd 0.54) is not there (20 seeds, mean -0.002, sd 0.034; a 6 x 4-step,
128-image variant gave -0.011 +0.006 +0.017 on seeds 3-5; 3 x 8 steps -0.014 on seeds 3-6,
3 x 16 steps -0.020 and 6 x 10 steps -0.035 (sd 0.033) on seeds 3-8, the last about 3 s of
CPU a run), and the generalization difference goes the other way (lambda 5 higher on 14 of
the 20 seeds, lower on 5), so a test that passes here would pass by chance; a scale where it
shows (the quick one) costs about 40 s of CPU per run. Table 4's direction shows at a larger
weight: :func:`test_a_large_style_weight_collapses_personalization` runs lambda
:data:`LARGE_LAMBDA` = 20 against 0.5 at this module's setting. Lambda 0.5 - lambda 20,
personalization, on seeds 3-8: +0.162 +0.088 +0.175 | +0.025 +0.162 +0.125 (block means
+0.142 +0.104, sd 0.058; margin :data:`LARGE_LAMBDA_MARGIN` 0.052, half the worst); on the
test seeds :data:`ZERO_SEEDS` +0.062 +0.037 +0.050 +0.069 +0.144 +0.131, mean +0.082. At the
spread of seeds 3-8 (standard error 0.024 over six seeds) the test passes with 80 % power for
a true drop of 0.072 or more. With lambda 0.5 on both sides the drop is exactly 0 and it fails
(checked). Generalization at lambda 20 has no test: seeds 3-8 gave +0.069 +0.025 +0.031 |
+0.056 +0.000 +0.037 (margin 0.015 set from them), the test seeds +0.050 +0.038 -0.131 +0.019
+0.025 -0.019, mean -0.003. The lambda test adds six runs of about 0.5 s of CPU (its lambda 0.5
runs are the other tests').
"""
from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterator
from functools import lru_cache

import pytest
import torch

from fedclock.algorithms.apfl import APFL, APFLParams
from fedclock.algorithms.base import Algorithm, Arrival
from fedclock.algorithms.ditto import Ditto, DittoParams
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedper import FedPer, FedPerParams
from fedclock.algorithms.fedprox import FedProx, FedProxParams
from fedclock.algorithms.fedrep import FedRep, FedRepParams
from fedclock.algorithms.fedstyle import FedStyle, FedStyleParams
from fedclock.algorithms.models import ModelFactory
from fedclock.scenarios.data.federation import Federation, build_federation
from fedclock.scenarios.linear_eval import linear_evaluation
from fedclock.scenarios.schema import DatasetConfig, LinearEvalConfig

ROUNDS, CLIENTS = 3, 4
HE_PER_STYLE = 3
"""Clients per style in the He@alpha arms (Table 3; the report's quick_heterogeneous.yaml)."""
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


def _federation(seed: int) -> Federation:
    return build_federation(DatasetConfig(name="digit_styles", image_size=8, client_test_fraction=0,
                                          domains={"samples_per_domain": 64, "test_samples_per_domain": 40}),
                            CLIENTS, seed)


def _factory() -> ModelFactory:
    return ModelFactory("mlp", (1, 8, 8), 10, hidden=(64,))


def _he_federation(seed: int, alpha: float) -> Federation:
    """Table 3's multi-client setting: :data:`HE_PER_STYLE` clients per style, each style's pool
    split among them by the paper's per-class Dirichlet at ``alpha`` (He@alpha)."""
    return build_federation(DatasetConfig(name="digit_styles", image_size=8, client_test_fraction=0,
                                          partition={"type": "dirichlet", "alpha": alpha,
                                                     "concentration": "per_class"},
                                          domains={"samples_per_domain": 96, "test_samples_per_domain": 40}),
                            CLIENTS * HE_PER_STYLE, seed)


def _train_and_probe(alg: Algorithm, seed: int, cfg: LinearEvalConfig,
                     fed: Federation | None = None) -> dict[str, float]:
    """:data:`ROUNDS` rounds of every client on seed ``seed``'s federation (``fed``, default
    :func:`_federation`), then the final linear evaluation; the ``average`` rows by kind."""
    fed = _federation(seed) if fed is None else fed
    clients = len(fed.client_train)
    state = alg.init_server(torch.Generator().manual_seed(seed))
    states: dict[int, dict[str, torch.Tensor] | None] = {c: None for c in range(clients)}
    for r in range(ROUNDS):
        arrivals = []
        for c in range(clients):
            result = alg.client_update(alg.payload_for(state, c), states[c], fed.client_data(c),
                                       torch.Generator().manual_seed(seed * 1000 + r * clients + c))
            states[c] = result.state
            arrivals.append(Arrival(c, result.upload, result.num_samples, state.version, 0))
        state, _ = alg.receive(state, arrivals, torch.Generator().manual_seed(seed))
    rows = linear_evaluation(alg, state, states, fed, cfg, seed)  # type: ignore[arg-type]
    return {r["kind"]: float(r["accuracy"]) for r in rows if r["domain"] == "average"}


@lru_cache(maxsize=None)
def averages(style_weight: float | None, seed: int, local_steps: int = 2,
             objective: str = "simclr") -> dict[str, float]:
    """The ``average`` rows of the final linear evaluation of one FedStyle run (module
    docstring) at ``style_weight``; ``None``: FedAvg with the same objective, batches,
    steps and data (Table 1's baseline). ``local_steps`` per round (2 but in the FedRep test);
    ``objective``: SimCLR, or SimSiam for Table 1's SimSiam rows."""
    # the controls only for lambda 0.5 (the own-style rows, and so transfer, are the same without them)
    cfg = EVAL if style_weight == 0.5 and objective == "simclr" else EVAL.model_copy(update={"style_controls": False})
    return _train_and_probe(_arm(style_weight, objective, local_steps), seed, cfg)


def _arm(style_weight: float | None, objective: str = "simclr", local_steps: int = 2) -> Algorithm:
    """FedStyle at ``style_weight``, or FedAvg (``None``), with the shared settings (:func:`_sgd`)."""
    if style_weight is None:
        return FedAvg(FedAvgParams(**_sgd(objective, local_steps)), _factory())
    return FedStyle(FedStyleParams(**_sgd(objective, local_steps), style_epochs=1, style_weight=style_weight),
                    _factory())


def _sgd(objective: str = "simclr", local_steps: int = 2) -> dict[str, object]:
    """The objective and SGD settings every arm shares."""
    return {"objective": objective, "lr": 0.1, "batch_size": 32, "local_steps": local_steps}


BASELINES: dict[str, Callable[[ModelFactory, str], Algorithm]] = {
    "fedper": lambda f, o: FedPer(FedPerParams(**_sgd(o)), f),
    "fedrep": lambda f, o: FedRep(FedRepParams(**_sgd(o), head_epochs=1), f),
    "fedprox": lambda f, o: FedProx(FedProxParams(**_sgd(o), mu=0.01), f),
    "apfl": lambda f, o: APFL(APFLParams(**_sgd(o), alpha=0.25), f),
    "ditto": lambda f, o: Ditto(DittoParams(**_sgd(o), lam=0.01), f),
}
"""Table 1's other baselines with FedAvg's objective, batches, steps and data, their own settings
as ``scenarios/library/fedstyle/quick_baselines_simclr.yaml`` and ``quick_baselines_simsiam.yaml``
(FedProx mu 0.01, FedRep one head epoch, APFL alpha 0.25, Ditto lambda 0.01)."""


@lru_cache(maxsize=None)
def baseline_averages(name: str, seed: int, local_steps: int = 2, objective: str = "simclr") -> dict[str, float]:
    """The ``average`` rows of one :data:`BASELINES` run's final linear evaluation (its probe on
    its own local model(s), as the paper's Sec. "Evaluations and Results"), at ``local_steps``
    per round with ``objective``."""
    alg = BASELINES[name](_factory(), objective)
    alg = type(alg)(alg.params.model_copy(update={"local_steps": local_steps}), _factory())
    return _train_and_probe(alg, seed, EVAL.model_copy(update={"style_controls": False}))


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


def fedstyle_gain(seed: int, objective: str = "simclr") -> float:
    """Personalization of FedStyle (lambda 0.5, its stylized feature) minus FedAvg's (Table 1),
    both with ``objective``."""
    return (averages(0.5, seed, 2, objective)["personalization"]
            - averages(None, seed, 2, objective)["personalization"])


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


BASELINE_MARGINS = {"fedper": 0.015, "fedrep": 0.027, "fedprox": 0.013, "apfl": 0.025, "ditto": 0.016}
"""Half the worst 3-seed block mean of FedStyle - baseline personalization on seeds 3-8, per
baseline (module docstring)."""
HOLDING_BASELINES = ("fedper", "fedprox", "apfl", "ditto")
"""The SimCLR baselines whose test holds here (FedRep's row holds in
``docs/reproductions/fedstyle.md``, but not its test: module docstring)."""


def baseline_gain(name: str, seed: int, objective: str = "simclr") -> float:
    """Personalization of FedStyle (lambda 0.5) minus that of the :data:`BASELINES` run ``name``,
    both with ``objective``."""
    return (averages(0.5, seed, 2, objective)["personalization"]
            - baseline_averages(name, seed, 2, objective)["personalization"])


@pytest.mark.numerics
@pytest.mark.parametrize("name", HOLDING_BASELINES)
def test_fedstyle_personalizes_better_than_a_baseline(name: str) -> None:
    """FedStyle's personalization probe against a Table 1 baseline's, the same data and seeds
    (seeds :data:`ZERO_SEEDS`, margin :data:`BASELINE_MARGINS`)."""
    gains = [baseline_gain(name, s) for s in ZERO_SEEDS]
    assert statistics.mean(gains) > BASELINE_MARGINS[name], gains


SIMSIAM_MARGINS = {"fedavg": 0.021, "fedper": 0.024, "fedrep": 0.024, "fedprox": 0.021, "apfl": 0.025,
                   "ditto": 0.023}
"""Half the worst 3-seed block mean of FedStyle - baseline personalization with the SimSiam
objective on seeds 3-8, per baseline (module docstring)."""


def simsiam_gain(name: str, seed: int) -> float:
    """Personalization of FedStyle (lambda 0.5) minus that of FedAvg (``name`` "fedavg") or of
    the :data:`BASELINES` run ``name``, all with the SimSiam objective (Table 1's SimSiam rows)."""
    return fedstyle_gain(seed, "simsiam") if name == "fedavg" else baseline_gain(name, seed, "simsiam")


@pytest.mark.numerics
@pytest.mark.parametrize("name", list(SIMSIAM_MARGINS))
def test_fedstyle_personalizes_better_than_a_baseline_with_simsiam(name: str) -> None:
    """Table 1's SimSiam personalization rows: FedStyle's probe against FedAvg's and each
    baseline's, the same data and seeds (seeds :data:`ZERO_SEEDS`, margin :data:`SIMSIAM_MARGINS`)."""
    gains = [simsiam_gain(name, s) for s in ZERO_SEEDS]
    assert statistics.mean(gains) > SIMSIAM_MARGINS[name], gains


@lru_cache(maxsize=None)
def he_averages(style_weight: float | None, seed: int, alpha: float) -> dict[str, float]:
    """The ``average`` rows of one FedStyle (lambda ``style_weight``) or FedAvg (``None``) run
    on :func:`_he_federation` at ``alpha``, SimCLR, otherwise as :func:`averages`."""
    return _train_and_probe(_arm(style_weight), seed, EVAL.model_copy(update={"style_controls": False}),
                            _he_federation(seed, alpha))


def he_gain(seed: int, alpha: float, kind: str = "personalization") -> float:
    """FedStyle's ``kind`` probe minus FedAvg's at He@``alpha`` (Table 3)."""
    return he_averages(0.5, seed, alpha)[kind] - he_averages(None, seed, alpha)[kind]


HE_MARGIN = 0.0025
"""Half the worst 3-seed block mean of FedStyle - FedAvg personalization at He@0.2 on seeds 3-8
(module docstring)."""


@pytest.mark.numerics
def test_fedstyle_personalizes_better_than_fedavg_at_he02() -> None:
    """Table 3's He@0.2 personalization row (claim t3-he0.2-personalization): FedStyle's probe
    against FedAvg's with three clients per style split by the per-class Dirichlet at 0.2, the
    same data and seeds (seeds :data:`ZERO_SEEDS`, margin :data:`HE_MARGIN`)."""
    gains = [he_gain(s, 0.2) for s in ZERO_SEEDS]
    assert statistics.mean(gains) > HE_MARGIN, gains


def lambda5_gain(seed: int) -> float:
    """Personalization at lambda 5 minus at lambda 0.5 (Table 4's collapse; negative if it shows)."""
    return averages(5.0, seed)["personalization"] - averages(0.5, seed)["personalization"]


LARGE_LAMBDA = 20.0
"""The large style weight of the lambda test (Table 4's 5 shows no effect at this scale)."""
LARGE_LAMBDA_MARGIN = 0.052
"""Half the worst 3-seed block mean of lambda 0.5 - lambda 20 personalization on seeds 3-8
(module docstring)."""


def large_lambda_drop(seed: int, kind: str) -> float:
    """The ``kind`` probe at lambda 0.5 minus at :data:`LARGE_LAMBDA` (positive: the large weight is worse)."""
    return averages(0.5, seed)[kind] - averages(LARGE_LAMBDA, seed)[kind]


@pytest.mark.numerics
def test_a_large_style_weight_collapses_personalization() -> None:
    """Table 4's direction (a large lambda collapses personalization against lambda 0.5; claim
    lambda5-personalization-collapse) at lambda :data:`LARGE_LAMBDA`, the same data, batches
    and steps (seeds :data:`ZERO_SEEDS`, margin :data:`LARGE_LAMBDA_MARGIN`)."""
    drops = [large_lambda_drop(s, "personalization") for s in ZERO_SEEDS]
    assert statistics.mean(drops) > LARGE_LAMBDA_MARGIN, drops


FEDREP_STEPS = 8
"""Local steps per round of the FedRep measurement (module docstring; no test)."""


def fedrep_gain(seed: int) -> float:
    """Personalization of FedStyle (lambda 0.5) minus FedRep's, both at :data:`FEDREP_STEPS` local steps."""
    return (averages(0.5, seed, FEDREP_STEPS)["personalization"]
            - baseline_averages("fedrep", seed, FEDREP_STEPS)["personalization"])


if __name__ == "__main__":  # regenerate the measured numbers of the module docstring
    torch.set_num_threads(1)
    for name, fn in (("infusion (transfer)", infusion_gain),
                     ("own - swapped", lambda s: own_style_gain(s, "personalization_swapped")),
                     ("own - zero", lambda s: own_style_gain(s, "personalization_zero")),
                     ("own - content", lambda s: own_style_gain(s, "personalization_content")),
                     ("FedStyle - FedAvg (personalization)", fedstyle_gain),
                     *((f"FedStyle - {b} (personalization)", lambda s, b=b: baseline_gain(b, s)) for b in BASELINES),
                     *((f"FedStyle - {b} (SimSiam, personalization)", lambda s, b=b: simsiam_gain(b, s))
                       for b in SIMSIAM_MARGINS),
                     ("lambda 5 - lambda 0.5 (personalization)", lambda5_gain),
                     *((f"lambda 0.5 - lambda 20 ({k})", lambda s, k=k: large_lambda_drop(s, k))
                       for k in ("personalization", "generalization")),
                     ("FedStyle - FedRep at 8 steps (personalization)", fedrep_gain),
                     *((f"FedStyle - FedAvg at He@{a} ({k})", lambda s, a=a, k=k: he_gain(s, a, k))
                       for a in (0.2, 0.8) for k in ("personalization", "generalization"))):
        values = [fn(s) for s in MEASURE_SEEDS]
        sys.stdout.write(f"{name}: " + " ".join(f"{v:+.3f}" for v in values)
                         + f"  mean {statistics.mean(values):+.4f}\n")
    for s in MEASURE_SEEDS:
        off = averages(0.0, s)["transfer"]
        sys.stdout.write(f"seed {s}: lambda 0.5 {averages(0.5, s)}; lambda 0 transfer {off:.3f}\n")
