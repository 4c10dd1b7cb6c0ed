"""The field's benchmark, side by side (issue 47): pfl-research's CIFAR-10 workload timed on a
plain PyTorch loop, fedclock (inline, inline vectorized, Ray), pfl and Flower.

Two workloads:

* ``cifar10`` (default): pfl-research's benchmark (``scenarios/library/benchmarks/pfl_cifar10.yaml``
  lists every setting and its source): ``pfl_cnn`` (pfl's ``simple_cnn``), 1,000 clients of 50
  CIFAR-10 images, 50 a round, 1 local epoch of SGD at batch 10 (5 steps) and lr 0.1, FedAvg,
  1,500 rounds (``--rounds`` shortens it; default 5). fedclock runs the library file itself
  (``--set`` only points it at the data and shortens it). The CNN has dropout; vectorized
  clients draw each client's masks as the sequential loop does (``algorithms/vectorized.py``).
* ``logreg``: FLUTE's published comparison with Flower (``microsoft/msrflute`` README):
  multinomial logistic regression on MNIST, 1,000 clients (60 images each), 10 a round, 100
  rounds, batch 10, one epoch, lr 0.1 (the README gives none). Overhead-bound: the framework's
  own cost is most of what there is.

Data: seeded generated images in the real on-disk formats (CIFAR-10's python pickles under
``<root>/cifar-10-batches-py``, written by fedclock's own generator
:mod:`fedclock.scenarios.data.cifar_generate`; MNIST's gzipped IDX files under ``<root>/MNIST/raw``),
written once into a temporary folder; ``--data DIR`` reads real CIFAR-10 there instead.

Sides (``--sides``, comma-separated; each a whole cold process, timed from before its start to
its exit, with the CPU seconds of its whole process tree, Ray's daemons and actors included):

* ``plain``: one process, one model, the same SGD steps (this script with ``--child plain``);
* ``inline``, ``inline_vec``: ``fedclock run`` on the inline backend (vectorized: ``runtime.vectorize``
  = the cohort);
* ``ray``: ``fedclock run`` on the Ray backend (its defaults: one single-threaded executor per core);
* ``pfl``: pfl 0.6 (``SimulatedBackend``, ``FederatedAveraging``, ``PyTorchModel``, the
  benchmark's own objects), in its own virtual environment;
* ``flower``: Flower 1.42's simulation engine (``run_simulation``, its ``FedAvg`` strategy),
  in its own virtual environment.

The virtual environments are made by this script under ``--venv-dir`` (default
``~/.cache/fedclock-bench/venvs``) with ``pip install pfl==0.6.*`` and
``pip install flwr[simulation]==1.42.*`` from the package registry; neither is a fedclock
dependency. PyTorch itself is not downloaded again: a ``.pth`` line puts this interpreter's
site-packages after the venv's own, so every side runs the same PyTorch build (pass
``--own-torch`` to let pip install PyTorch into each venv too).

Every side evaluates the global model on the test set before the first round and after the
last (pfl and Flower through a callback/evaluate function, fedclock through its evaluation
schedule), and records the wall clock at the end of every round; the steady state is the mean
of rounds 2..R (``(t_R - t_1) / (R - 1)``: the first round, with its warm-up, left out).
Start-up is the wall time from before the process started to its first client task.

``--threads N`` gives every side N PyTorch threads (plain: ``torch.set_num_threads``; inline:
``runtime.threads_per_actor``; pfl: ``torch.set_num_threads``; Ray and Flower keep one thread per
executor/client actor, one actor per core); 0 (default): each side's own default. ``--repeats``
runs every side that many times, alternating the order (forward, then backward) so each pair
of sides sees the same load; each side's median and range over the passes are reported, with
its ratios to the plain loop taken within each pass (median and range), and the load average
is printed beside every measurement.

    python benchmarks/pfl_cifar10.py [--workload cifar10|logreg] [--rounds 5] [--sides plain,inline,...]
                                     [--threads 0] [--repeats 1] [--device cpu|cuda] [--data DIR] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # e2e and proctree, beside this script
from e2e import SideFailed, _write_idx, load_average, read_cifar10, timed  # noqa: E402

WORKLOADS: dict[str, dict[str, Any]] = {
    "cifar10": {"model": "pfl_cnn", "dataset": "cifar10", "clients": 1000, "samples": 50, "cohort": 50,
                "batch": 10, "lr": 0.1, "rounds": 1500, "test": 10_000},
    "logreg": {"model": "logistic", "dataset": "mnist", "clients": 1000, "samples": 60, "cohort": 10,
               "batch": 10, "lr": 0.1, "rounds": 100, "test": 10_000},
}
SIDES = ("plain", "inline", "inline_vec", "ray", "pfl", "flower")
VENVS = {"pfl": "pfl==0.6.*", "flower": "flwr[simulation]==1.42.*"}
LIBRARY_FILE = "library/benchmarks/pfl_cifar10"
TARGETS = ("issue 47, CPU: fedclock at its defaults <= pfl's s/round; at equal threads inline <= 1.0x plain, "
           "vectorized <= 0.6x, Ray <= 1.1x inline; logreg: >= 10x faster than Flower, <= 1.2x plain (whole "
           "process) and ahead of pfl")


# ----------------------------------------------------------------------------- data and model (every side)
def write_mnist_sized(root: Path, train: int, test: int, seed: int = 0) -> None:
    """Seeded 28x28 images (ten class prototypes, half prototype half noise) as MNIST's gzipped IDX files."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, (10, 28, 28), dtype=np.uint8) // 2
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = prototypes[labels] + rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) // 2
        _write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", labels)


