"""The Gaussian mechanism and FedAvg-DP's client step."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.dp import clip_to_norm, gaussian_sigma, privatize
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_dp import FedAvgDP, FedAvgDPParams
from tests.algorithms.tiny import DATA, FACTORY, W, gen


def test_sigma_of_the_paper_budgets() -> None:
    assert gaussian_sigma(0.2, 0.1) == pytest.approx(math.sqrt(2 * math.log(12.5)) / 0.2)
    assert gaussian_sigma(0.05, 0.05) == pytest.approx(50.7452, rel=1e-4)
    with pytest.raises(ValueError):
        gaussian_sigma(0.0, 0.1)


def test_clip_scales_only_long_vectors() -> None:
    assert torch.equal(clip_to_norm(torch.tensor([0.3, 0.4]), 1.0), torch.tensor([0.3, 0.4]))
    assert torch.allclose(clip_to_norm(torch.tensor([3.0, 4.0]), 1.0), torch.tensor([0.6, 0.8]))
    assert torch.equal(clip_to_norm(torch.zeros(3), 1.0), torch.zeros(3))


def test_privatize_is_clip_then_scaled_gaussian_noise() -> None:
    out = privatize(torch.tensor([3.0, 4.0]), 2.0, 0.5, 0.01, gen(7))
    noise = torch.randn(2, generator=gen(7))
    expected = torch.tensor([1.2, 1.6]) + gaussian_sigma(0.5, 0.01) * 2.0 * noise
    assert torch.allclose(out, expected)


def test_fedavg_dp_uploads_noisy_clipped_fedavg_delta() -> None:
    params = dict(lr=0.5, batch_size=4, local_steps=2)
    plain = FedAvg(FedAvgParams(**params), FACTORY)
    dp = FedAvgDP(FedAvgDPParams(**params, epsilon=1.0, delta=0.1, dp_clip=0.01), FACTORY)
    g_plain, g_dp = gen(3), gen(3)
    delta = plain.client_update({"weights": W}, None, DATA, g_plain).upload["delta"]
    upload = dp.client_update({"weights": W}, None, DATA, g_dp).upload["delta"]
    assert float(delta.norm()) > 0.01  # the clip binds
    expected = delta * (0.01 / float(delta.norm())) + gaussian_sigma(1.0, 0.1) * 0.01 * torch.randn(
        10, generator=g_plain)
    assert torch.allclose(upload, expected, atol=1e-6)
