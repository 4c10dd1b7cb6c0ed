"""Counted FLOPs against measured time: is ``FLOPs / sustained FLOP/s`` a good predictor of
one local step's wall time on this machine?

For each model, one FedAvg local step (forward, cross-entropy, backward, SGD update) on a
batch of ``--batch`` random samples: its FLOPs are counted the way the clock counts them
(:func:`fedclock.algorithms.flop_count.count_task` on meta tensors); its seconds are
measured on real tensors (median of ``--repeats`` steps after one warm-up). The machine's
sustained FLOP/s is measured on a square float32 matrix product (the kind of operation the
counter counts), so predicted seconds = counted FLOPs / sustained FLOP/s, and the ratio
measured / predicted says how far each model is from the matmul's efficiency. The spread
(largest ratio over smallest) is what a single GFLOP/s figure per device gets wrong between
models.

Models: the MLP (784-200-200-10), FedReCo's 5-layer CNN and ResNet-18-GN at 3x32x32, and a
small character LSTM written here (embedding 8, one LSTM layer of 256, sequence 80, vocabulary
80; fedclock ships no LSTM model yet). One thread::

    nice -n 10 python benchmarks/flops_calibration.py --repeats 3

On a GPU (``--device cuda``): the same four models on the device, each timed call running
``--steps`` local steps (default 20) after two warm-up calls, with ``torch.cuda.synchronize``
before and after every timed call, and the sustained rate from an 8192-square float32 matmul
(PyTorch's default precision settings, printed with the report: TF32 off for matmuls, on for
cuDNN convolutions); ``--out FILE`` writes the report there too (under 90 s on an H100)::

    python benchmarks/flops_calibration.py --device cuda --repeats 5 --out $OUT/flops_calibration_cuda.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.flop_count import count_task
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import local_sgd
from fedclock.algorithms.base import ClientData


class CharLSTM(nn.Module):
    """Embedding + one LSTM layer (body), linear head on the last step's output."""

    def __init__(self, vocab: int = 80, embed: int = 8, hidden: int = 256) -> None:
        super().__init__()
        self.body = _LSTMBody(vocab, embed, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class _LSTMBody(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return out[:, -1]


def char_lstm(input_shape: Sequence[int], num_classes: int) -> nn.Module:
    return CharLSTM(vocab=num_classes)


CPU = torch.device("cpu")

MODELS: dict[str, tuple[ModelFactory, torch.dtype]] = {
    "mlp 784-200-200": (ModelFactory("mlp", (1, 28, 28), 10, (200, 200)), torch.float32),
    "cnn5 32px": (ModelFactory("cnn5", (3, 32, 32), 10), torch.float32),
    "resnet18_gn 32px": (ModelFactory("resnet18_gn", (3, 32, 32), 10), torch.float32),
    "char lstm 80x256": (ModelFactory("char_lstm", (80,), 80, builder=char_lstm), torch.long),
}


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device = CPU, warmup: int = 1) -> float:
    """Median wall seconds of ``fn`` over ``repeats`` calls after ``warmup`` calls, the device
    synchronized before and after each timed call."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sustained_flops(repeats: int, n: int = 1024, device: torch.device = CPU) -> float:
    """FLOP/s of a square float32 matrix product of side ``n`` (``2 n^3`` FLOPs)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    return 2 * n**3 / median_seconds(lambda: a @ b, repeats, device, warmup=3 if device.type == "cuda" else 1)


def step_seconds(factory: ModelFactory, dtype: torch.dtype, batch: int, repeats: int,
                 device: torch.device = CPU, steps: int = 1) -> tuple[int, float]:
    """(counted FLOPs of one FedAvg local step, measured seconds per step): ``local_sgd`` runs
    ``steps`` steps per timed call (the returned CPU copy of the weights amortized over them)."""
    alg = FedAvg(FedAvg.Params(batch_size=batch, local_steps=1), factory)
    flops = count_task(alg, batch, 1, dtype).flops
    shape = (batch, *factory.input_shape)
    x = torch.randint(0, factory.num_classes, shape) if dtype == torch.long else torch.randn(shape)
    y = torch.randint(0, factory.num_classes, (batch,))
    x, y = x.to(device), y.to(device)
    data = ClientData(0, x, y, x[:0], y[:0])
    start = factory.initial_weights(torch.Generator().manual_seed(0)).to(device)
    model = alg.workspace.to(device)
    rng = torch.Generator().manual_seed(1)
    warmup = 2 if device.type == "cuda" else 1
    seconds = median_seconds(lambda: local_sgd(model, factory, start, data, alg.params, rng, steps), repeats,
                             device, warmup)
    return flops, seconds / steps


def calibration(device: torch.device, batch: int, repeats: int, steps: int, matmul: int,
                models: dict[str, tuple[ModelFactory, torch.dtype]] = MODELS) -> list[str]:
    """The report's lines: the sustained rate, then one table row per model and the spread."""
    rate = sustained_flops(repeats, matmul, device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    lines = [f"device: {where}; torch {torch.__version__}; batch {batch}; median of {repeats} x {steps} step(s)"
             + (f"; TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, cuDNN {torch.backends.cudnn.allow_tf32}"
                if device.type == "cuda" else ""),
             f"sustained float32 matmul ({matmul}x{matmul}): {rate / 1e9:.2f} GFLOP/s",
             "| model | GFLOP per step | measured s | predicted s | measured / predicted |", "|---|---|---|---|---|"]
    ratios = []
    for name, (factory, dtype) in models.items():
        flops, seconds = step_seconds(factory, dtype, batch, repeats, device, steps)
        predicted = flops / rate
        ratios.append(seconds / predicted)
        lines.append(f"| {name} | {flops / 1e9:.4f} | {seconds:.6f} | {predicted:.6f} | {seconds / predicted:.2f} |")
    lines.append(f"spread (largest / smallest ratio): {max(ratios) / min(ratios):.2f}x")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu (one thread) or cuda")
    parser.add_argument("--steps", type=int, default=None, help="local steps per timed call (default: 1 on the "
                        "CPU, 20 on a GPU)")
    parser.add_argument("--matmul", type=int, default=None, help="side of the matmul that measures the sustained "
                        "rate (default: 1024 on the CPU, 8192 on a GPU)")
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    parser.add_argument("--models", default=None, help="comma-separated model names to run (default: all four: "
                        + ", ".join(MODELS) + ")")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch finds no GPU here")
    torch.set_num_threads(1)
    gpu = device.type == "cuda"
    chosen = MODELS if args.models is None else {n: MODELS[n] for n in args.models.split(",") if n in MODELS}
    if not chosen:
        parser.error(f"--models: none of {args.models!r} (allowed: {', '.join(MODELS)})")
    lines = calibration(device, args.batch, args.repeats, args.steps or (20 if gpu else 1),
                        args.matmul or (8192 if gpu else 1024), chosen)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
