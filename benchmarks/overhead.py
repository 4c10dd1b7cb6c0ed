"""Simulator overhead: fedclock vs a plain PyTorch loop doing the same SGD steps.

Work (both sides): FedAvg of the FedReCo 5-layer CNN on 28x28 single-channel inputs, 20
clients x 500 samples, 5 rounds, every client every round, one local epoch of batch-48 SGD
(11 steps of 48 samples per client and round), sample-weighted averaging, one evaluation of
the global model on a 2,000-sample test set before and after training.

* plain: one process, one model, PyTorch using all cores (its default).
* fedclock: sync mode through the Ray runtime, pooled executor actors (one per core, one
  thread each), the server actor holding the model.

The data are seeded random images (this measures speed, not accuracy). The fedclock run is
timed with its actors already started (a one-round warm-up run starts them); the cold
start-up (Ray and actor start) is printed separately. The last line is
``overhead_ratio = <fedclock wall / plain wall>``; because the machine may be shared, the
CPU seconds of both sides are printed too (plain: this process; fedclock: this process and
every descendant, i.e. the Ray daemons and actors, from /proc) with their ratio.

    python benchmarks/overhead.py [--rounds 5] [--clients 20] [--samples 500]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import batches
from fedclock.scenarios.federation import Federation
from fedclock.scenarios.loader import parse_suite
from proctree import tree_cpu_seconds  # benchmarks/ is the script's folder

BATCH = 48


LR = 0.05


def make_federation(clients: int, samples: int, seed: int = 0) -> Federation:
    """Seeded random 28x28 images, 10 classes; each client gets ``samples`` training samples."""
    gen = torch.Generator().manual_seed(seed)
    n = clients * samples
    x = torch.randn(n, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    x_test = torch.randn(2000, 1, 28, 28, generator=gen)
    y_test = torch.randint(0, 10, (2000,), generator=gen)
    train = [np.arange(c * samples, (c + 1) * samples, dtype=np.int64) for c in range(clients)]
    test = [np.zeros(0, dtype=np.int64) for _ in range(clients)]
    return Federation(x=x, y=y, client_train=train, client_test=test, x_test=x_test, y_test=y_test, num_classes=10,
                      dataset_name="random28")


def plain_fedavg(fed: Federation, rounds: int) -> tuple[float, float]:
    """The same FedAvg work in one process; returns (wall seconds, CPU seconds)."""
    factory = ModelFactory("cnn5", (1, 28, 28), 10)
    model = factory.build()
    start, cpu = time.perf_counter(), time.process_time()
    weights = factory.initial_weights(torch.Generator().manual_seed(0))
    _evaluate(model, factory, weights, fed)
    sizes = fed.client_sizes()
    steps = -(-int(sizes[0]) // BATCH)
    for r in range(rounds):
        total = torch.zeros_like(weights)
        for c in range(fed.num_clients):
            factory.load_flat(model, weights)
            opt = torch.optim.SGD(model.parameters(), lr=LR)
            data = fed.client_data(c)
            rng = torch.Generator().manual_seed(r * 1000 + c)
            for idx in batches(data.num_train, BATCH, steps, rng):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
                loss.backward()
                opt.step()
            total += (factory.flatten(model) - weights) * (sizes[c] / sizes.sum())
        weights = weights + total
    _evaluate(model, factory, weights, fed)
    return time.perf_counter() - start, time.process_time() - cpu


@torch.no_grad()
def _evaluate(model: torch.nn.Module, factory: ModelFactory, weights: torch.Tensor, fed: Federation) -> float:
    factory.load_flat(model, weights)
    model.eval()
    correct = sum(int((model(fed.x_test[i:i + 2048]).argmax(1) == fed.y_test[i:i + 2048]).sum())
                  for i in range(0, len(fed.y_test), 2048))
    model.train()
    return correct / len(fed.y_test)


def fedclock_fedavg(fed: Federation, rounds: int, actors: int) -> tuple[float, float, float]:
    """The same work through fedclock; returns (warm wall seconds, cold start-up seconds,
    CPU seconds of the warm run over this process and the Ray processes it started)."""
    from fedclock.actors.runtime import Runtime
    from fedclock.scenarios.experiment import run_scenario

    def scenario(n_rounds: int):  # noqa: ANN202
        return parse_suite({
            "name": "overhead", "model": {"name": "cnn5"},
            "population": {"num_clients": fed.num_clients},
            "algorithm": {"name": "fedavg", "lr": LR, "batch_size": BATCH, "local_epochs": 1},
            "mode": {"type": "sync"}, "stop": {"rounds": n_rounds},
            "evaluation": {"every": 10_000, "personalized": False},
            "runtime": {"backend": "ray", "num_actors": actors, "placement": "pooled"},
            "output": {"flush_every_s": 60, "progress": False},
        }, "overhead").runs[0]

    cold = time.perf_counter()
    runtime = Runtime("ray")
    with tempfile.TemporaryDirectory() as tmp:
        run_scenario(scenario(1), runtime, Path(tmp) / "warmup", federation=fed)
        cold = time.perf_counter() - cold
        start, cpu = time.perf_counter(), tree_cpu_seconds()
        run_scenario(scenario(rounds), runtime, Path(tmp) / "run", federation=fed)
        warm, cpu = time.perf_counter() - start, tree_cpu_seconds() - cpu
    runtime.close()
    return warm, cold, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--actors", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    fed = make_federation(args.clients, args.samples)
    plain, plain_cpu = plain_fedavg(fed, args.rounds)
    samples = args.rounds * args.clients * (-(-args.samples // BATCH)) * BATCH
    print(f"plain PyTorch loop: {plain:.2f} s ({samples / plain:.0f} samples/s, {torch.get_num_threads()} threads), CPU {plain_cpu:.2f} s")
    warm, cold, cpu = fedclock_fedavg(fed, args.rounds, args.actors)
    print(f"fedclock (sync, {args.actors} pooled actors x 1 thread): {warm:.2f} s ({samples / warm:.0f} samples/s); "
          f"cold start-up (Ray + actors + 1-round warm-up) {cold:.2f} s; CPU {cpu:.2f} s")
    print(f"cpu_ratio = {cpu / plain_cpu:.3f}")
    print(f"overhead_ratio = {warm / plain:.3f}")


if __name__ == "__main__":
    main()