def write_data(work: dict[str, Any], tmp: Path) -> Path:
    """The workload's generated data under ``tmp`` (CIFAR-10 by fedclock's own generator)."""
    root = tmp / "data"
    if work["dataset"] == "cifar10":
        from fedclock.scenarios.data.cifar_generate import write_cifar10
        from fedclock.scenarios.schema import GeneratedFiles

        write_cifar10(root, GeneratedFiles(users=work["clients"], mean_samples=work["samples"],
                                           test_samples=work["test"]), 0)
    else:
        write_mnist_sized(root, work["clients"] * work["samples"], work["test"])
    return root


def read_data(work: dict[str, Any], root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardized float32 images (per channel, training mean and std, as fedclock and pfl do) and labels."""
    if work["dataset"] == "cifar10":
        return read_cifar10(root)
    from e2e import read_mnist

    return read_mnist(root)


def build_model(work: dict[str, Any]):
    """The workload's network in plain PyTorch, layer for layer (and parameter order) as
    fedclock's ``pfl_cnn`` / ``logistic``: what the plain loop, pfl and Flower train."""
    import torch
    from torch import nn

    if work["model"] == "logistic":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * 14 * 14, 128), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(128, 10))
    for m in model:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            torch.nn.init.xavier_uniform_(m.weight)
    return model


def local_sgd(model, x, y, work: dict[str, Any], seed: int) -> None:
    """One epoch: ``ceil(n / batch)`` SGD steps over a seeded permutation."""
    import torch
    import torch.nn.functional as F

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=work["lr"])
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    for i in range(0, len(y), work["batch"]):
        idx = perm[i:i + work["batch"]]
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


def evaluate(model, x, y, batch: int = 1000) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum()) for i in range(0, len(y), batch))
    return correct / max(len(y), 1)


