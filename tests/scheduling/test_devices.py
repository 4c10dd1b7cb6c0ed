"""Device profiles: task durations from first principles, and seeded population draws."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fedclock.scheduling.population import PopulationConfig
from fedclock.scheduling.devices import (DeviceProfile, Devices, TaskTiming, sample, task_timing,
                                         transfer_seconds)
from fedclock.scheduling.rng import Stream, numpy_rng


def _pop(n: int = 10, clients: list | None = None, **devices: object) -> PopulationConfig:
    return PopulationConfig.model_validate({"num_clients": n, "devices": devices, "clients": clients or []})


# --------------------------------------------------------------------------- timing
def test_transfer_seconds_by_hand() -> None:
    assert transfer_seconds(1_000_000, 8.0, 0.0) == pytest.approx(1.0)
    assert transfer_seconds(1_000_000, 8.0, 0.25) == pytest.approx(1.25)
    assert transfer_seconds(0, 1.0, 0.1) == pytest.approx(0.1)
    assert transfer_seconds(125_000, 1.0, 0.0) == pytest.approx(1.0)  # 1 Mbit over 1 Mbps


def test_task_timing_by_hand() -> None:
    profile = DeviceProfile(compute=100.0, down_mbps=8.0, up_mbps=2.0, latency_s=0.05)
    t = task_timing(profile, bytes_down=1_000_000, bytes_up=500_000, work=500.0)
    assert isinstance(t, TaskTiming)
    assert t.download_s == pytest.approx(1.0 + 0.05)       # 8 Mbit at 8 Mbps + latency
    assert t.compute_s == pytest.approx(5.0)               # 500 passes at 100/s
    assert t.upload_s == pytest.approx(2.0 + 0.05)         # 4 Mbit at 2 Mbps + latency
    assert t.comm_s == pytest.approx(3.1)
    assert t.total_s == pytest.approx(1.05 + 5.0 + 2.05)


def test_task_timing_zero_work_is_pure_communication() -> None:
    t = task_timing(DeviceProfile(1.0, 1.0, 1.0, 0.0), 0, 0, 0.0)
    assert (t.download_s, t.compute_s, t.upload_s, t.total_s) == (0.0, 0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- draws
def test_numbers_and_constants_are_constant() -> None:
    d = Devices.draw(_pop(5, compute=123.0, down_mbps={"dist": "constant", "value": 20}, up_mbps=3,
                          latency_s=0.0), seed=0)
    assert len(d) == 5
    for arr, value in ((d.compute, 123.0), (d.down_mbps, 20.0), (d.up_mbps, 3.0), (d.latency_s, 0.0)):
        assert arr.dtype == np.float64
        np.testing.assert_array_equal(arr, np.full(5, value))
    assert d[3] == DeviceProfile(123.0, 20.0, 3.0, 0.0)
    assert isinstance(d[3].compute, float)


def test_defaults_match_schema() -> None:
    d = Devices.draw(PopulationConfig(num_clients=2), seed=0)
    assert d[0] == d[1] == DeviceProfile(200.0, 50.0, 10.0, 0.05)


def test_uniform_within_bounds_and_spread() -> None:
    d = Devices.draw(_pop(4000, compute={"dist": "uniform", "low": 10, "high": 30}), seed=1)
    assert d.compute.min() >= 10 and d.compute.max() <= 30
    assert d.compute.mean() == pytest.approx(20.0, abs=0.5)
    assert (d.compute < 15).mean() == pytest.approx(0.25, abs=0.03)


def test_loguniform_within_bounds_and_log_spread() -> None:
    d = Devices.draw(_pop(4000, down_mbps={"dist": "loguniform", "low": 1, "high": 100}), seed=2)
    x = d.down_mbps
    assert x.min() >= 1 and x.max() <= 100
    logs = np.log10(x)
    # uniform in log space: each decade holds half, median at the geometric mean (10)
    assert (x < 10).mean() == pytest.approx(0.5, abs=0.03)
    assert np.median(x) == pytest.approx(10.0, rel=0.1)
    assert logs.mean() == pytest.approx(1.0, abs=0.03)
    assert logs.std() == pytest.approx(2 / math.sqrt(12), rel=0.05)


def test_lognormal_median_and_sigma() -> None:
    d = Devices.draw(_pop(20000, compute={"dist": "lognormal", "median": 50.0, "sigma": 0.5}), seed=3)
    assert np.all(d.compute > 0)
    assert np.median(d.compute) == pytest.approx(50.0, rel=0.03)
    assert np.log(d.compute).std() == pytest.approx(0.5, rel=0.03)


def test_lognormal_sigma_zero_is_the_median() -> None:
    d = Devices.draw(_pop(3, compute={"dist": "lognormal", "median": 7.0, "sigma": 0.0}), seed=0)
    np.testing.assert_allclose(d.compute, 7.0)


def test_choice_with_weights_frequencies() -> None:
    d = Devices.draw(_pop(20000, up_mbps={"dist": "choice", "values": [1, 5, 20], "weights": [1, 3, 0]}), seed=4)
    values, counts = np.unique(d.up_mbps, return_counts=True)
    assert set(values.tolist()) <= {1.0, 5.0}  # zero weight never drawn
    freq = dict(zip(values.tolist(), (counts / counts.sum()).tolist()))
    assert freq[1.0] == pytest.approx(0.25, abs=0.015)
    assert freq[5.0] == pytest.approx(0.75, abs=0.015)


def test_choice_without_weights_is_uniform() -> None:
    d = Devices.draw(_pop(9000, latency_s={"dist": "choice", "values": [0.01, 0.1, 1.0]}), seed=5)
    for v in (0.01, 0.1, 1.0):
        assert (d.latency_s == v).mean() == pytest.approx(1 / 3, abs=0.02)


def test_per_client_overrides_applied() -> None:
    pop = _pop(5, clients=[{"ids": [0, 2], "compute": 7}, {"ids": [4], "latency_s": 0, "up_mbps": 0.5}],
               compute={"dist": "uniform", "low": 100, "high": 200}, latency_s=0.2)
    base = Devices.draw(_pop(5, compute={"dist": "uniform", "low": 100, "high": 200}, latency_s=0.2), seed=9)
    d = Devices.draw(pop, seed=9)
    assert d.compute[0] == 7.0 and d.compute[2] == 7.0
    np.testing.assert_array_equal(d.compute[[1, 3, 4]], base.compute[[1, 3, 4]])  # others keep their draw
    assert d.latency_s[4] == 0.0 and d.up_mbps[4] == 0.5
    np.testing.assert_array_equal(d.latency_s[:4], 0.2)
    np.testing.assert_array_equal(d.down_mbps, base.down_mbps)


def test_fractional_override_on_constant_field_is_not_truncated() -> None:
    d = Devices.draw(_pop(3, clients=[{"ids": [1], "compute": 7.5}], compute=200), seed=0)
    np.testing.assert_array_equal(d.compute, [200.0, 7.5, 200.0])


def test_later_override_wins() -> None:
    d = Devices.draw(_pop(3, clients=[{"ids": [0, 1], "compute": 5}, {"ids": [1], "compute": 9}]), seed=0)
    np.testing.assert_array_equal(d.compute, [5.0, 9.0, 200.0])


def test_draw_is_deterministic_for_a_seed() -> None:
    pop = _pop(50, compute={"dist": "lognormal", "median": 50, "sigma": 1}, down_mbps={"dist": "uniform", "low": 1,
               "high": 9}, up_mbps={"dist": "choice", "values": [1, 2, 3]}, latency_s={"dist": "loguniform",
               "low": 0.01, "high": 1})
    a, b, c = Devices.draw(pop, seed=11), Devices.draw(pop, seed=11), Devices.draw(pop, seed=12)
    for f in ("compute", "down_mbps", "up_mbps", "latency_s"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert not np.array_equal(getattr(a, f), getattr(c, f))


def test_changing_one_distribution_leaves_other_fields_unchanged() -> None:
    common = {"down_mbps": {"dist": "uniform", "low": 1, "high": 9},
              "up_mbps": {"dist": "lognormal", "median": 2, "sigma": 0.3},
              "latency_s": {"dist": "loguniform", "low": 0.01, "high": 1}}
    a = Devices.draw(_pop(30, compute={"dist": "uniform", "low": 10, "high": 20}, **common), seed=5)
    b = Devices.draw(_pop(30, compute={"dist": "lognormal", "median": 100, "sigma": 2}, **common), seed=5)
    c = Devices.draw(_pop(30, compute=42.0, **common), seed=5)
    assert not np.array_equal(a.compute, b.compute)
    for f in ("down_mbps", "up_mbps", "latency_s"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        np.testing.assert_array_equal(getattr(a, f), getattr(c, f))


def test_fields_use_distinct_streams() -> None:
    # identical distributions on two fields still give different per-client values
    dist = {"dist": "uniform", "low": 1, "high": 2}
    d = Devices.draw(_pop(20, down_mbps=dist, up_mbps=dist), seed=0)
    assert not np.array_equal(d.down_mbps, d.up_mbps)


def test_sample_rejects_unknown_distribution() -> None:
    with pytest.raises(TypeError):
        sample(object(), 3, numpy_rng(0, Stream.DEVICES, 0))
