"""How an executor configures PyTorch's CUDA kernels (``runtime.device: cuda``).

PyTorch's defaults on an Ampere-or-later GPU let cuDNN run float32 convolutions in TF32
(10-bit mantissa) and pick convolution algorithms by heuristics that include
non-deterministic ones (atomic adds in the weight gradient). Either breaks two promises of
this project on a GPU: vectorized clients give the per-client path's numbers within float32
rounding (``tests/algorithms/test_vectorized.py``: grouped vs per-client convolutions), and
the same scenario gives bit-identical tables whatever the backend or actor count
(``tests/actors/test_cuda_runs.py``). So an executor whose device is CUDA asks for full
float32 convolutions and matrix products and for cuDNN's deterministic algorithms. These
are process-wide PyTorch switches: a Ray executor owns its process; with the inline backend
they also hold for the rest of the driver process. The legacy switches are used (PyTorch
2.9's ``fp32_precision`` settings mixed with code reading ``allow_tf32`` raise an error);
for batches of a few dozen samples the kernels are launch-bound, so the cost in speed is small.
"""
from __future__ import annotations

import torch


def exact_cuda_kernels() -> None:
    """Full float32 (no TF32) for CUDA convolutions and matrix products, and deterministic
    cuDNN convolution algorithms (no autotuning) in this process."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
