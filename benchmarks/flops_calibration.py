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
"""
from __future__ import annotations

import argparse
import statistics
import time
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


MODELS: dict[str, tuple[ModelFactory, torch.dtype]] = {
    "mlp 784-200-200": (ModelFactory("mlp", (1, 28, 28), 10, (200, 200)), torch.float32),
    "cnn5 32px": (ModelFactory("cnn5", (3, 32, 32), 10), torch.float32),
    "resnet18_gn 32px": (ModelFactory("resnet18_gn", (3, 32, 32), 10), torch.float32),
    "char lstm 80x256": (ModelFactory("char_lstm", (80,), 80, builder=char_lstm), torch.long),
}


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sustained_flops(repeats: int, n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / median_seconds(lambda: a @ b, repeats)


def step_seconds(factory: ModelFactory, dtype: torch.dtype, batch: int, repeats: int) -> tuple[int, float]:
    alg = FedAvg(FedAvg.Params(batch_size=batch, local_steps=1), factory)
    flops = count_task(alg, batch, 1, dtype).flops
    shape = (batch, *factory.input_shape)
    x = torch.randint(0, factory.num_classes, shape) if dtype == torch.long else torch.randn(shape)
    y = torch.randint(0, factory.num_classes, (batch,))
    data = ClientData(0, x, y, x[:0], y[:0])
    start = factory.initial_weights(torch.Generator().manual_seed(0))
    rng = torch.Generator().manual_seed(1)
    seconds = median_seconds(lambda: local_sgd(alg.workspace, factory, start, data, alg.params, rng, 1), repeats)
    return flops, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rate = sustained_flops(args.repeats)
    print(f"sustained float32 matmul: {rate / 1e9:.2f} GFLOP/s (one thread)")
    print("| model | GFLOP per step | measured s | predicted s | measured / predicted |")
    print("|---|---|---|---|---|")
    ratios = []
    for name, (factory, dtype) in MODELS.items():
        flops, seconds = step_seconds(factory, dtype, args.batch, args.repeats)
        predicted = flops / rate
        ratios.append(seconds / predicted)
        print(f"| {name} | {flops / 1e9:.4f} | {seconds:.4f} | {predicted:.4f} | {seconds / predicted:.2f} |",
              flush=True)
    print(f"spread (largest / smallest ratio): {max(ratios) / min(ratios):.2f}x")


if __name__ == "__main__":
    main()
