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
device to finish; on CUDA both run the kernels a fedclock executor runs there:
:func:`fedclock.actors.cuda_kernels.exact_cuda_kernels`). Configurations (``model:side:hidden``): the MLP with the
project's default hidden layer on 8x8 inputs (digits) and the FedAvg paper's 784-200-200-10
"2NN" on 28x28, the SPFL/PLGA CNN on 8x8 and 28x28, and the FedReCo 5-layer CNN (``cnn5``)
on 8x8. Each side runs once as a warm-up (2 steps), then is timed once; both sides must end
at the same weights (the largest difference is printed). One line per configuration:
samples/s of both sides (wall time) and the ratio vectorized / plain, and the ratio of the
CPU seconds this process spent on each side (steadier than wall time on a shared machine).

With ``--algorithms`` (e.g. ``fedavg,fedprox,scaffold,fedcm,ditto,fedavg_ft``) it times
instead, per algorithm and configuration, the library's own client step: each client's
``client_update`` one after the other (what an executor runs without vectorizing) against
:func:`~fedclock.algorithms.vectorized.client_updates` on the K clients (with a nonzero
server vector and, for SCAFFOLD and Ditto, client states from a first task); and the
personalized evaluation of the K clients (``evaluate_client`` one by one against
:func:`~fedclock.algorithms.vectorized_eval.evaluate_clients`) for the algorithms that
evaluate vectorized (Ditto's personal models, FedAvg-FT's fine-tune-then-test). Each side
runs once untimed, then three times, alternately with the other; the fastest time counts.

    python benchmarks/vectorized.py [--clients 32] [--samples 100] [--batch 10] [--threads 1] [--device cpu]
                                    [--configs mlp:8:128,mlp:28:200-200,spfl_cnn_padded:8,spfl_cnn:28,cnn5:8]
                                    [--algorithms fedavg,scaffold,...]
