"""The calibration benchmark (``benchmarks/flops_calibration.py``) in a tiny CPU setting: it
takes its device and output file on the command line and writes one row per model."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.benchmarks.scripts import load_script


def test_tiny_cpu_run_writes_its_report(tmp_path: Path) -> None:
    """Batch 2, one repeat of two steps, a 64-square matmul, two of the models (the MLP and the
    5-layer CNN: the others take seconds on one thread): the report names the device and has a
    row with positive figures for each model and the spread."""
    out = tmp_path / "sub" / "calibration.md"
    threads = torch.get_num_threads()
    try:
        load_script("flops_calibration").main(["--device", "cpu", "--batch", "2", "--repeats", "1", "--steps", "2",
                                               "--matmul", "64", "--out", str(out),
                                               "--models", "mlp 784-200-200,cnn5 32px"])
    finally:
        torch.set_num_threads(threads)
    lines = out.read_text().splitlines()
    assert lines[0].startswith("device: CPU") and "GFLOP/s" in lines[1]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| model")]
    assert [r.split(" | ")[0][2:] for r in rows] == ["mlp 784-200-200", "cnn5 32px"]
    assert all(float(r.split(" | ")[k]) > 0 for r in rows for k in (1, 2, 3))
    assert lines[-1].startswith("spread")


def test_cuda_without_a_gpu_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(SystemExit) as exit_info:
        load_script("flops_calibration").main(["--device", "cuda"])
    assert exit_info.value.code == 2 and "no GPU" in capsys.readouterr().err
