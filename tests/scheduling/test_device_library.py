"""The device-profile library and mixtures by fraction."""
from __future__ import annotations

import numpy as np
import pytest

from fedclock.scenarios.loader import ScenarioError
from fedclock.scheduling.device_library import DEVICE_CLASSES, mix_counts
from fedclock.scheduling.population import client_classes
from fedclock.scheduling.devices import Devices
from tests.conftest import scenario


def test_every_class_has_a_source_and_sane_medians() -> None:
    assert set(DEVICE_CLASSES) == {"low_end_phone", "mid_range_phone", "high_end_phone", "edge_box", "datacenter_gpu"}
    for c in DEVICE_CLASSES.values():
        assert c.source and c.summary
    order = ["low_end_phone", "mid_range_phone", "high_end_phone", "edge_box", "datacenter_gpu"]
    medians = [DEVICE_CLASSES[n].compute.median for n in order]
    assert medians == sorted(medians)
    assert DEVICE_CLASSES["high_end_phone"].compute.median == 30.0  # GFLOP/s (Das et al. 2022)
    memory = [DEVICE_CLASSES[n].memory_gb for n in order]
    assert memory == [1.5, 3.0, 4.0, 2.0, 40.0] and all("memory" in DEVICE_CLASSES[n].source for n in order)


def test_mix_counts_round_cumulative_fractions() -> None:
    assert mix_counts([0.5, 0.5], 10) == [5, 5]
    assert mix_counts([1 / 3, 1 / 3, 1 / 3], 10) == [3, 4, 3]
    assert mix_counts([0.25], 10) == [3]
    assert sum(mix_counts([0.3, 0.3, 0.3, 0.1], 20)) == 20


def test_mixture_assigns_blocks_and_draws_from_each_class() -> None:
    s = scenario(population={"num_clients": 400, "device_mix": {"low_end_phone": 0.5, "datacenter_gpu": 0.25},
                             "devices": {"compute": 7.0}, "clients": [{"ids": [0], "compute": 1.0}]})
    classes = client_classes(s.population)
    assert classes[:200] == ["low_end_phone"] * 200 and classes[200:300] == ["datacenter_gpu"] * 100
    assert classes[300:] == ["custom"] * 100
    d = Devices.draw(s.population, 0)
    assert d.compute[0] == 1.0  # explicit per-client values win
    assert np.median(d.compute[1:200]) == pytest.approx(3.0, rel=0.1)
    assert (d.memory_gb[:200] == 1.5).all() and np.isinf(d.memory_gb[300:]).all()
    assert np.median(d.down_mbps[200:300]) == pytest.approx(10000.0, rel=0.2)
    assert (d.compute[300:] == 7.0).all()
    again = Devices.draw(s.population, 0)
    assert np.array_equal(d.compute, again.compute) and np.array_equal(d.latency_s, again.latency_s)


@pytest.mark.parametrize("mix, message", [
    ({"edge_box": 0.5, "unit": "samples_per_s"},
     "population.device_mix: library device classes give compute in GFLOP/s"),
    ({"pager": 0.5}, "population.device_mix: unknown device class 'pager' (allowed: low_end_phone"),
    ({"edge_box": 0.7, "datacenter_gpu": 0.5}, "population.device_mix: fractions add up to 1.2 (at most 1)"),
    ({"edge_box": 0}, "population.device_mix: Input should be greater than 0 (got 0)"),
])
def test_mixture_mistakes(mix: dict, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        unit = mix.pop("unit", "gflops")
        scenario(population={"device_mix": mix, "compute_unit": unit})
    assert message in str(err.value)