"""
from __future__ import annotations

import argparse
import contextlib
import time
from typing import Callable

import torch

from fedclock.actors.cuda_kernels import exact_cuda_kernels
from fedclock.algorithms.base import AlgorithmParams, ClientData
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import batches, seed_dropout
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
        with contextlib.ExitStack() as seeded:
            seed_dropout(seeded, model, rng, start.device)  # a model with dropout: the masks local_sgd draws
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


def _alternating(plain: Callable[[], object], vec: Callable[[], object], device: torch.device,
                 rounds: int = 3) -> tuple[object, float, float, object, float, float]:
    """Both sides once untimed, then ``rounds`` times each, alternately (a shared machine's
    load then weighs on both alike); the fastest wall time and CPU time of each side."""
    plain(), vec()
    best = [float("inf")] * 4
    for _ in range(rounds):
        p_out, p_s, p_c = _timed(plain, device)
        v_out, v_s, v_c = _timed(vec, device)
        best = [min(a, b) for a, b in zip(best, [p_s, p_c, v_s, v_c])]
    return p_out, best[0], best[1], v_out, best[2], best[3]


def _timed(fn: Callable[[], object], device: torch.device) -> tuple[object, float, float]:
    wait(device)
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    wait(device)
    return out, time.perf_counter() - t0, time.process_time() - c0


def algorithm_lines(name: str, config: str, factory: ModelFactory, data: list[ClientData], batch: int,
                    device: torch.device) -> list[str]:
    """One line for the training step of algorithm ``name`` on K clients (sequential
    ``client_update`` vs ``client_updates``) and, when it evaluates vectorized, one for its
    personalized evaluation; each ends with the largest difference of the two sides."""
    from fedclock.algorithms.registry import get_algorithm
    from fedclock.algorithms.vectorized import client_updates
    from fedclock.algorithms.vectorized_eval import evaluate_clients, evaluates_vectorized
    from fedclock.scheduling.rng import Stream, torch_rng

    cls = get_algorithm(name)
    alg = cls(cls.Params(lr=LR, batch_size=batch), factory).to(device)
    alg.num_clients = len(data)
    state = alg.init_server(torch.Generator().manual_seed(0))
    payload = dict(alg.payload_for(state, 0))
    vector = getattr(cls, "server_vector", None)
    if vector in payload:  # a server vector as after some rounds
        payload[vector] = 0.01 * torch.randn(factory.num_params, generator=torch.Generator().manual_seed(1))
    payload = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in payload.items()}
    k = len(data)
    first = client_updates(alg, [payload] * k, [None] * k, data, [torch_rng(0, Stream.TASK, c, 0) for c in range(k)])
    states = [r.state for r in first]
    rngs = lambda: [torch_rng(0, Stream.TASK, c, 1) for c in range(k)]  # noqa: E731
    seq, plain_s, plain_c, vec, vec_s, vec_c = _alternating(
        lambda: [alg.client_update(payload, s, d, r) for s, d, r in zip(states, data, rngs())],
        lambda: client_updates(alg, [payload] * k, states, data, rngs()), device)
    # uploads and kept states (the local baseline uploads nothing; its result is its state)
    diff = max((float((x[key] - y[key]).abs().max()) for a, b in zip(seq, vec)  # type: ignore[attr-defined]
                for x, y in ((a.upload, b.upload), (a.state or {}, b.state or {})) for key in x), default=0.0)
    total = sum(alg.local_steps(d.num_train) * min(alg.params.batch_size, d.num_train) for d in data)
    lines = [f"{name:10s} {config:14s} train  sequential {plain_s:6.2f} s  vectorized {vec_s:6.2f} s  "
             f"ratio {plain_s / vec_s:5.2f}x  (CPU-time ratio {plain_c / vec_c:5.2f}x, {total / vec_s:,.0f} "
             f"samples/s)  max|d upload, state|={diff:.1e}"]
    if evaluates_vectorized(alg):
        evals, e_plain, _, batched, e_vec, _ = _alternating(
            lambda: [alg.evaluate_client(payload, s, d, 256) for s, d in zip(states, data)],
            lambda: evaluate_clients(alg, [payload] * k, states, data, 256), device)
        gap = max(abs(a.loss_sum - b.loss_sum) for a, b in zip(evals, batched))  # type: ignore[attr-defined]
        same = all(a.correct == b.correct for a, b in zip(evals, batched))  # type: ignore[attr-defined]
        lines.append(f"{name:10s} {config:14s} eval   sequential {e_plain:6.2f} s  vectorized {e_vec:6.2f} s  "
                     f"ratio {e_plain / e_vec:5.2f}x  same counts: {same}  max|d loss_sum|={gap:.1e}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32, help="K, clients trained at once")
    parser.add_argument("--samples", type=int, default=100, help="training samples per client")
    parser.add_argument("--batch", type=int, default=10, help="mini-batch size B")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (both sides)")
    parser.add_argument("--configs", default="mlp:8:128,mlp:28:200-200,spfl_cnn_padded:8,spfl_cnn:28,cnn5:8",
                        help="model:side[:hidden widths joined by -]")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    parser.add_argument("--algorithms", default="", help="comma-separated algorithm names: time their client "
                        "steps (and vectorized evaluations) instead of the bare SGD")
    parser.add_argument("--test-samples", type=int, default=50, help="test samples per client (--algorithms)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.exit(2, "vectorized.py: error: --device cuda: no CUDA device here\n")
    if device.type == "cuda":  # the kernels a fedclock executor runs on CUDA (full float32, deterministic cuDNN)
        exact_cuda_kernels()
    torch.set_num_threads(args.threads)
    steps = -(-args.samples // args.batch)
    print(f"K={args.clients} clients x {args.samples} samples, B={args.batch}, 1 local epoch = {steps} steps, "
          f"SGD lr {LR}; torch {torch.__version__}, {torch.get_num_threads()} thread(s), device "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}", flush=True)
    total = args.clients * steps * min(args.batch, args.samples)
    for config in args.configs.split(","):
        name, side, *rest = config.split(":")
        hidden = tuple(int(h) for h in rest[0].split("-")) if rest else (128,)
        factory = ModelFactory(name, (1, int(side), int(side)), 10, hidden=hidden)
        if args.algorithms:
            data = make_clients(args.clients, args.samples + args.test_samples, int(side), device)
            data = [ClientData(d.client, d.x_train[:args.samples], d.y_train[:args.samples],
                               d.x_train[args.samples:], d.y_train[args.samples:]) for d in data]
            for algorithm in args.algorithms.split(","):
                for line in algorithm_lines(algorithm, config, factory, data, args.batch, device):
                    print(line, flush=True)
            continue
        data = make_clients(args.clients, args.samples, int(side), device)
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
