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
every descendant, i.e. the Ray daemons and actors, from /proc, split by role: driver,
server actor, executor actors, other Ray processes) with their ratio. With ``--repeats R``
the two sides run alternately R times (one warm Ray runtime) and the ratios printed last
are the medians of the R per-repeat ratios.

    python benchmarks/overhead.py [--rounds 5] [--clients 20] [--samples 500] [--repeats 1]
                                  [--skip-plain] [--profile driver.prof]
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
from fedclock.scenarios.data.federation import Federation
from fedclock.scenarios.loader import parse_suite
from proctree import tree_cpu_by_role  # benchmarks/ is the script's folder

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


class FedclockBench:
    """The same work through fedclock, on one Ray runtime kept warm across repeats."""

    def __init__(self, fed: Federation, actors: int) -> None:
        from fedclock.actors.runtime import Runtime
        from fedclock.scenarios.experiment import run_scenario

        self.fed, self.actors, self._run_scenario = fed, actors, run_scenario
        self._tmp = tempfile.TemporaryDirectory()
        self.runs = 0
        cold = time.perf_counter()
        self.runtime = Runtime("ray")
        self._once(1)
        self.cold = time.perf_counter() - cold
        """Cold start-up: Ray, the actors and a 1-round warm-up run."""

    def _scenario(self, n_rounds: int):
        return parse_suite({
            "name": "overhead", "model": {"name": "cnn5"},
            "population": {"num_clients": self.fed.num_clients},
            "algorithm": {"name": "fedavg", "lr": LR, "batch_size": BATCH, "local_epochs": 1},
            "mode": {"type": "sync"}, "stop": {"rounds": n_rounds},
            "evaluation": {"every": 10_000, "personalized": False},
            "runtime": {"backend": "ray", "num_actors": self.actors, "placement": "pooled"},
            "output": {"flush_every_s": 60, "progress": False},
        }, "overhead").runs[0]

    def _once(self, rounds: int) -> None:
        self.runs += 1
        self._run_scenario(self._scenario(rounds), self.runtime, Path(self._tmp.name) / f"run{self.runs}",
                           federation=self.fed)

    def run(self, rounds: int, profile: str | None = None) -> tuple[float, dict[str, float]]:
        """A warm run: (wall seconds, CPU seconds by role over this process and the Ray
        processes it started — see :func:`proctree.tree_cpu_by_role`)."""
        before = tree_cpu_by_role()
        start = time.perf_counter()
        if profile:
            import cProfile

            cProfile.runctx("self._once(rounds)", globals(), {"self": self, "rounds": rounds}, profile)
        else:
            self._once(rounds)
        wall = time.perf_counter() - start
        after = tree_cpu_by_role()
        return wall, {k: after[k] - before.get(k, 0.0) for k in after}

    def close(self) -> None:
        self.runtime.close()
        self._tmp.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--actors", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=1, help="run plain and fedclock alternately this many times "
                        "and print the median ratios")
    parser.add_argument("--skip-plain", action="store_true", help="time fedclock only (per-role CPU figures)")
    parser.add_argument("--profile", default=None, help="write a cProfile of the driver's last warm run here")
    args = parser.parse_args()
    fed = make_federation(args.clients, args.samples)
    samples = args.rounds * args.clients * (-(-args.samples // BATCH)) * BATCH
    bench = FedclockBench(fed, args.actors)
    print(f"fedclock cold start-up (Ray + actors + 1-round warm-up) {bench.cold:.2f} s", flush=True)
    walls, cpus, plains, plain_cpus = [], [], [], []
    try:
        for r in range(args.repeats):
            if not args.skip_plain:
                plain, plain_cpu = plain_fedavg(fed, args.rounds)
                plains.append(plain)
                plain_cpus.append(plain_cpu)
                print(f"[{r + 1}] plain PyTorch loop: {plain:.2f} s ({samples / plain:.0f} samples/s, "
                      f"{torch.get_num_threads()} threads), CPU {plain_cpu:.2f} s", flush=True)
            warm, roles = bench.run(args.rounds, args.profile if r == args.repeats - 1 else None)
            walls.append(warm)
            cpus.append(sum(roles.values()))
            parts = ", ".join(f"{k} {v:.2f}" for k, v in roles.items())
            print(f"[{r + 1}] fedclock (sync, {args.actors} pooled actors x 1 thread): {warm:.2f} s "
                  f"({samples / warm:.0f} samples/s); CPU {cpus[-1]:.2f} s ({parts})", flush=True)
            if plains:
                print(f"[{r + 1}] ratios: wall {warm / plains[-1]:.3f}, cpu {cpus[-1] / plain_cpus[-1]:.3f}",
                      flush=True)
    finally:
        bench.close()
    if plains:
        print(f"cpu_ratio = {float(np.median(np.array(cpus) / np.array(plain_cpus))):.3f}")
        print(f"overhead_ratio = {float(np.median(np.array(walls) / np.array(plains))):.3f}")
    else:
        print(f"fedclock median wall {float(np.median(walls)):.2f} s, median CPU {float(np.median(cpus)):.2f} s")


if __name__ == "__main__":
    main()
