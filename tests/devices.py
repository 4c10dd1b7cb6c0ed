"""The devices a test runs on: the CPU always, CUDA where PyTorch sees a GPU.

Tests that need a GPU carry the ``cuda`` marker (registered in ``setup.cfg``) and are skipped
without one, so ``pytest -m cuda`` on a GPU machine runs exactly them and here reports skips.
Where a GPU is visible, the test process configures its CUDA kernels as fedclock's executors
do (:func:`fedclock.actors.cuda_kernels.exact_cuda_kernels`), so tests that call algorithms
directly on the GPU check what a run computes.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, TypeVar

import pytest
import torch

from fedclock.actors.cuda_kernels import exact_cuda_kernels
from fedclock.algorithms.base import ClientData

HAS_CUDA = torch.cuda.is_available()
if HAS_CUDA:
    exact_cuda_kernels()
NEEDS_CUDA = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (PyTorch sees none)")]
"""The marks of a test (or parameter) that needs a GPU."""

DEVICES = ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)]
"""``@pytest.mark.parametrize("device", DEVICES)``: the CPU case, and the same case on the GPU."""

F = TypeVar("F", bound=Callable[..., Any])


def cuda_test(fn: F) -> F:
    """Mark a whole test as needing a GPU."""
    for mark in reversed(NEEDS_CUDA):
        fn = mark(fn)
    return fn


def on_device(data: ClientData, device: str | torch.device) -> ClientData:
    """``data`` with its tensors on ``device`` (what an executor's ``client_data`` gives)."""
    return dataclasses.replace(data, x_train=data.x_train.to(device), y_train=data.y_train.to(device),
                               x_test=data.x_test.to(device), y_test=data.y_test.to(device))