class Marks:
    """What a child process records: the wall clock at its first client task and at the end of
    every round, written as JSON to ``$BENCH_MARKS`` (the first task's through an exclusive file
    create, so that the first of several processes wins)."""

    def __init__(self) -> None:
        self.path = Path(os.environ["BENCH_MARKS"])
        self.rounds: list[float] = []

    def first_task(self) -> None:
        first = self.path.with_suffix(".first")
        try:
            fd = os.open(first, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, repr(time.time()).encode())
        os.close(fd)

    def round_end(self) -> None:
        self.rounds.append(time.time())

    def write(self, **more: Any) -> None:
        self.path.write_text(json.dumps({"rounds": self.rounds, **more}))


def _threads() -> None:
    import torch

    threads = int(os.environ.get("BENCH_THREADS", "0"))
    if threads:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- the sides (child processes)
def plain_main(work: dict[str, Any], root: Path) -> None:
    """One process, one model: the cohort's clients one after the other, then the average."""
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    _threads()
    marks = Marks()
    device = torch.device(os.environ.get("BENCH_DEVICE", "cpu"))
    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a).to(device) for a in read_data(work, root))
    torch.manual_seed(0)
    model = build_model(work).to(device)
    weights = parameters_to_vector(model.parameters()).detach().clone()
    before = evaluate(model, x_te, y_te)
    rng = np.random.default_rng(0)
    s = work["samples"]
    for r in range(work["rounds"]):
        marks.first_task()
        total = torch.zeros_like(weights)
        cohort = rng.choice(work["clients"], work["cohort"], replace=False)
        for c in cohort:
            vector_to_parameters(weights, model.parameters())
            local_sgd(model, x_tr[c * s:(c + 1) * s], y_tr[c * s:(c + 1) * s], work, r * 100_000 + int(c))
            total += parameters_to_vector(model.parameters()).detach() - weights
        weights = weights + total / len(cohort)
        marks.round_end()
    vector_to_parameters(weights, model.parameters())
    marks.write(accuracy=[before, evaluate(model, x_te, y_te)])


def fedclock_main(scenario: str, out: Path, sets: list[str]) -> None:
    """``fedclock run`` in this process, marking the first task (``Session.start``) and the
    end of every round (``Session.apply``: one server step per sync round)."""
    from fedclock.actors import session
    from fedclock.scenarios.cli import main

    marks = Marks()
    start, apply = session.Session.start, session.Session.apply

    def started(self, task):
        marks.first_task()
        return start(self, task)

    def applied(self, tasks):
        result = apply(self, tasks)
        marks.round_end()
        return result

    session.Session.start = started  # type: ignore[method-assign]
    session.Session.apply = applied  # type: ignore[method-assign]
    overrides = [a for s in sets for a in ("--set", s)]
    code = main(["run", scenario, "--out", str(out), "--quiet", "--overwrite", *overrides])
    import pyarrow.parquet as pq

    metrics = pq.read_table(out / "metrics.parquet", columns=["global_accuracy"]).column(0).to_pylist()
    marks.write(accuracy=[metrics[0], metrics[-1]])
    sys.exit(code)


def pfl_main(work: dict[str, Any], root: Path) -> None:
    """pfl 0.6 on the same workload, built from the objects of its own benchmark
    (``benchmarks/image_classification/pytorch/train.py``): a ``PyTorchModel`` with SGD locally
    and a central SGD of learning rate 1 (plain averaging), ``WeightByUser``, a
    ``SimulatedBackend`` over a ``FederatedDataset`` of the clients' slices with random user
    sampling, ``FederatedAveraging``. Evaluated before and after with plain PyTorch."""
    import types

    import torch
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel

    _threads()
    marks = Marks()
    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a) for a in read_data(work, root))
    torch.manual_seed(0)
    net = build_model(work)

    def loss(self, x, y, eval=False):
        self.eval() if eval else self.train()
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x, y, eval=True):
        self.eval() if eval else self.train()
        logits = self(x)
        return {"loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), len(y)),
                "accuracy": Weighted(float((logits.argmax(1) == y).sum()), len(y))}

    net.loss = types.MethodType(loss, net)
    net.metrics = types.MethodType(metrics, net)
    s = work["samples"]
    slices = [(x_tr[c * s:(c + 1) * s], y_tr[c * s:(c + 1) * s]) for c in range(work["clients"])]
    federated = FederatedDataset.from_slices(slices, get_user_sampler("random", range(work["clients"])))
    model = PyTorchModel(model=net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), 1.0))
    backend = SimulatedBackend(training_data=federated, val_data=federated, postprocessors=[WeightByUser()])

    class Timing(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            marks.first_task()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            marks.round_end()
            return False, Metrics()

    before = evaluate(net, x_te, y_te)
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=work["rounds"], evaluation_frequency=work["rounds"],
                                           train_cohort_size=work["cohort"], val_cohort_size=0),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=work["lr"], local_num_epochs=1,
                                              local_batch_size=work["batch"]),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000), callbacks=[Timing()])
    marks.write(accuracy=[before, evaluate(net, x_te, y_te)])


