"""DP-FedAvg learns: central DP (``privacy:``) at a moderate epsilon stays within 6 points of
FedAvg on paired seeds, and the same check fails with the noise ten times larger."""
from __future__ import annotations

from pathlib import Path

import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario

DISTANCE = 0.06
"""How far below FedAvg's accuracy DP-FedAvg may end on a seed (measured at the time of
writing, FedAvg / z = 2.5 / z = 25: seed 0 83.0 / 80.5 / 24.5, seed 1 84.4 / 82.2 / 26.2,
seed 2 83.6 / 79.1 / 22.3; the test set has 359 images, so a point is about 3.6 images, and
seed 2's margin is 1.5 points)."""
Z = 2.5
"""Noise multiplier: 10 releases of every client (all 80 join every round, so per-client
composition, no amplification) spend epsilon 5.76 at delta 1e-5."""


def accuracy(tmp_path: Path, seed: int, z: float | None) -> tuple[float, float]:
    """(global accuracy, spent epsilon) of 10 rounds of FedAvg on 80 digits clients, with central
    DP of multiplier ``z`` (clip 0.5) or without it (``None``)."""
    privacy = {} if z is None else {"privacy": {"mode": "central", "clip": 0.5, "noise_multiplier": z}}
    s = scenario(population={"num_clients": 80}, dataset={"name": "digits"}, model={"name": "mlp", "hidden": [16]},
                 algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 4, "batch_size": 16}, stop={"rounds": 10},
                 evaluation={"every": 10}, seed=seed, **privacy)
    out = tmp_path / f"{seed}-{z}"
    summary = run_scenario(s, Runtime("inline"), out)
    return summary.global_accuracy, summary.privacy_epsilon


@pytest.mark.slow
def test_dp_fedavg_at_moderate_epsilon_stays_near_fedavg_and_ten_times_the_noise_does_not(tmp_path: Path) -> None:
    for seed in (0, 1, 2):
        plain, _ = accuracy(tmp_path, seed, None)
        private, eps = accuracy(tmp_path, seed, Z)
        noisy, eps_noisy = accuracy(tmp_path, seed, 10 * Z)
        assert eps == pytest.approx(5.76, abs=0.01) and eps_noisy < 0.5
        assert private >= plain - DISTANCE, (seed, plain, private)
        assert not noisy >= plain - DISTANCE, (seed, plain, noisy)
