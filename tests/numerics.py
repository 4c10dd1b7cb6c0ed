"""Tolerances for comparing two float32 computations that are equal in exact arithmetic but
ordered differently (vectorized against sequential clients, a GPU against a CPU, one CPU
kernel path against another), derived from the float32 error of the computation instead of
a constant picked on one machine.

PyTorch chooses its CPU kernels at run time by the processor's vector width
(``torch.backends.cpu.get_cpu_capability()``: ``default``, ``AVX2``, ``AVX512``; the
environment variable ``ATEN_CPU_CAPABILITY`` forces a lower one), and each kernel may sum a
reduction in another order. Two orders of one sum differ, so every comparison between two
such computations carries a tolerance from these bounds, and the tests that make one carry
the ``numerics`` marker (``pytest -m numerics``; ``.ci/run`` runs them again under every
lower capability of the machine).

The bounds:

* **One reduction.** A float32 sum of ``K`` products computed in any order is within
  ``gamma(K) * sum |x_i y_i|`` of the exact sum, ``gamma(K) = K u / (1 - K u)``, with
  ``u = 2**-24`` the unit roundoff of float32; two orders are therefore within twice that of
  each other.
* **A training run.** A run of ``steps`` SGD steps one after the other, through ``products``
  matrix products a step (forward and backward: three per linear layer, the layer's output,
  its input gradient and its weight gradient), has at each product a relative perturbation of
  at most ``2 gamma(K)`` for the widest reduction ``K``. Carried forward without any
  contraction (a worst case: SGD at a stable step size does not amplify a perturbation of the
  weights by more than 1 per step to first order), the relative difference of any value the
  run computes from its weights (a loss, a logit) is at most ``2 * steps * products *
  gamma(K)`` (:func:`run_relative_bound`).
* **An accuracy.** A prediction changes only where the two largest logits of a sample are
  closer than the logits' difference; at the logit bound above (about 1e-3 relative for the
  test runs) such near-ties are rare (the measured loss differences are 10 to 10,000 times
  below the bound), so an accuracy over ``n`` samples may differ by at most one flipped
  prediction, ``1 / n`` (:func:`accuracy_atol`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

U32 = 2.0 ** -24
"""The unit roundoff of float32."""


def gamma(k: int, u: float = U32) -> float:
    """The error factor of a ``k``-term floating-point sum in any order: ``k u / (1 - k u)``."""
    if k * u >= 1:
        raise ValueError(f"gamma({k}) is unbounded at unit roundoff {u}")
    return k * u / (1 - k * u)


def run_relative_bound(steps: int, products: int, reduction: int, u: float = U32) -> float:
    """The relative difference of a value computed after ``steps`` sequential SGD steps of
    ``products`` matrix products each, the widest summing ``reduction`` terms, between two
    summation orders (module docstring): ``2 * steps * products * gamma(reduction)``."""
    return 2.0 * steps * products * gamma(reduction, u)


def mlp_products(layers: int) -> int:
    """Matrix products per SGD step of a chain of ``layers`` linear layers: each layer's
    output, input gradient and weight gradient."""
    return 3 * layers


def accuracy_atol(samples: int) -> float:
    """Tolerance of an accuracy over ``samples`` predictions: one flipped prediction (module
    docstring), plus float64's rounding of the division."""
    return 1.0 / samples + 1e-12


def assert_within(actual: np.ndarray, expected: np.ndarray, atol: float, what: str) -> None:
    """``|actual - expected| <= atol`` elementwise (NaN equal to NaN), with a message naming
    ``what`` and the largest difference against the bound."""
    a, e = np.asarray(actual, dtype=float), np.asarray(expected, dtype=float)
    assert a.shape == e.shape, f"{what}: shapes {a.shape} and {e.shape}"
    assert (np.isnan(a) == np.isnan(e)).all(), f"{what}: NaN in one run only"
    diff = np.abs(np.where(np.isnan(a), 0.0, a - e))
    assert diff.max(initial=0.0) <= atol, f"{what}: differs by {diff.max():.3g}, more than the bound {atol:.3g}"


def widest_reduction(model: torch.nn.Module, input_shape: tuple[int, ...], batch: int) -> tuple[int, int]:
    """``(products, reduction)`` of one SGD step of ``model`` on batches of ``batch`` samples of
    ``input_shape``: three products per linear or convolution layer (output, input gradient,
    weight gradient), and the longest sum among them: a linear layer's output sums over
    ``in_features`` and its input gradient over ``out_features``; a convolution's output over
    ``in_channels / groups * kernel area`` and its input gradient over ``out_channels / groups
    * kernel area``; each weight gradient sums over the batch (times a convolution's output
    positions, bounded by the input's). The same widths :func:`run_bounds` takes for an MLP
    (input, hidden and class widths, and the batch)."""
    area = int(np.prod(input_shape[1:])) if len(input_shape) > 1 else 1
    layers, widest = 0, batch
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            layers += 1
            widest = max(widest, module.in_features, module.out_features)
        elif isinstance(module, torch.nn.Conv2d):
            layers += 1
            kh, kw = module.kernel_size
            fan = max(module.in_channels, module.out_channels) // module.groups * kh * kw
            widest = max(widest, fan, batch * area)
    return 3 * layers, widest