def flower_main(work: dict[str, Any], root: Path) -> None:
    """Flower's simulation engine (Message API, ``FedAvg`` strategy, one CPU per client actor)
    on the same clients, ``cohort`` a round; the central evaluation before the first and after
    the last round (:func:`flower_side.run_flower`, shared with ``e2e.py``)."""
    from flower_side import run_flower  # beside this script

    marks = Marks()

    accuracy = run_flower(clients=work["clients"], cohort=work["cohort"], rounds=work["rounds"],
                          samples=work["samples"], read=lambda: read_data(work, root),
                          build_model=lambda: build_model(work),
                          train=lambda model, x, y, seed: local_sgd(model, x, y, work, seed), evaluate=evaluate,
                          on_task=lambda: Marks().first_task(), on_round_end=marks.round_end)
    marks.write(accuracy=accuracy)


# ----------------------------------------------------------------------------- the driver
def ensure_venv(side: str, venv_dir: Path, own_torch: bool) -> Path:
    """The side's interpreter: a virtual environment under ``venv_dir`` made (once) with
    ``python -m venv`` and ``pip install`` of :data:`VENVS`'s requirement from the registry;
    unless ``own_torch``, a ``.pth`` line puts this interpreter's site-packages (PyTorch)
    after the venv's own."""
    venv = venv_dir / side
    python = venv / "bin" / "python"
    done = venv / ".bench-installed"
    if done.is_file() and done.read_text() == f"{VENVS[side]} own_torch={own_torch}":
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not own_torch:
        import torch

        host = Path(torch.__file__).resolve().parent.parent
        site = next((venv / "lib").glob("python*/site-packages"))
        (site / "zz_host_torch.pth").write_text(str(host) + "\n")
    print(f"pfl_cifar10: installing {VENVS[side]} into {venv} ...", flush=True)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", VENVS[side]], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SideFailed(f"pip install {VENVS[side]} failed: {proc.stderr.strip().splitlines()[-1:]}")
    done.write_text(f"{VENVS[side]} own_torch={own_torch}")
    return python


def fedclock_sets(work: dict[str, Any], name: str, root: Path, side: str, threads: int, device: str) -> list[str]:
    """The ``--set`` overrides of the fedclock run of ``side``."""
    sets = [f"stop.rounds={work['rounds']}", f"evaluation.every={max(work['rounds'], 1)}",
            f"runtime.backend={'ray' if side == 'ray' else 'inline'}", "output.progress=false",
            f"population.num_clients={work['clients']}", f"mode.cohort_size={work['cohort']}"]
    if work["dataset"] == "cifar10":
        sets += ["dataset.generate=null", f"dataset.root={root}"]
    else:
        sets += [f"dataset.root={root}"]
    if side == "inline_vec":
        sets.append(f"runtime.vectorize={work['cohort']}")
    if threads and side != "ray":
        sets.append(f"runtime.threads_per_actor={threads}")
    if device == "cuda":
        sets += ["runtime.device=cuda"] + (["runtime.num_gpus=0.25", "runtime.num_actors=4"] if side == "ray" else [])
    return sets


