"""Vectorized clients: samples/s of K clients' local SGD, plain loop vs vectorized execution.

Work (both sides): K clients, each with ``--samples`` seeded random training samples
(single-channel images of the configuration's side, 10 classes), one local epoch of
mini-batch SGD (batch size ``--batch``, FedAvg's B=10 by default; lr 0.05) from the same
start weights, every client with its own seeded batch order.

* plain: the ordinary single-process PyTorch loop, client after client (one model, a fresh
  ``torch.optim.SGD`` per client, ``zero_grad`` / forward / cross-entropy / ``backward`` /
  ``step`` per batch).
* vectorized: :func:`fedclock.algorithms.vectorized.vectorized_local_sgd` on the same K
  tasks (what an executor runs for a group of K clients with ``runtime.vectorize: K``).

Both sides use ``--threads`` PyTorch threads (default 1, what a fedclock executor uses with
``threads_per_actor: 1``) and run on ``--device`` (default ``cpu``; ``cuda`` puts the model,
the data and the start weights on the GPU for both sides, and the timings wait for the
device to finish). Configurations (``model:side:hidden``): the MLP with the
project's default hidden layer on 8x8 inputs (digits) and the FedAvg paper's 784-200-200-10
"2NN" on 28x28, the SPFL/PLGA CNN on 8x8 and 28x28, and the FedReCo 5-layer CNN (``cnn5``)
on 8x8. Each side runs once as a warm-up (2 steps), then is timed once; both sides must end
at the same weights (the largest difference is printed). One line per configuration:
samples/s of both sides (wall time) and the ratio vectorized / plain, and the ratio of the
CPU seconds this process spent on each side (steadier than wall time on a shared machine).

    python benchmarks/vectorized.py [--clients 32] [--samples 100] [--batch 10] [--threads 1] [--device cpu]
                                    [--configs mlp:8:128,mlp:28:200-200,spfl_cnn:8,spfl_cnn:28,cnn5:8]
"""
from __future__ import annotations

import argparse
import time

import torch

from fedclock.algorithms.base import AlgorithmParams, ClientData
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import batches
from fedclock.algorithms.vectorized import SGDTask, vectorized_local_sgd

LR = 0.05


def make_clients(clients: int, samples: int, side: int, device: torch.device, seed: int = 0) -> list[ClientData]:
    """Seeded random ``side`` x ``side`` images, 10 classes, ``samples`` per client, on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for c in range(clients):
        x = torch.randn(samples, 1, side, side, generator=gen).to(device)
        y = torch.randint(0, 10, (samples,), generator=gen).to(device)
        out.append(ClientData(c, x, y, x[:0], y[:0]))
    return out


def wait(device: torch.device) -> None:
    """Let queued device work finish (so that wall times count it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_loop(factory: ModelFactory, start: torch.Tensor, data: list[ClientData], batch: int,
               steps: int) -> list[torch.Tensor]:
    """The ordinary loop, client after client; returns each client's final flat weights."""
    model = factory.build().to(start.device)
    out = []
    for d in data:
        factory.load_flat(model, start)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        rng = torch.Generator().manual_seed(1000 + d.client)
        for idx in batches(d.num_train, batch, steps, rng):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(d.x_train[idx]), d.y_train[idx])
            loss.backward()
            opt.step()
        out.append(factory.flatten(model))
    return out


def vectorized(factory: ModelFactory, start: torch.Tensor, data: list[ClientData], batch: int,
               steps: int) -> list[torch.Tensor]:
    """The same work through :func:`vectorized_local_sgd`."""
    params = AlgorithmParams(lr=LR, batch_size=batch)
    tasks = [SGDTask(start, d, params, torch.Generator().manual_seed(1000 + d.client), steps) for d in data]
    return [w for w, _ in vectorized_local_sgd(factory.build().to(start.device), factory, tasks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32, help="K, clients trained at once")
    parser.add_argument("--samples", type=int, default=100, help="training samples per client")
    parser.add_argument("--batch", type=int, default=10, help="mini-batch size B")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (both sides)")
    parser.add_argument("--configs", default="mlp:8:128,mlp:28:200-200,spfl_cnn:8,spfl_cnn:28,cnn5:8",
                        help="model:side[:hidden widths joined by -]")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.exit(2, "vectorized.py: error: --device cuda: no CUDA device here\n")
    torch.set_num_threads(args.threads)
    steps = -(-args.samples // args.batch)
    print(f"K={args.clients} clients x {args.samples} samples, B={args.batch}, 1 local epoch = {steps} steps, "
          f"SGD lr {LR}; torch {torch.__version__}, {torch.get_num_threads()} thread(s), device "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}", flush=True)
    total = args.clients * steps * min(args.batch, args.samples)
    for config in args.configs.split(","):
        name, side, *rest = config.split(":")
        hidden = tuple(int(h) for h in rest[0].split("-")) if rest else (128,)
        data = make_clients(args.clients, args.samples, int(side), device)
        factory = ModelFactory(name, (1, int(side), int(side)), 10, hidden=hidden)
        start = factory.initial_weights(torch.Generator().manual_seed(0)).to(device)
        plain_loop(factory, start, data, args.batch, 2)
        vectorized(factory, start, data, args.batch, 2)
        wait(device)
        t0, c0 = time.perf_counter(), time.process_time()
        plain_w = plain_loop(factory, start, data, args.batch, steps)
        wait(device)
        t1, c1 = time.perf_counter(), time.process_time()
        vec_w = vectorized(factory, start, data, args.batch, steps)
        wait(device)
        t2, c2 = time.perf_counter(), time.process_time()
        plain_s, vec_s = t1 - t0, t2 - t1
        diff = max(float((a - b).abs().max()) for a, b in zip(plain_w, vec_w))
        print(f"{config:16s} params={factory.num_params:>9,d}  plain {total / plain_s:>8,.0f} samples/s "
              f"({plain_s:6.2f} s)  vectorized {total / vec_s:>8,.0f} samples/s ({vec_s:6.2f} s)  "
              f"ratio {plain_s / vec_s:5.2f}x  (CPU-time ratio {(c1 - c0) / (c2 - c1):5.2f}x)  max|dw|={diff:.1e}",
              flush=True)


if __name__ == "__main__":
    main()
