"""End to end: a run as the user starts it (a whole cold process), against the plain loop and Flower.

Two workloads of FedAvg, every client every round, one local epoch of SGD (lr 0.05),
sample-weighted averaging, the global model evaluated on the 2,000-sample test set before
and after training:

* ``cnn5``: fedclock's ``cnn5``, FedReCo's 5-layer CNN (two 5x5 convolutions with padding 2,
  each with max-pooling, FC 1024, FC 1024, linear head: 4.3 M parameters), 20 clients x 500
  samples, batch 48 (11 steps per task), 5 rounds (before 2026-11-24 the plain loop and
  Flower trained a smaller CNN, FC 512 and head, 1.7 M parameters: the CNN5 figures taken
  before then favoured them);
* ``mlp``: MLP 784-200-200-10, 200 clients x 50 samples, batch 10 (5 steps per task), 10
  rounds.

and, for the accelerator path (issue 35), two CIFAR-10-shaped workloads: 1,000 clients x 50
samples (the 50,000 training images, no client test split), a cohort of 50 per round (the
plain loop takes 50 consecutive clients, fedclock samples them), batch 10 (5 steps per task),
5 rounds, the 10,000-image test set:

* ``cifar_cnn5``: ``cnn5`` on 3x32x32 (vectorizable);
* ``cifar_resnet``: ``resnet18_gn`` (ResNet-18 with GroupNorm, CIFAR stem; not vectorizable).

Their data are seeded random images in CIFAR-10's python pickle format
(``cifar-10-batches-py/data_batch_1..5``, ``test_batch``); ``--tiny``, ``--rounds``,
``--clients``, ``--cohort`` and ``--test-images`` bound their size. ``--device cuda`` trains
the plain loop and fedclock (``runtime.device: cuda``) on the GPU: the Ray backend then runs
``--gpu-actors`` executors each holding that fraction of the GPU (``runtime.num_gpus``), the
inline backend trains in the driver; the plain loop then runs the kernels fedclock's CUDA
executors run (full float32 without TF32, deterministic cuDNN: ``actors/cuda_kernels.py``),
so both sides do the same arithmetic. ``--ray-executors 1,2,4,8,16`` times instead the Ray
backend with each number of single-threaded CPU executors (scaling with cores).
``benchmarks/device_run.sh`` runs both on a GPU machine.

The MNIST data are seeded random images written in the real MNIST on-disk format (gzipped IDX
files under ``<root>/MNIST/raw``) into a temporary folder: 12,500 training and 2,000 test
images, so that the iid partition with the default 20% client test split leaves every
client exactly 500 (cnn5) or 50 (mlp) training samples (checked in ``clients.parquet``).

Each side runs as its own process, timed from before it is started to its exit:

* **plain**: this script with ``--plain``: reads the same files (gzip + NumPy), one model,
  PyTorch with its default threads (``--plain-threads``), the same number of SGD steps of the same batch size
  per client and round (batches drawn like :func:`fedclock.algorithms.training.batches`).
* **fedclock**: ``fedclock run FILE`` on a generated scenario file (sync mode, pooled
  executors, the defaults otherwise), on the Ray backend (one single-threaded executor per
  core, a server actor) and on the inline backend (``runtime.backend: inline``: the same
  executor and server classes in the driver process, one PyTorch thread per core like the
  plain loop), and for ``mlp`` each again with ``runtime.vectorize: 32``. The process runs
  :func:`fedclock.scenarios.cli.main` through this script (``--fedclock``) so that it can
  also report the start-up: seconds from before the process was started to the first task
  the runtime dispatched (``Session.start`` wrapped, nothing else changed).
* **Flower** (with ``--flower-python PATH``, an interpreter with ``flwr[simulation]``): this
  script with ``--flower`` under that interpreter: Flower's simulation engine (Ray backend,
  one CPU per client actor) running its FedAvg strategy over the same clients with the same
  local SGD and a centralized evaluation before the first and after the last round.

Prints each wall time (and the CPU seconds of each process tree, which depend less on a
shared machine's load), the start-up, and the ratios against the targets of issue 19 (with
``--repeats`` the best of each). For each fedclock side it also prints the training phase
apart from the start-up: from the first dispatched task to the last result the server
applied, its wall time and the CPU milliseconds per task of the process tree by role
(driver, executors, server actor, other Ray processes), and per workload the Ray backend
against the inline one, training phase and whole process (issue 34's targets: MLP within
1.2x, CNN5 within 1.05x). ``--inline-threads 1`` gives the inline backend one PyTorch thread
like each Ray executor (on a loaded machine its default, one per core, waits on descheduled
threads at every operation); ``--vectorize 1`` leaves out the vectorized runs.
A whole default run (both workloads, Flower included) takes about five minutes on an idle
2-core machine (the figures of issue 19 add up to 4.5-5 minutes) and took 16 minutes at load
average 10-29.

    python benchmarks/e2e.py [--workloads mlp,cnn5] [--flower-python PATH] [--repeats 1]
                             [--skip-plain] [--skip-fedclock] [--backends ray,inline] [--vectorize 32]
                             [--keep DIR] [--out FILE] [--inline-threads 1]
    python benchmarks/e2e.py --workloads mlp,cnn5 --skip-plain --vectorize 1 --inline-threads 1
    python benchmarks/e2e.py --workloads cifar_cnn5,cifar_resnet --device cuda --gpu-actors 4 --vectorize 50
    python benchmarks/e2e.py --workloads cifar_cnn5 --ray-executors 1,2,4,8,16 --rounds 2 --test-images 2000
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # proctree, beside this script
from proctree import role_of, tree_cpu_by_pid, tree_cpu_by_role

LR = 0.05
TRAIN_IMAGES, TEST_IMAGES = 12_500, 2_000
WORKLOADS = {
    "cnn5": {"model": "cnn5", "hidden": [], "clients": 20, "samples": 500, "batch": 48, "rounds": 5,
             "vectorized": False},
    "mlp": {"model": "mlp", "hidden": [200, 200], "clients": 200, "samples": 50, "batch": 10, "rounds": 10,
            "vectorized": True},
    # CIFAR-10-shaped (issue 35): 50,000 training images over 1,000 clients (50 each, no client test split),
    # a cohort of 50 per round, B = 10, 5 rounds, the 10,000-image test set
    "cifar_cnn5": {"model": "cnn5", "hidden": [], "dataset": "cifar10", "clients": 1000, "cohort": 50, "samples": 50,
                   "batch": 10, "rounds": 5, "test": 10_000, "vectorized": True},
    "cifar_resnet": {"model": "resnet18_gn", "hidden": [], "dataset": "cifar10", "clients": 1000, "cohort": 50,
                     "samples": 50, "batch": 10, "rounds": 5, "test": 10_000, "vectorized": False},
}
TINY = {"clients": 20, "cohort": 4, "samples": 10, "rounds": 1, "test": 50}
"""``--tiny``: the CIFAR workloads cut to a size that a loaded 2-core machine runs in seconds."""
TARGETS = "MLP: vectorized <= 0.5x plain and >= 5x faster than Flower, unvectorized <= 1.2x plain; " \
          "CNN5: <= 1.10x plain and faster than Flower; start-up to the first dispatched task <= 3 s"
GPU_GOAL = "CIFAR workloads on a GPU (issue 35): fedclock with vectorized clients at least 10x faster than the " \
           "plain loop (ratio <= 0.10)"


# ----------------------------------------------------------------------------- data
def write_mnist(root: Path, seed: int = 0) -> None:
    """Seeded random 28x28 uint8 images and labels 0..9 as gzipped IDX files (MNIST's format)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", TRAIN_IMAGES), ("t10k", TEST_IMAGES)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", labels)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.tobytes(), compresslevel=6))


def read_mnist(root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gzipped IDX files as float32 images standardized with the training mean and
    standard deviation (as fedclock does), and int64 labels."""
    raw = root / "MNIST" / "raw"

    def idx(name: str) -> np.ndarray:
        data = gzip.decompress((raw / name).read_bytes())
        ndim = data[3]
        shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)

    x_tr = idx("train-images-idx3-ubyte.gz").astype(np.float32)[:, None] / 255.0
    x_te = idx("t10k-images-idx3-ubyte.gz").astype(np.float32)[:, None] / 255.0
    mean, std = x_tr.mean(), max(float(x_tr.std(ddof=1)), 1e-6)
    return ((x_tr - mean) / std, idx("train-labels-idx1-ubyte.gz").astype(np.int64),
            (x_te - mean) / std, idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))


CIFAR_FOLDER = "cifar-10-batches-py"


def write_cifar10(root: Path, train: int, test: int, seed: int = 0) -> None:
    """Seeded random 32x32 colour images and labels 0..9 as CIFAR-10's python pickles
    (``<root>/cifar-10-batches-py/data_batch_1..5``, ``test_batch``, ``batches.meta``): each a
    protocol-2 pickle of a dict with ``data`` (uint8, one row of 3,072 values per image: the red,
    green then blue planes), ``labels`` (a list of ints), ``batch_label`` and ``filenames``, as
    the published files. ``train`` must be a multiple of 5 (five training batches)."""
    import pickle

    if train % 5:
        raise ValueError(f"write_cifar10: train must be a multiple of 5, got {train}")
    base = root / CIFAR_FOLDER
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files = [(f"data_batch_{i}", train // 5, f"training batch {i} of 5") for i in range(1, 6)]
    for name, n, label in [*files, ("test_batch", test, "testing batch 1 of 1")]:
        entry = {"batch_label": label, "labels": [int(v) for v in rng.integers(0, 10, n)],
                 "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 "filenames": [f"random_{name}_{i}.png" for i in range(n)]}
        (base / name).write_bytes(pickle.dumps(entry, protocol=2))
    meta = {"num_cases_per_batch": train // 5, "num_vis": 3072,
            "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]}
    (base / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))


def read_cifar10(root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pickles as float32 (N, 3, 32, 32) images standardized per channel with the
    training mean and standard deviation (as fedclock does), and int64 labels."""
    import pickle

    def batch(name: str) -> tuple[np.ndarray, np.ndarray]:
        with open(root / CIFAR_FOLDER / name, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        return (np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32),
                np.asarray(entry["labels"], dtype=np.int64))

    parts = [batch(f"data_batch_{i}") for i in range(1, 6)]
    x_tr = np.concatenate([x for x, _ in parts]).astype(np.float32) / 255.0
    y_tr = np.concatenate([y for _, y in parts])
    x_te, y_te = batch("test_batch")
    mean = x_tr.mean(axis=(0, 2, 3), keepdims=True)
    std = np.maximum(x_tr.std(axis=(0, 2, 3), ddof=1, keepdims=True), 1e-6)
    return (x_tr - mean) / std, y_tr, (x_te.astype(np.float32) / 255.0 - mean) / std, y_te


def read_data(work: dict, root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The workload's data set, read as the plain loop (and Flower) read it."""
    return read_cifar10(root) if work.get("dataset") == "cifar10" else read_mnist(root)


def sized(work: dict, tiny: bool = False, **overrides: int | None) -> dict:
    """The workload with ``--tiny``'s size and then any given ``overrides`` (None: keep)."""
    out = dict(work)
    if tiny and "cohort" in work:
        out.update(TINY)
    out.update({k: v for k, v in overrides.items() if v is not None and k in out})
    return out


# ----------------------------------------------------------------------------- shared training code
def build_model(work: dict):
    """The workload's model, layer for layer as fedclock's ``mlp`` / ``cnn5``. The CIFAR
    workloads build fedclock's own module (a plain ``nn.Module``; ResNet-18-GN is too long to
    repeat here), so both sides train the same network."""
    import torch.nn as nn

    if work.get("dataset") == "cifar10":
        from fedclock.algorithms.models import ModelFactory

        return ModelFactory(work["model"], (3, 32, 32), 10).build()

    if work["model"] == "mlp":
        dims = [784, *work["hidden"]]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(dims, dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(dims[-1], 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def local_sgd(model, x, y, work: dict, seed: int) -> None:
    """One epoch of ``ceil(n / batch)`` SGD steps of ``batch`` samples, batches drawn from
    seeded permutations (a batch straddling two permutations takes the end of one and the
    start of the next, as fedclock's ``batches``)."""
    import torch
    import torch.nn.functional as F

    rng = torch.Generator().manual_seed(seed)
    n, size = len(y), min(work["batch"], len(y))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    perm, pos = torch.randperm(n, generator=rng), 0
    for _ in range(-(-n // work["batch"])):
        if pos + size <= n:
            idx, pos = perm[pos:pos + size], pos + size
        else:
            head = perm[pos:]
            perm = torch.randperm(n, generator=rng)
            pos = size - len(head)
            idx = torch.cat([head, perm[:pos]])
        if pos == n:
            perm, pos = torch.randperm(n, generator=rng), 0
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


def evaluate(model, x, y, batch: int = 1000) -> float:
    """Accuracy on ``(x, y)``, in batches of ``batch`` (ResNet-18 on 10,000 images at once
    would hold gigabytes of activations)."""
    import torch

    with torch.no_grad():
        correct = sum(int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum()) for i in range(0, len(y), batch))
    return correct / max(len(y), 1)


def cohort_of(work: dict, r: int) -> list[int]:
    """The clients of round ``r``: every client (MNIST workloads) or ``cohort`` consecutive
    ones, round after round (the plain loop; fedclock samples its own cohorts uniformly, the
    same number of clients and steps)."""
    clients = work["clients"]
    size = work.get("cohort", clients)
    return [(r * size + j) % clients for j in range(size)]


# ----------------------------------------------------------------------------- the three sides (child processes)
def plain_main(work: dict, root: Path) -> None:
    """The plain loop: one process, one model."""
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    threads = int(os.environ.get("E2E_PLAIN_THREADS", "0"))
    if threads:
        torch.set_num_threads(threads)
    device = torch.device(os.environ.get("E2E_DEVICE", "cpu"))
    if device.type == "cuda":  # the same kernels as fedclock's CUDA executors: full float32, deterministic cuDNN
        from fedclock.actors.cuda_kernels import exact_cuda_kernels

        exact_cuda_kernels()
    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a).to(device) for a in read_data(work, root))
    torch.manual_seed(0)
    model = build_model(work).to(device)
    weights = parameters_to_vector(model.parameters()).detach().clone()
    evaluate(model, x_te, y_te)
    samples = work["samples"]
    for r in range(work["rounds"]):
        total = torch.zeros_like(weights)
        cohort = cohort_of(work, r)
        for c in cohort:
            vector_to_parameters(weights, model.parameters())
            sl = slice(c * samples, (c + 1) * samples)
            local_sgd(model, x_tr[sl], y_tr[sl], work, r * 100_000 + c)
            total += (parameters_to_vector(model.parameters()).detach() - weights) / len(cohort)
        weights = weights + total
    vector_to_parameters(weights, model.parameters())
    print(json.dumps({"accuracy": evaluate(model, x_te, y_te)}))


def fedclock_main(scenario: Path, out: Path) -> None:
    """``fedclock run FILE`` in this process, noting when the first task was dispatched and,
    for the training phase, the wall clock and the CPU seconds of the process tree by role at
    the first task and after each result the server applied (``Session.apply``): the last
    reading ends the phase (written as JSON to ``E2E_PHASE_FILE`` when set)."""
    from fedclock.actors import session
    from fedclock.scenarios.cli import main

    start, apply = session.Session.start, session.Session.apply
    mark = os.environ["E2E_FIRST_TASK_FILE"]
    phase_file = os.environ.get("E2E_PHASE_FILE")
    phase: dict[str, Any] = {"tasks": 0}

    def first_start(self, task):
        if not os.path.exists(mark):
            Path(mark).write_text(repr(time.time()))
            phase["first"] = (time.time(), tree_cpu_by_role())
        phase["tasks"] += 1
        return start(self, task)

    def applied(self, tasks):
        out = apply(self, tasks)
        phase["last"] = (time.time(), tree_cpu_by_role())
        return out

    session.Session.start = first_start  # type: ignore[method-assign]
    if phase_file:
        session.Session.apply = applied  # type: ignore[method-assign]
    try:
        code = main(["run", str(scenario), "--out", str(out), "--quiet"])
    finally:
        if phase_file and "first" in phase and "last" in phase:
            Path(phase_file).write_text(json.dumps(phase))
    sys.exit(code)


def training_phase(phase: dict[str, Any]) -> tuple[float, dict[str, float], int]:
    """(wall seconds, CPU seconds by role, tasks) from the first task to the last applied result."""
    (t0, c0), (t1, c1) = phase["first"], phase["last"]
    return t1 - t0, {k: c1[k] - c0.get(k, 0.0) for k in c1 if c1[k] - c0.get(k, 0.0) > 0}, int(phase["tasks"])


def flower_main(work: dict, root: Path) -> None:
    """Flower's simulation engine (its Message API) running FedAvg on the same clients, every
    client every round (:func:`flower_side.run_flower`, shared with ``pfl_cifar10.py``)."""
    from flower_side import run_flower  # beside this script

    accuracy = run_flower(clients=work["clients"], cohort=work["clients"], rounds=work["rounds"],
                          samples=work["samples"], read=lambda: read_data(work, root),
                          build_model=lambda: build_model(work),
                          train=lambda model, x, y, seed: local_sgd(model, x, y, work, seed), evaluate=evaluate)
    print(json.dumps({"accuracy": accuracy[-1] if accuracy else None}))


# ----------------------------------------------------------------------------- the driver
def scenario_text(name: str, work: dict, root: Path, vectorize: int, backend: str = "ray",
                  extra: dict[str, Any] | None = None, inline_threads: int = 0) -> str:
    """The fedclock scenario file of a workload. The inline backend trains in the driver
    with as many PyTorch threads as the machine has cores (the plain loop's default); the Ray
    executors run one thread each (the default). ``extra``: more ``runtime`` keys (the
    device, the number of executors and their GPU fractions); ``inline_threads`` > 0: the
    inline backend's threads instead (on a loaded machine 1, as for the plain loop)."""
    runtime: dict[str, Any] = {"backend": backend, "vectorize": vectorize}
    if backend == "inline":
        runtime["threads_per_actor"] = inline_threads or os.cpu_count() or 1
    runtime.update(extra or {})
    dataset: dict[str, Any] = {"name": work.get("dataset", "mnist"), "root": str(root), "partition": {"type": "iid"}}
    mode: dict[str, Any] = {"type": "sync"}
    if "cohort" in work:  # CIFAR: every training image goes to a client (no client test split), sampled cohorts
        dataset["client_test_fraction"] = 0
        mode["cohort_size"] = work["cohort"]
    return json.dumps({
        "name": name, "seed": 0,
        "dataset": dataset,
        "model": {"name": work["model"], "hidden": work["hidden"] or [128]},
        "population": {"num_clients": work["clients"]},
        "algorithm": {"name": "fedavg", "lr": LR, "batch_size": work["batch"], "local_epochs": 1},
        "mode": mode, "stop": {"rounds": work["rounds"]},
        "evaluation": {"every": 1_000_000, "personalized": False},
        "runtime": runtime,
        "output": {"progress": False, "flush_every_s": 60},
    }, indent=1)


class SideFailed(Exception):
    """One side's process failed or ran out of time (the other sides still run)."""


def timed(cmd: list[str], env: dict[str, str] | None = None, limit: float = 0.0) -> tuple[float, dict[str, float]]:
    """Run ``cmd`` as a process; (wall seconds from before its start to its exit, CPU
    seconds of the process and its descendants — the Ray daemons and actors — sampled from
    /proc every 0.2 s, each process's last reading, so a process ending between two
    samples loses at most its last 0.2 s), by role: ``driver`` (the process itself),
    ``server``, ``executors`` (Ray actors), ``ray`` (every other descendant). Raises
    :class:`SideFailed` when it exits with an error or outlives ``limit`` seconds (0: no
    limit; it is then sent SIGTERM, on which fedclock stops its Ray, and killed 15 s later)."""
    start = time.perf_counter()
    cpu: dict[int, float] = {}
    roles: dict[int, str] = {}
    with tempfile.TemporaryFile("w+") as err, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                                               env=env) as proc:
        while proc.poll() is None:
            cpu.update(tree_cpu_by_pid(proc.pid))
            for pid in cpu.keys():  # a Ray worker takes its actor's title only once it holds the actor
                if roles.get(pid, "ray") == "ray":
                    roles[pid] = role_of(pid, proc.pid)
            if limit and time.perf_counter() - start > limit:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise SideFailed(f"timed out after {limit:g} s (--side-timeout)")
            time.sleep(0.2)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            text = err.read()
            print(f"e2e: {' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{text[-3000:]}", file=sys.stderr,
                  flush=True)
            last = next((line for line in reversed(text.splitlines()) if line.strip()), "no error output")
            raise SideFailed(f"exit status {proc.returncode}: {last.strip()[:300]}")
    by_role: dict[str, float] = {}
    for pid, seconds in cpu.items():
        by_role[roles[pid]] = by_role.get(roles[pid], 0.0) + seconds
    return wall, by_role


def run_fedclock(name: str, work: dict, root: Path, tmp: Path, vectorize: int, backend: str = "ray",
                 extra: dict[str, Any] | None = None, limit: float = 0.0, inline_threads: int = 0
                 ) -> tuple[float, dict[str, float], float, tuple[float, dict[str, float], int]]:
    """One cold ``fedclock run``: (wall seconds, CPU seconds by role, seconds to the first
    dispatched task, the training phase as :func:`training_phase` gives it)."""
    scenario = tmp / f"{name}.yaml"  # JSON is YAML
    scenario.write_text(scenario_text(name, work, root, vectorize, backend, extra, inline_threads))
    out = tmp / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    mark = tmp / f"{name}.first"
    mark.unlink(missing_ok=True)
    phase = tmp / f"{name}.phase.json"
    phase.unlink(missing_ok=True)
    env = {**os.environ, "E2E_FIRST_TASK_FILE": str(mark), "E2E_PHASE_FILE": str(phase)}
    before = time.time()
    wall, cpu = timed([sys.executable, __file__, "--fedclock", str(scenario), str(out)], env, limit)
    import pyarrow.parquet as pq

    num_train = pq.read_table(out / "clients.parquet", columns=["num_train"]).column(0).to_pylist()
    if set(num_train) != {work["samples"]}:
        raise SystemExit(f"e2e: {name}: clients hold {sorted(set(num_train))} training samples, expected "
                         f"{work['samples']}")
    return wall, cpu, float(mark.read_text()) - before, training_phase(json.loads(phase.read_text()))


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def fedclock_sides(work: dict, args: argparse.Namespace) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(label, backend, runtime.vectorize, more runtime keys) of each fedclock run to time:
    with ``--ray-executors`` the Ray backend with each number of single-threaded executors;
    else each of ``--backends``, and again vectorized where the workload allows. On
    ``--device cuda`` the Ray backend runs ``--gpu-actors`` executors each holding that
    fraction of the one GPU (``runtime.num_gpus``), the inline backend trains in the driver on it."""
    if args.ray_executors:
        return [(f"fedclock_ray{n}", "ray", 1, {"num_actors": n}) for n in args.ray_executors]
    sides = []
    for backend in ([] if args.skip_fedclock else args.backends.split(",")):
        tag = "" if backend == "ray" else f"_{backend}"
        extra: dict[str, Any] = {}
        if args.device == "cuda":
            extra["device"] = "cuda"
            if backend == "ray":
                extra.update(num_actors=args.gpu_actors, num_gpus=1.0 / args.gpu_actors)
        sides.append((f"fedclock{tag}", backend, 1, extra))
        if work["vectorized"] and args.vectorize > 1:
            sides.append((f"fedclock{tag}_vec{args.vectorize}", backend, args.vectorize, extra))
    return sides


def write_data(work: dict, tmp: Path) -> Path:
    """Write the workload's data set under ``tmp`` once per size; return its root."""
    if work.get("dataset") != "cifar10":
        root = tmp / "data"
        if not (root / "MNIST").is_dir():
            write_mnist(root)
        return root
    train = work["clients"] * work["samples"]
    root = tmp / f"cifar-{train}-{work['test']}"
    if not (root / CIFAR_FOLDER).is_dir():
        write_cifar10(root, train, work["test"])
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mlp,cnn5", help="comma-separated: " + ", ".join(WORKLOADS))
    parser.add_argument("--flower-python", default=None, metavar="PATH",
                        help="a Python interpreter with flwr[simulation] installed (Flower is skipped without)")
    parser.add_argument("--repeats", type=int, default=1, help="run every side this many times (best is reported)")
    parser.add_argument("--vectorize", type=int, default=32, help="runtime.vectorize of the vectorized fedclock run "
                        "(1: no vectorized run)")
    parser.add_argument("--skip-plain", action="store_true")
    parser.add_argument("--plain-threads", type=int, default=0, help="PyTorch threads of the plain loop (default: "
                        "PyTorch's own default, all cores; on a loaded machine 1 avoids threads waiting for each "
                        "other at every operation)")
    parser.add_argument("--inline-threads", type=int, default=0, help="PyTorch threads of the inline backend "
                        "(default: one per core; on a loaded machine 1, like each Ray executor)")
    parser.add_argument("--skip-fedclock", action="store_true")
    parser.add_argument("--backends", default="ray,inline", help="comma-separated fedclock backends to time: ray, "
                        "inline (``runtime.backend``; inline trains in the driver with one thread per core)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the plain loop and fedclock (runtime.device) train")
    parser.add_argument("--gpu-actors", type=int, default=4, help="--device cuda: Ray executors, each holding "
                        "1/N of the GPU (runtime.num_actors and runtime.num_gpus)")
    parser.add_argument("--ray-executors", type=lambda v: [int(n) for n in v.split(",")], default=None,
                        metavar="N,N,...", help="instead of --backends: the Ray backend with each of these numbers "
                        "of single-threaded executors (how it scales with cores)")
    parser.add_argument("--tiny", action="store_true", help="the CIFAR workloads at a few seconds' size "
                        f"({', '.join(f'{k} {v}' for k, v in TINY.items())}), to check the script")
    parser.add_argument("--rounds", type=int, default=None, help="bound: rounds of every workload")
    parser.add_argument("--clients", type=int, default=None, help="bound: clients of every workload")
    parser.add_argument("--cohort", type=int, default=None, help="bound: cohort of the CIFAR workloads")
    parser.add_argument("--test-images", type=int, default=None, help="bound: test images of the CIFAR workloads")
    parser.add_argument("--out", type=Path, default=None, help="also append every printed line to this file")
    parser.add_argument("--side-timeout", type=float, default=0.0, help="seconds after which one side's process "
                        "is stopped and reported as failed (0: no limit); the other sides still run")
    parser.add_argument("--keep", type=Path, default=None, help="write data, scenarios and results here (kept)")
    parser.add_argument("--plain", nargs=2, metavar=("WORKLOAD", "ROOT"), help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)  # the sized workload, JSON (children)
    parser.add_argument("--flower", nargs=2, metavar=("WORKLOAD", "ROOT"), help=argparse.SUPPRESS)
    parser.add_argument("--fedclock", nargs=2, metavar=("SCENARIO", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        return plain_main(json.loads(args.work) if args.work else WORKLOADS[args.plain[0]], Path(args.plain[1]))
    if args.flower:
        return flower_main(json.loads(args.work) if args.work else WORKLOADS[args.flower[0]], Path(args.flower[1]))
    if args.fedclock:
        return fedclock_main(Path(args.fedclock[0]), Path(args.fedclock[1]))
    unknown = [w for w in args.workloads.split(",") if w not in WORKLOADS]
    if unknown:
        parser.error(f"--workloads: unknown {', '.join(unknown)} (allowed: {', '.join(WORKLOADS)})")
    device_name = "cpu"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.exit(2, "e2e.py: error: --device cuda: PyTorch finds no CUDA device here\n")
        device_name = torch.cuda.get_device_name(0)

    def say(line: str) -> None:
        print(line, flush=True)
        if args.out is not None:
            with open(args.out, "a") as f:
                f.write(line + "\n")

    holder = None
    if args.keep is None:
        holder = tempfile.TemporaryDirectory(prefix="fedclock-e2e-")
        tmp = Path(holder.name)
    else:
        tmp = args.keep
        tmp.mkdir(parents=True, exist_ok=True)
    goals = [TARGETS] if {"mlp", "cnn5"} & set(args.workloads.split(",")) else []
    if any("cohort" in WORKLOADS[w] for w in args.workloads.split(",")) and args.device == "cuda":
        goals.append(GPU_GOAL)
    say(f"e2e: {os.cpu_count()} CPUs, device {device_name}, load average {load_average()}"
        + (f"; targets: {'; '.join(goals)}" if goals else ""))
    results: dict[str, dict[str, float]] = {}
    try:
        for name in args.workloads.split(","):
            work = sized(WORKLOADS[name], args.tiny, rounds=args.rounds, clients=args.clients, cohort=args.cohort,
                         test=args.test_images)
            root = write_data(work, tmp)
            say(f"[{name}] {work['model']}: {work['clients']} clients x {work['samples']} samples, "
                f"cohort {work.get('cohort', work['clients'])}, B={work['batch']}, {work['rounds']} rounds"
                + (f", {work['test']} test images" if "test" in work else ""))
            times: dict[str, float] = results.setdefault(name, {})
            order: list[str] = []
            for rep in range(args.repeats):
                sides: list[tuple[str, Callable[[], Any]]] = []
                if not args.skip_plain:
                    env = {**os.environ, "E2E_PLAIN_THREADS": str(args.plain_threads), "E2E_DEVICE": args.device}
                    sides.append(("plain", partial(timed, [sys.executable, __file__, "--plain", name, str(root),
                                                           "--work", json.dumps(work)], env, args.side_timeout)))
                for label, backend, vectorize, extra in fedclock_sides(work, args):
                    sides.append((label, partial(run_fedclock, f"e2e_{name}_{label}", work, root, tmp, vectorize,
                                                 backend, extra, args.side_timeout, args.inline_threads)))
                if args.flower_python:
                    sides.append(("flower", partial(timed, [args.flower_python, __file__, "--flower", name,
                                                            str(root), "--work", json.dumps(work)], None,
                                                    args.side_timeout)))
                for side, fn in sides:
                    try:
                        wall, roles, *startup = fn()
                    except SideFailed as failed:
                        say(f"[{name} {rep + 1}] {side}: FAILED, {failed} (load average {load_average()})")
                        continue
                    cpu = sum(roles.values())
                    if side not in order:
                        order.append(side)
                    times[side] = min(times.get(side, float("inf")), wall)
                    times[f"{side}_cpu"] = min(times.get(f"{side}_cpu", float("inf")), cpu)
                    extra_text = ""
                    if startup:
                        times[f"{side}_startup"] = min(times.get(f"{side}_startup", float("inf")), startup[0])
                        extra_text = f", first task dispatched after {startup[0]:.2f} s"
                        p_wall, p_roles, tasks = startup[1]
                        p_cpu = sum(p_roles.values())
                        if p_cpu / tasks < times.get(f"{side}_task_cpu", float("inf")):
                            times[f"{side}_task_cpu"], times[f"{side}_phase"] = p_cpu / tasks, p_wall
                        p_split = ", ".join(f"{k} {1000 * v / tasks:.2f}" for k, v in sorted(p_roles.items()))
                        extra_text += (f"; training phase (first task to last result) {p_wall:.2f} s, CPU "
                                       f"{p_cpu:.2f} s for {tasks} tasks, ms per task: {p_split}")
                    split = ", ".join(f"{k} {v:.1f}" for k, v in sorted(roles.items())) if len(roles) > 1 else ""
                    say(f"[{name} {rep + 1}] {side}: {wall:.2f} s, CPU {cpu:.2f} s{f' ({split})' if split else ''}"
                        f"{extra_text} (load average {load_average()})")
            say(_ratios(name, times, [s for s in order if s.startswith("fedclock")]))
    finally:
        if holder is not None:
            holder.cleanup()


def _ratios(name: str, t: dict[str, float], ours: list[str]) -> str:
    """The ratios the targets are stated in: each side's wall (and CPU) time over the plain
    loop's (below 1: faster than the plain loop), Flower's over each fedclock side's, and the
    start-ups."""
    lines = []
    if "plain" in t:
        for side in (*ours, "flower"):
            if side in t:
                lines.append(f"{side}/plain {t[side] / t['plain']:.2f} (CPU {t[side + '_cpu'] / t['plain_cpu']:.2f})")
    if "flower" in t:
        for side in ours:
            lines.append(f"flower/{side} {t['flower'] / t[side]:.2f} (CPU {t['flower_cpu'] / t[side + '_cpu']:.2f})")
    for side in ours:
        if f"{side}_startup" in t:
            lines.append(f"{side} start-up {t[side + '_startup']:.2f} s")
    for side in ours:  # the Ray backend against the inline one (issue 34: MLP <= 1.2x, CNN5 <= 1.05x)
        other = side.replace("fedclock", "fedclock_inline", 1)
        if side.startswith("fedclock_inline") or other not in t:
            continue
        lines.append(f"{side}/{other}: training phase {t[side + '_phase'] / t[other + '_phase']:.2f} "
                     f"(CPU per task {t[side + '_task_cpu'] / t[other + '_task_cpu']:.2f}), whole process "
                     f"{t[side] / t[other]:.2f} (CPU {t[side + '_cpu'] / t[other + '_cpu']:.2f})")
    return f"{name}: " + "; ".join(lines)


if __name__ == "__main__":
    main()