def logreg_scenario(work: dict[str, Any], path: Path) -> str:
    """The logistic-regression twin as a scenario file (JSON is YAML)."""
    path.write_text(json.dumps({
        "name": "flute-logreg", "seed": 0,
        "dataset": {"name": "mnist", "partition": {"type": "iid"}, "client_test_fraction": 0},
        "model": {"name": "logistic"}, "population": {"num_clients": work["clients"]},
        "algorithm": {"name": "fedavg", "lr": work["lr"], "batch_size": work["batch"], "local_epochs": 1},
        "mode": {"type": "sync", "cohort_size": work["cohort"]}, "stop": {"rounds": work["rounds"]},
        "evaluation": {"every": work["rounds"], "personalized": False, "batch_size": 1000},
    }, indent=1))
    return str(path)


def run_side(side: str, work: dict[str, Any], root: Path, tmp: Path, args: argparse.Namespace,
             pythons: dict[str, Path]) -> dict[str, Any]:
    """One cold process of ``side``: wall, CPU by role, start-up, s/round, accuracy."""
    marks = tmp / f"{side}.marks.json"
    marks.unlink(missing_ok=True)
    marks.with_suffix(".first").unlink(missing_ok=True)
    env = {**os.environ, "BENCH_MARKS": str(marks), "BENCH_THREADS": str(args.threads), "BENCH_DEVICE": args.device,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    payload = ["--work", json.dumps(work), "--root", str(root)]
    if side == "plain":
        cmd = [sys.executable, __file__, "--child", "plain", *payload]
    elif side in ("pfl", "flower"):
        cmd = [str(pythons[side]), __file__, "--child", side, *payload]
    else:
        scenario = LIBRARY_FILE if work["dataset"] == "cifar10" else logreg_scenario(work, tmp / "logreg.yaml")
        sets = fedclock_sets(work, side, root, side, args.threads, args.device)
        cmd = [sys.executable, __file__, "--child", "fedclock", "--scenario", scenario, "--out",
               str(tmp / f"out-{side}"), *payload, "--sets", json.dumps(sets)]
    before = time.time()
    wall, cpu = timed(cmd, env, args.side_timeout)
    got = json.loads(marks.read_text())
    first = float(marks.with_suffix(".first").read_text())
    rounds = got["rounds"]
    steady = (rounds[-1] - rounds[0]) / (len(rounds) - 1) if len(rounds) > 1 else float("nan")
    return {"wall": wall, "cpu": sum(cpu.values()), "startup": first - before, "per_round": steady,
            "rounds": len(rounds), "accuracy": got.get("accuracy"), "load": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cifar10", choices=sorted(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every side (the benchmark's own: "
                        "cifar10 1500, logreg 100); at least 2 for a steady state")
    parser.add_argument("--clients", type=int, default=None, help="bound: clients (a quick check of the script)")
    parser.add_argument("--cohort", type=int, default=None, help="bound: clients a round")
    parser.add_argument("--test-images", type=int, default=None, help="bound: test images (generated data)")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {', '.join(SIDES)}")
    parser.add_argument("--threads", type=int, default=0, help="PyTorch threads of every side (0: each one's default)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--data", type=Path, default=None, help="cifar10: a folder holding the real "
                        "cifar-10-batches-py (default: generated images in the same files)")
    parser.add_argument("--venv-dir", type=Path, default=Path.home() / ".cache" / "fedclock-bench" / "venvs")
    parser.add_argument("--own-torch", action="store_true", help="install PyTorch into the pfl and Flower venvs too")
    parser.add_argument("--side-timeout", type=float, default=0.0, help="seconds after which a side is stopped")
    parser.add_argument("--out", type=Path, default=None, help="also append the printed lines to this file")
    parser.add_argument("--child", choices=["plain", "fedclock", "pfl", "flower"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--sets", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        work = json.loads(args.work)
        if args.child == "fedclock":
            return fedclock_main(args.scenario, Path(args.out), json.loads(args.sets))
        return {"plain": plain_main, "pfl": pfl_main, "flower": flower_main}[args.child](work, args.root)
    sides = [s for s in args.sides.split(",") if s]
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        parser.error(f"--sides: unknown {', '.join(unknown)} (allowed: {', '.join(SIDES)})")
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (the steady state leaves out the first round)")
    work = {**WORKLOADS[args.workload], "rounds": args.rounds}
    work.update({k: v for k, v in (("clients", args.clients), ("cohort", args.cohort), ("test", args.test_images))
                 if v is not None})

    def say(line: str) -> None:
        print(line, flush=True)
        if args.out is not None:
            with open(args.out, "a") as f:
                f.write(line + "\n")

    pythons: dict[str, Path] = {}
    for side in [s for s in sides if s in VENVS]:
        try:
            pythons[side] = ensure_venv(side, args.venv_dir, args.own_torch)
        except (SideFailed, subprocess.CalledProcessError) as err:
            say(f"pfl_cifar10: {side} left out: {err}")
            sides.remove(side)
    say(f"pfl_cifar10: {args.workload}: {work['model']}, {work['clients']} clients x {work['samples']}, "
        f"{work['cohort']} a round, batch {work['batch']}, lr {work['lr']}, {work['rounds']} rounds; "
        f"{os.cpu_count()} CPUs, device {args.device}, threads {args.threads or 'defaults'}; load average "
        f"{load_average()}")
    samples: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="fedclock-pfl-bench-") as holder:
        tmp = Path(holder)
        root = args.data if args.data is not None else write_data(work, tmp)
        for rep in range(args.repeats):
            for side in (sides if rep % 2 == 0 else sides[::-1]):
                try:
                    got = run_side(side, work, root, tmp, args, pythons)
                except SideFailed as failed:
                    say(f"[{rep + 1}] {side}: FAILED, {failed} (load average {load_average()})")
                    continue
                say(f"[{rep + 1}] {side}: {got['per_round']:.2f} s/round (steady, {got['rounds']} rounds), start-up "
                    f"to the first task {got['startup']:.2f} s, whole process {got['wall']:.2f} s, CPU "
                    f"{got['cpu']:.2f} s, accuracy {got['accuracy']} (load average {got['load']})")
                samples.setdefault(side, []).append({**got, "pass": rep})
    say(table(samples))
    say(f"targets: {TARGETS}")


def _spread(values: list[float]) -> str:
    """``median [min-max]`` (the value alone when there is one)."""
    if not values:
        return "-"
    mid = statistics.median(values)
    return f"{mid:.2f}" if len(values) == 1 else f"{mid:.2f} [{min(values):.2f}-{max(values):.2f}]"


def table(samples: dict[str, list[dict[str, Any]]]) -> str:
    """Each side's median and range over its passes, and its ratios to the plain loop taken
    within each pass (the two processes of a pass ran next to each other, under about the
    same load), median and range (below 1: faster than the plain loop)."""
    plain = {s["pass"]: s for s in samples.get("plain", [])}
    lines = ["| side | passes | s/round (steady) | start-up s | whole process s | CPU s | s/round / plain | "
             "wall / plain |", "|---|---|---|---|---|---|---|---|"]
    for side, runs in samples.items():
        cells = [_spread([r[key] for r in runs]) for key in ("per_round", "startup", "wall", "cpu")]
        paired = [(r, plain[r["pass"]]) for r in runs if r["pass"] in plain]
        cells += [_spread([r[key] / p[key] for r, p in paired]) for key in ("per_round", "wall")]
        lines.append(f"| {side} | {len(runs)} | {' | '.join(cells)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
