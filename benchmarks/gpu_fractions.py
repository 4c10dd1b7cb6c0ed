"""GPU fractions: N client executor actors with ``num_gpus=1/N`` sharing one device.

For each N (default 1, 2, 4) the script starts N fedclock client executors as Ray actors
asking for ``1/N`` of the one GPU each, so Ray places all N on the device at once; every
actor then runs the same number of FedAvg client tasks (the FedReCo 5-layer CNN on seeded
random 28x28 images, one local epoch of batch-48 SGD per task, 500 samples per client)
and records when its tasks started and ended. Printed per N: samples/s over all actors
(from the first start to the last end), the speed-up against N=1, and the overlap, the
fraction of that span during which all N actors were training at the same time (near 1:
co-scheduled and concurrent; near 1/N: they ran one after another).

Without a CUDA device the script says so in one line and exits 0. ``--fake-gpus`` instead
declares one GPU resource to Ray (``ray.init(num_gpus=1)``) and trains on the CPU: no
speed figure worth reporting, but it shows whether actors holding fractions of one GPU are
scheduled concurrently (their overlap).

    python benchmarks/gpu_fractions.py [--actors 1 2 4] [--tasks 8] [--fake-gpus]
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Sequence

import numpy as np
import torch

from fedclock.actors.executor import ClientExecutor
from fedclock.actors.task_io import TaskInputs
from fedclock.algorithms.base import Tensors

BATCH = 48
LR = 0.05


class TimedExecutor(ClientExecutor):
    """A client executor that runs several training tasks in a row and reports their span."""

    def timed_train(self, client: int, tasks: int, payload: Tensors) -> tuple[float, float]:
        """Run ``tasks`` client tasks for ``client``; return (start, end) in wall seconds
        (``time.time``: one clock for every process on the machine)."""
        start = time.time()
        for k in range(tasks):
            self.train(TaskInputs(client, k, payload, None, None))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return start, time.time()


def all_busy_fraction(spans: Sequence[tuple[float, float]]) -> float:
    """The fraction of the whole span (first start to last end) during which every one of
    the (start, end) intervals was running: 1 for fully concurrent, 0 if any two are disjoint."""
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    together = min(e for _, e in spans) - max(s for s, _ in spans)
    return max(0.0, together) / (last - first) if last > first else 1.0


def measure(n: int, tasks: int, fed: Any, algorithm: Any, payload: Tensors, device: str) -> tuple[float, float]:
    """Samples/s over ``n`` actors holding ``1/n`` GPU each, and their all-busy overlap."""
    import ray

    remote = ray.remote(TimedExecutor).options(num_gpus=1.0 / n, num_cpus=0)
    actors = [remote.remote(1) for _ in range(n)]
    try:
        fed_h, alg_h = ray.put(fed), ray.put(algorithm)
        ray.get([a.setup.remote(fed_h, alg_h, 0, device) for a in actors])
        ray.get([a.timed_train.remote(i, 1, payload) for i, a in enumerate(actors)])  # warm-up
        spans = ray.get([a.timed_train.remote(i, tasks, payload) for i, a in enumerate(actors)])
    finally:
        for a in actors:
            ray.kill(a)
    samples = n * tasks * fed.client_data(0).num_train
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    return samples / wall, all_busy_fraction(spans)


def make_federation(clients: int, samples: int) -> Any:
    """Seeded random 28x28 images, 10 classes, ``samples`` training samples per client."""
    from fedclock.scenarios.data.federation import Federation

    gen = torch.Generator().manual_seed(0)
    n = clients * samples
    train = [np.arange(c * samples, (c + 1) * samples, dtype=np.int64) for c in range(clients)]
    return Federation(x=torch.randn(n, 1, 28, 28, generator=gen), y=torch.randint(0, 10, (n,), generator=gen),
                      client_train=train, client_test=[np.zeros(0, dtype=np.int64)] * clients,
                      x_test=torch.zeros(0, 1, 28, 28), y_test=torch.zeros(0, dtype=torch.int64), num_classes=10,
                      dataset_name="random28")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--tasks", type=int, default=8, help="client tasks per actor (each 500 samples)")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--fake-gpus", action="store_true",
                        help="declare one fake GPU to Ray and train on the CPU (checks co-scheduling only)")
    args = parser.parse_args(argv)
    if not args.fake_gpus and not torch.cuda.is_available():
        print("gpu_fractions: no CUDA device on this machine, nothing measured "
              "(run it where a GPU is visible, or with --fake-gpus to check co-scheduling on the CPU)")
        return 0
    import os

    import ray

    from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
    from fedclock.algorithms.models import ModelFactory

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_gpus=1 if args.fake_gpus else None, include_dashboard=False, logging_level="ERROR")
    try:
        device = "cpu" if args.fake_gpus else "cuda"
        fed = make_federation(max(args.actors), args.samples)
        algorithm = FedAvg(FedAvgParams(lr=LR, batch_size=BATCH, local_epochs=1),
                           ModelFactory("cnn5", (1, 28, 28), 10))
        algorithm.num_clients = fed.num_clients
        payload = algorithm.payload_for(algorithm.init_server(torch.Generator().manual_seed(0)), 0)
        where = "1 fake GPU, training on the CPU" if args.fake_gpus else torch.cuda.get_device_name(0)
        print(f"device: {where}; {args.tasks} tasks x {args.samples} samples per actor")
        base = None
        for n in args.actors:
            rate, overlap = measure(n, args.tasks, fed, algorithm, payload, device)
            base = rate if base is None else base
            print(f"N={n} num_gpus={1 / n:.3g}: {rate:.0f} samples/s, speed-up vs N={args.actors[0]} "
                  f"{rate / base:.2f}x, overlap {overlap:.2f}", flush=True)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
