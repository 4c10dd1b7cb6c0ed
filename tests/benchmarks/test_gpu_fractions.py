"""The GPU-fraction benchmark script: its overlap measure, and a clean exit without CUDA.
(The co-scheduling itself needs a Ray with a GPU resource, which the session-wide Ray of the
tests does not declare; run ``benchmarks/gpu_fractions.py --fake-gpus`` for it.)"""
from __future__ import annotations

import pytest
import torch

from tests.benchmarks.scripts import load_script


def test_all_busy_fraction() -> None:
    gpu = load_script("gpu_fractions")
    assert gpu.all_busy_fraction([(0.0, 10.0), (0.0, 10.0)]) == 1.0
    assert gpu.all_busy_fraction([(0.0, 10.0), (2.0, 7.0), (1.0, 9.0)]) == pytest.approx(0.5)
    assert gpu.all_busy_fraction([(0.0, 4.0), (5.0, 10.0)]) == 0.0  # one after the other
    assert gpu.all_busy_fraction([(3.0, 8.0)]) == 1.0


def test_without_cuda_one_line_and_exit_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = load_script("gpu_fractions")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main([]) == 0
    out = capsys.readouterr()
    assert out.err == "" and len(out.out.strip().splitlines()) == 1 and "no CUDA device" in out.out