def sgd_atol(model: torch.nn.Module, input_shape: tuple[int, ...], batch: int, steps: int, scale: float = 1.0) -> float:
    """Absolute tolerance of a value of magnitude ``scale`` after ``steps`` SGD steps of
    ``model`` (:func:`widest_reduction`, :func:`run_relative_bound`)."""
    products, reduction = widest_reduction(model, input_shape, batch)
    return run_relative_bound(max(steps, 1), products, reduction) * scale


@dataclass(frozen=True)
class RunBounds:
    """Tolerances between two runs of one scenario whose training sums in other orders."""

    relative: float
    """Of every loss, relative to the column's largest magnitude (:func:`run_relative_bound`)."""
    global_accuracy: float
    """Of the global accuracy: one flipped prediction of the global test set."""
    personal_accuracy: float
    """Of the personalized accuracy statistics: one flipped prediction of the smallest client test split."""

    def loss_atol(self, values: np.ndarray) -> float:
        """Absolute tolerance of a loss column: :attr:`relative` times its largest magnitude
        (at least 1)."""
        return self.relative * float(np.nanmax(np.abs(values), initial=1.0))


def run_bounds(scenario: Any, clients: pd.DataFrame) -> RunBounds:
    """The bounds of a run of ``scenario`` (an MLP or logistic model) whose ``clients.parquet``
    is ``clients``: the longest chain of models, each trained from the last (the run's rounds,
    or versions in an asynchronous run), times the most local steps of a task (``local_steps``,
    else the largest client's batches times its epochs, plus Ditto's personal steps and
    FedAvg-FT's fine-tuning), plus the evaluation's forward pass; the MLP's layers and its
    widest reduction (input width, hidden widths, classes, batch)."""
    from fedclock.scenarios.data.federation import build_federation

    params = scenario.algorithm.params
    fed = build_federation(scenario.dataset, scenario.population.num_clients, scenario.seed)
    batch = int(params.batch_size)
    local = getattr(params, "local_steps", None)
    steps = int(local) if local else int(np.ceil(clients["num_train"].max() / batch)) * max(1, int(params.local_epochs))
    steps += int(getattr(params, "personal_steps", 0) or 0)
    steps += int(np.ceil(steps * float(getattr(params, "finetune_epochs", 0) or 0)))
    chain = scenario.stop.rounds or scenario.stop.versions or 1
    hidden = list(getattr(scenario.model, "hidden", ()))
    widths = [int(fed.x.reshape(len(fed.x), -1).shape[1]), *hidden, fed.num_classes, batch]
    tested = clients.loc[clients["num_test"] > 0, "num_test"]
    return RunBounds(relative=run_relative_bound(chain * steps + 1, mlp_products(len(widths) - 2), max(widths)),
                     global_accuracy=accuracy_atol(len(fed.y_test)),
                     personal_accuracy=accuracy_atol(int(tested.min()) if len(tested) else 1))


WEIGHT_COLUMNS = ("update_norm_gain", "global_body_drift", "global_body_change")
"""``metrics.parquet`` columns an algorithm computes from the trained weights (norms and their
ratios): they carry the weights' rounding, so they are compared as losses are."""


def assert_close_metrics(a: pd.DataFrame, b: pd.DataFrame, bounds: RunBounds) -> None:
    """Two runs' ``metrics.parquet`` rows (``wall_time`` dropped): accuracies, losses and the
    columns computed from the weights (:data:`WEIGHT_COLUMNS`) within ``bounds``; every other
    column (virtual times, versions, bytes, counts: the clock's, which training numbers do not
    reach) exactly equal."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for col in a.columns:
        if col == "global_accuracy":
            assert_within(b[col].to_numpy(float), a[col].to_numpy(float), bounds.global_accuracy, col)
        elif col.startswith("personal_accuracy"):
            assert_within(b[col].to_numpy(float), a[col].to_numpy(float), bounds.personal_accuracy, col)
        elif "loss" in col or col in WEIGHT_COLUMNS:
            values = a[col].to_numpy(float)
            assert_within(b[col].to_numpy(float), values, bounds.loss_atol(values), col)
        elif a[col].dtype.kind == "f":
            np.testing.assert_array_equal(b[col].to_numpy(), a[col].to_numpy(), err_msg=col)
        else:
            assert a[col].tolist() == b[col].tolist(), col


def assert_close_events(a: pd.DataFrame, b: pd.DataFrame, bounds: RunBounds) -> None:
    """Two runs' ``events.parquet``: every column but the losses exactly equal, the losses
    within ``bounds``."""
    assert list(a.columns) == list(b.columns)
    loss = [c for c in a.columns if "loss" in c]
    pd.testing.assert_frame_equal(a.drop(columns=loss), b.drop(columns=loss), check_exact=True)
    for col in loss:
        values = a[col].to_numpy(float)
        assert_within(b[col].to_numpy(float), values, bounds.loss_atol(values), f"events.{col}")
