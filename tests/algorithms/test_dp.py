"""The Gaussian mechanism (sensitivity 2C, classical and analytic calibration), the run's
privacy accounting, and FedAvg-DP's client and server steps."""
from __future__ import annotations

import math

import pydantic
import pytest
import torch
from scipy.stats import norm

from fedclock.algorithms.base import Arrival, ServerState
from fedclock.algorithms.dp import DPParams, classical_multiplier, clip_to_norm, cumulative_epsilon, noise_multiplier, \
    noise_std, privacy_report, privatize
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_dp import FedAvgDP, FedAvgDPParams
from fedclock.scenarios.loader import ScenarioError, parse_suite
from tests.algorithms.tiny import DATA, FACTORY, W, gen


def gaussian_delta(z: float, epsilon: float) -> float:
    """Exact delta(epsilon) of a sensitivity-1 Gaussian mechanism with noise multiplier z
    (Balle & Wang 2018, Theorem 8), written out independently of the library."""
    return float(norm.cdf(0.5 / z - epsilon * z) - math.exp(epsilon) * norm.cdf(-0.5 / z - epsilon * z))


def test_classical_multiplier_of_the_paper_budgets() -> None:
    assert classical_multiplier(0.2, 0.1) == pytest.approx(math.sqrt(2 * math.log(12.5)) / 0.2)
    assert classical_multiplier(0.05, 0.05) == pytest.approx(50.7452, rel=1e-4)
    with pytest.raises(ValueError):
        classical_multiplier(1.0, 0.1)


def test_noise_is_calibrated_to_sensitivity_two_c() -> None:
    """Replace-one local DP: two clipped vectors differ by up to 2C, so the noise std is z * 2C
    (the previous z * C gave about (2 eps, delta))."""
    p = DPParams(epsilon=0.2, delta=0.1, dp_clip=0.5)
    assert noise_std(p) == pytest.approx(classical_multiplier(0.2, 0.1) * 2 * 0.5)


def test_classical_calibration_rejects_epsilon_of_one_or_more() -> None:
    with pytest.raises(pydantic.ValidationError, match="epsilon: the classical Gaussian mechanism holds only"):
        DPParams(epsilon=1.0, delta=0.1)
    data = {"name": "t", "algorithm": {"name": "fedavg_dp", "epsilon": 2.0}, "stop": {"rounds": 1}}
    with pytest.raises(ScenarioError, match=r"^f: algorithm\.epsilon: the classical Gaussian mechanism holds only "
                       r"for epsilon < 1 \(got 2\); use a smaller epsilon or calibration: analytic"):
        parse_suite(data, "f")
    data["algorithm"] = {"name": "fedavg_dp", "epsilon": 2.0, "calibration": "analytic"}
    assert parse_suite(data, "f").runs[0].algorithm.params.epsilon == 2.0


@pytest.mark.parametrize("epsilon,delta", [(0.2, 0.1), (0.05, 0.05), (3.0, 1e-5)])
def test_analytic_calibration_is_exactly_epsilon_delta(epsilon: float, delta: float) -> None:
    z = noise_multiplier(DPParams(epsilon=epsilon, delta=delta, calibration="analytic"))
    assert gaussian_delta(z, epsilon) == pytest.approx(delta, rel=1e-6)
    if epsilon < 1:  # the classical sigma is valid but larger
        assert z < classical_multiplier(epsilon, delta)


def test_cumulative_epsilon_composes_uploads() -> None:
    z = 3.0
    # one upload at its own exact delta(eps): epsilon comes back (PLD is tight for Gaussians)
    assert cumulative_epsilon(z, 1, gaussian_delta(z, 0.1)) == pytest.approx(0.1, abs=2e-3)
    # k Gaussian uploads compose to one Gaussian of multiplier z / sqrt(k)
    assert cumulative_epsilon(z, 16, gaussian_delta(z / 4, 1.0)) == pytest.approx(1.0, abs=2e-3)
    assert cumulative_epsilon(z, 0, 1e-5) == 0.0
    eps = [cumulative_epsilon(z, k, 1e-5) for k in (1, 10, 100)]
    assert eps[0] < eps[1] < eps[2]


def test_privacy_report_of_the_paper_budget_over_500_rounds() -> None:
    p = DPParams(epsilon=0.2, delta=0.1, accounting_delta=1e-5)
    report = privacy_report(p, 500)
    z = classical_multiplier(0.2, 0.1) / math.sqrt(500)
    assert gaussian_delta(z, report["dp_epsilon"]) == pytest.approx(1e-5, rel=0.02)
    assert report["dp_delta"] == 1e-5 and report["dp_uploads_max"] == 500
    assert privacy_report(DPParams(epsilon=0.2, delta=0.1), 3)["dp_delta"] == 0.1  # default: the upload's delta


