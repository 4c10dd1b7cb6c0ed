"""Whole runs with ``runtime.device: cuda`` (skipped without a GPU; ``pytest -m cuda``).

What the project claims (``actors/runtime_config.py``, README's ``runtime`` line, DESIGN.md
contract 2): the runtime settings change no number, except within float rounding where the
kernels differ (``threads_per_actor`` > 1, ``vectorize``, and the device: a GPU's float32
kernels sum in another order than the CPU's). So:

* on the GPU, the inline backend and Ray executors holding GPU fractions give bit-identical
  tables (one device, one kernel configuration: :mod:`fedclock.actors.cuda_kernels`);
* against the same run on the CPU, every count, virtual time and byte is identical, and
  the numbers computed from trained weights (losses, accuracies) agree within
  :data:`LOSS_TOL` (relative) and :data:`ACCURACY_TOL`: a few float32 roundings per step on a
  small MLP over 2 rounds stay near 1e-6 relative, and an accuracy may move by a test
  sample that sits on a decision boundary (1/360 of the digits test set).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario
from tests.devices import cuda_test

LOSS_TOL = 1e-4
ACCURACY_TOL = 0.01
TRAINED = {"train_loss", "global_accuracy", "global_loss", "personal_accuracy_mean", "personal_accuracy_p10",
           "personal_accuracy_p90"}
"""Columns computed from trained weights: equal within tolerance across devices."""

SMALL = dict(population={"num_clients": 4}, dataset={"name": "digits", "partition": {"type": "iid"}},
             model={"name": "mlp", "hidden": [16]}, algorithm={"name": "fedavg", "lr": 0.1, "batch_size": 16},
             mode={"type": "sync", "cohort_size": 3}, stop={"rounds": 3}, evaluation={"every": 1}, seed=3)


def tables(runtime: Runtime, out: Path, **runtime_cfg: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics without wall times, events) of the small run on ``runtime``."""
    run_scenario(scenario(**SMALL, runtime={"backend": runtime.backend, **runtime_cfg}), runtime, out)
    return (pd.read_parquet(out / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(out / "events.parquet"))


def assert_same_up_to_float_kernels(cpu: pd.DataFrame, gpu: pd.DataFrame) -> None:
    """Every column identical except :data:`TRAINED`, which agree within the tolerances."""
    assert list(cpu.columns) == list(gpu.columns) and len(cpu) == len(gpu)
    exact = [c for c in cpu.columns if c not in TRAINED]
    pd.testing.assert_frame_equal(cpu[exact], gpu[exact], check_exact=True)
    for column in TRAINED & set(cpu.columns):
        tol = dict(rtol=LOSS_TOL, atol=LOSS_TOL) if "loss" in column else dict(rtol=0, atol=ACCURACY_TOL)
        pd.testing.assert_series_equal(cpu[column], gpu[column], check_exact=False, **tol)


@cuda_test
def test_gpu_runs_inline_and_on_gpu_fractions_give_the_cpu_tables(ray_runtime: Runtime, tmp_path: Path) -> None:
    """The Ray run uses a runtime of its own on the tests' Ray, closed at the end: a runtime
    keeps its pooled executors, and these hold the whole GPU between them."""
    import ray

    assert ray.cluster_resources().get("GPU", 0) >= 1, "the test Ray does not see the GPU"
    cpu_m, cpu_e = tables(Runtime("inline"), tmp_path / "cpu")
    inline_m, inline_e = tables(Runtime("inline"), tmp_path / "cuda-inline", device="cuda")
    gpu_runtime = Runtime("ray")  # Ray is running (the fixture): this one starts only actors, and close() ends them
    try:
        ray_m, ray_e = tables(gpu_runtime, tmp_path / "cuda-ray", device="cuda", num_actors=2, num_gpus=0.5,
                              placement="pooled")
    finally:
        gpu_runtime.close()
    assert len(cpu_e) == 9 and cpu_e.train_loss.notna().all()  # 3 rounds of 3 trained tasks
    pd.testing.assert_frame_equal(inline_m, ray_m, check_exact=True)
    pd.testing.assert_frame_equal(inline_e, ray_e, check_exact=True)
    assert_same_up_to_float_kernels(cpu_m, inline_m)
    assert_same_up_to_float_kernels(cpu_e, inline_e)


@cuda_test
def test_vectorized_gpu_run_gives_the_sequential_gpu_run(tmp_path: Path) -> None:
    """``runtime.vectorize`` on the GPU: the batched kernels' run against the per-client run,
    within float rounding (``vectorize``'s own promise, now on the device)."""
    seq_m, seq_e = tables(Runtime("inline"), tmp_path / "seq", device="cuda")
    vec_m, vec_e = tables(Runtime("inline"), tmp_path / "vec", device="cuda", vectorize=3)
    assert_same_up_to_float_kernels(seq_m, vec_m)
    assert_same_up_to_float_kernels(seq_e, vec_e)


def test_the_comparison_fails_on_a_changed_number() -> None:
    """The CPU/GPU comparison can fail: a loss moved beyond the tolerance, or a count changed."""
    base = pd.DataFrame({"train_loss": [1.0, 2.0], "steps": [3, 3], "global_accuracy": [0.5, 0.6]})
    assert_same_up_to_float_kernels(base, base.assign(train_loss=[1.0 + 1e-6, 2.0]))
    with pytest.raises(AssertionError):
        assert_same_up_to_float_kernels(base, base.assign(train_loss=[1.01, 2.0]))
    with pytest.raises(AssertionError):
        assert_same_up_to_float_kernels(base, base.assign(steps=[3, 4]))
    with pytest.raises(AssertionError):
        assert_same_up_to_float_kernels(base, base.assign(global_accuracy=[0.5, 0.65]))
