"""The selection layer's shared parts: the observed history, the view a selector gets (no
device profile unless disclosed), the checks on a selector's answer, over-commitment counts."""
from __future__ import annotations

import numpy as np
import pytest

from fedclock.scheduling.devices import Devices
from fedclock.scheduling.selection import (ClientHistory, Disclosed, NotDisclosed, SelectionView, SelectorError,
                                           checked_choice,
                                           overcommitted)


def test_history_records_picks_arrivals_and_losses() -> None:
    h = ClientHistory(3)
    h.picked(1, now=2.5, round_index=4)
    h.picked(1, now=7.0, round_index=5)
    h.arrived(1, duration=3.0, loss=0.75, samples=40)
    h.arrived(1, duration=5.0, loss=None, samples=None)  # dropped as late: no loss used
    assert h.times_picked.tolist() == [0, 2, 0]
    assert h.last_picked_time[1] == 7.0 and h.last_picked_round.tolist() == [-1, 5, -1]
    assert h.last_duration[1] == 5.0 and h.last_loss[1] == 0.75 and h.last_samples[1] == 40
    view = SelectionView(h, 9.0, 6, 5, None)
    assert view.mean_duration()[1] == 4.0 and np.isnan(view.mean_duration()[0])


def test_view_arrays_are_read_only() -> None:
    view = SelectionView(ClientHistory(2), 0.0, 0, 0, None)
    with pytest.raises(ValueError):
        view.last_loss[0] = 1.0


def test_a_selector_cannot_read_device_profiles_unless_disclosed() -> None:
    devices = Devices(np.array([11.0, 22.0]), np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.1, 0.2]))
    view = SelectionView(ClientHistory(2), 0.0, 0, 0, None)
    with pytest.raises(NotDisclosed):
        assert view.resources is None
    assert view.disclosed_data_size is None
    held = [getattr(view, name) for name in SelectionView.__slots__]
    assert not any(isinstance(v, Devices) for v in held)
    for v in held:  # no array of the view carries a profile's values
        if isinstance(v, np.ndarray):
            assert not np.array_equal(v, devices.compute) and not np.array_equal(v, devices.up_mbps)
    assert not hasattr(view, "__dict__")  # nothing else can be hung on it

    def disclosed() -> Disclosed:
        return Disclosed(None, devices.compute, None, None, None, None, None, None)

    shown = SelectionView(ClientHistory(2), 0.0, 0, 0, disclosed)
    assert shown.resources.compute is not None and shown.resources.compute.tolist() == [11.0, 22.0]


def test_checked_choice_accepts_distinct_candidates_only() -> None:
    candidates = np.array([1, 4, 6, 9])
    assert checked_choice([9, 1], candidates, 2, "mine").tolist() == [1, 9]
    assert checked_choice([6], candidates, 2, "mine").tolist() == [6]  # fewer than k is allowed (FedCS)
    for bad in ([1, 1], [1, 2], [1, 4, 6], [], [1.0, 4.0], [[1, 4]], ["1"], [1, 4.5]):
        with pytest.raises(SelectorError, match="selector 'mine' must return 1 to 2 distinct client ids"):
            checked_choice(bad, candidates, 2, "mine")


@pytest.mark.parametrize("k, factor, expected", [(10, 1.3, 13), (10, 1.0, 10), (4, 1.5, 6), (3, 1.3, 4),
                                                 (7, None, 7), (10, 1.25, 13)])
def test_overcommit_dispatches_ceil_factor_k(k: int, factor: float | None, expected: int) -> None:
    assert overcommitted(k, factor) == expected
