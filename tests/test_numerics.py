"""The tolerance rules of :mod:`tests.numerics`, against numbers computed by hand."""
from __future__ import annotations

import pytest
import torch

from tests.numerics import U32, accuracy_atol, gamma, run_relative_bound, sgd_atol, widest_reduction


def test_gamma_and_the_run_bound_by_hand() -> None:
    assert U32 == 2.0 ** -24
    assert gamma(100) == pytest.approx(100 * 2.0 ** -24 / (1 - 100 * 2.0 ** -24), rel=1e-15)
    with pytest.raises(ValueError, match="unbounded"):
        gamma(2 ** 24)
    # 2 * steps * products * gamma(reduction)
    assert run_relative_bound(10, 6, 64) == pytest.approx(2 * 10 * 6 * gamma(64), rel=1e-15)
    assert accuracy_atol(360) == pytest.approx(1 / 360)


def test_widest_reduction_counts_every_sum_of_a_step() -> None:
    """A linear layer's input gradient sums over its outputs: a 10 -> 300 -> 5 MLP at batch 32
    has 6 products and a widest sum of 300 (not the widest input, 300 only as an output of the
    first layer and input of the second); a 5 -> 400 layer alone still sums 400 terms."""
    mlp = torch.nn.Sequential(torch.nn.Linear(10, 300), torch.nn.ReLU(), torch.nn.Linear(300, 5))
    assert widest_reduction(mlp, (10,), 32) == (6, 300)
    assert widest_reduction(torch.nn.Linear(5, 400), (5,), 32) == (3, 400)
    assert widest_reduction(torch.nn.Linear(5, 3), (5,), 32) == (3, 32)  # the batch sum is widest
    # a 3 -> 64 convolution 3x3 on 3x8x8 inputs at batch 2: output sums 3 * 9 = 27, input
    # gradient 64 * 9 = 576, weight gradient at most 2 * 64 positions = 128
    conv = torch.nn.Conv2d(3, 64, 3)
    assert widest_reduction(conv, (3, 8, 8), 2) == (3, 576)
    grouped = torch.nn.Conv2d(4, 8, 3, groups=4)  # 8 / 4 * 9 = 18 against 2 * 64 = 128
    assert widest_reduction(grouped, (4, 8, 8), 2) == (3, 128)
    assert sgd_atol(conv, (3, 8, 8), 2, steps=5, scale=2.0) == pytest.approx(
        run_relative_bound(5, 3, 576) * 2.0, rel=1e-15)


def test_columns_from_the_weights_are_compared_as_losses_and_clock_columns_exactly() -> None:
    """A norm gain computed from weights that summed in another order may differ in its last
    bits (1e-7 relative under ATEN_CPU_CAPABILITY=default); a virtual time may not."""
    import numpy as np
    import pandas as pd

    from tests.numerics import RunBounds, assert_close_metrics

    bounds = RunBounds(relative=1e-5, global_accuracy=0.01, personal_accuracy=0.01)
    a = pd.DataFrame({"virtual_time": [1.0, 2.0], "update_norm_gain": [np.nan, 1.2534625749331698]})
    b = a.assign(update_norm_gain=[np.nan, 1.25346244390965])
    assert_close_metrics(a, b, bounds)
    with pytest.raises(AssertionError, match="update_norm_gain"):
        assert_close_metrics(a, a.assign(update_norm_gain=[np.nan, 1.26]), bounds)
    with pytest.raises(AssertionError):
        assert_close_metrics(a, a.assign(virtual_time=[1.0, 2.0 + 1e-12]), bounds)