def test_clip_scales_only_long_vectors() -> None:
    assert torch.equal(clip_to_norm(torch.tensor([0.3, 0.4]), 1.0), torch.tensor([0.3, 0.4]))
    assert torch.allclose(clip_to_norm(torch.tensor([3.0, 4.0]), 1.0), torch.tensor([0.6, 0.8]))
    assert torch.equal(clip_to_norm(torch.zeros(3), 1.0), torch.zeros(3))


def test_privatize_is_clip_then_scaled_gaussian_noise() -> None:
    p = DPParams(epsilon=0.5, delta=0.01, dp_clip=2.0)
    out = privatize(torch.tensor([3.0, 4.0]), p, gen(7))
    noise = torch.randn(2, generator=gen(7))
    expected = torch.tensor([1.2, 1.6]) + classical_multiplier(0.5, 0.01) * 2 * 2.0 * noise
    assert torch.allclose(out, expected)


def test_fedavg_dp_uploads_noisy_clipped_fedavg_delta() -> None:
    params = dict(lr=0.5, batch_size=4, local_steps=2)
    plain = FedAvg(FedAvgParams(**params), FACTORY)
    dp = FedAvgDP(FedAvgDPParams(**params, epsilon=0.9, delta=0.1, dp_clip=0.01), FACTORY)
    g_plain, g_dp = gen(3), gen(3)
    delta = plain.client_update({"weights": W}, None, DATA, g_plain).upload["delta"]
    upload = dp.client_update({"weights": W}, None, DATA, g_dp).upload["delta"]
    assert float(delta.norm()) > 0.01  # the clip binds
    expected = delta * (0.01 / float(delta.norm())) + classical_multiplier(0.9, 0.1) * 2 * 0.01 * torch.randn(
        10, generator=g_plain)
    assert torch.allclose(upload, expected, atol=1e-6)


def test_fedavg_dp_server_counts_uploads_and_reports_the_most_participating_client() -> None:
    dp = FedAvgDP(FedAvgDPParams(lr=0.1, epsilon=0.5, delta=0.05), FACTORY)
    state = ServerState(tensors={"weights": W.clone()})
    assert dp.server_metrics(state)["dp_epsilon"] == 0.0
    up = {"delta": torch.zeros(10)}
    for cohort in ([0, 2], [2], [1, 2]):
        state, _ = dp.server_receive(state, [Arrival(c, up, 4, 0, 0) for c in cohort], gen())
    assert state.tensors["dp_uploads"].tolist() == [1, 1, 3]
    report = dp.server_metrics(state)
    assert report["dp_uploads_max"] == 3
    assert report["dp_epsilon"] == cumulative_epsilon(classical_multiplier(0.5, 0.05), 3, 0.05)
    with pytest.raises(pydantic.ValidationError, match="dp_clip_granularity: FedAvg-DP clips"):
        FedAvgDPParams(dp_clip_granularity="example")


@pytest.mark.parametrize("epsilon,delta,uploads", [(0.05, 0.05, 40), (0.2, 0.1, 500)])
def test_run_level_budget_spends_epsilon_over_all_uploads(epsilon: float, delta: float, uploads: int) -> None:
    """budget_scope run: the accountant's epsilon after budget_uploads uploads is the budget
    (a hair under it; 0.1 % less noise overspends). Independently, T Gaussian mechanisms of
    multiplier z are one of multiplier z / sqrt(T), whose exact delta at epsilon is delta."""
    p = DPParams(epsilon=epsilon, delta=delta, budget_scope="run", budget_uploads=uploads)
    z = noise_multiplier(p)
    assert epsilon * 0.995 < cumulative_epsilon(z, uploads, delta) <= epsilon
    assert cumulative_epsilon(z * 0.999, uploads, delta) > epsilon
    assert gaussian_delta(z / math.sqrt(uploads), epsilon) == pytest.approx(delta, rel=5e-3)
    assert privacy_report(p, uploads)["dp_epsilon"] <= epsilon
    assert noise_std(p) == pytest.approx(z * 2 * p.dp_clip)


def test_run_level_budget_needs_its_upload_count() -> None:
    with pytest.raises(pydantic.ValidationError, match="budget_uploads"):
        DPParams(budget_scope="run")
    assert DPParams(epsilon=2.0, budget_scope="run", budget_uploads=3).epsilon == 2.0  # no classical limit
    data = {"name": "t", "algorithm": {"name": "fedreco_dp", "budget_scope": "run"}, "stop": {"rounds": 1}}
    with pytest.raises(ScenarioError, match=r"algorithm.budget_uploads: budget_scope 'run' needs"):
        parse_suite(data, "f")
