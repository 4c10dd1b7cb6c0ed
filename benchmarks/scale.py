"""Scale: peak memory and seconds per round for 100, 1,000 and 10,000 logical clients (or more).

FedAvg (MLP on the Synthetic(1, 1) data, ``--samples`` samples split over however many
clients, at least 4 each), sync mode with 1% participation (at least one client; with
``--cohort K``, K clients a round), 2 pooled Ray actors (or ``--backend inline``), global
evaluation only (``evaluation.personalized: false``). Each population size runs in a fresh
child process; a watcher thread there sums the resident memory of that process and all its
descendants (the Ray daemons and actors) from /proc and keeps the peak; beside it the peak of
their proportional set sizes (PSS, ``/proc/PID/smaps_rollup``), which counts a page shared by
several processes (Ray's object store, the libraries) once in all instead of once per process,
and that peak's split by process (``peak_pss_by_role_MiB``: the driver, the server actor, the
executors, Ray's other processes with the object store).
``data_MiB`` is the federation's sample tensors (training pool and global test set: the data
itself), and ``per_client_B`` (``per_client_pss_B``) the peak RSS (PSS) beyond the data and
beyond the same run's fixed cost, estimated as the smallest size's peak less its data, per
client above that smallest size.

    python benchmarks/scale.py [--clients 100 1000 10000] [--rounds 5]
    python benchmarks/scale.py --backend inline --clients 10000 100000 1000000 --cohort 100 --rounds 2 --features 20
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from proctree import tree_cpu_by_pid, tree_pss_by_role, tree_rss  # benchmarks/ is the script's folder


def one(clients: int, rounds: int, backend: str, samples: int, cohort: int | None, features: int) -> None:
    """Run one population size here and print its figures."""
    from fedclock.actors.runtime import Runtime
    from fedclock.scenarios.experiment import run_scenario
    from fedclock.scenarios.data.federation import build_federation
    from fedclock.scenarios.loader import parse_suite

    peak = [0, 0]  # RSS, PSS
    at_peak: dict[str, int] = {}  # the PSS by role when the PSS peaked
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            by_role = tree_pss_by_role(os.getpid())
            if sum(by_role.values()) > peak[1]:
                peak[1] = sum(by_role.values())
                at_peak.clear()
                at_peak.update(by_role)
            time.sleep(0.1)

    def scenario(n_rounds: int):
        return parse_suite({
            "name": "scale", "seed": 0,
            "dataset": {"name": "synthetic", "synthetic_samples": samples, "synthetic_features": features},
            "model": {"name": "mlp", "hidden": [32]},
            "population": {"num_clients": clients},
            "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 20, "local_epochs": 1},
            "mode": {"type": "sync", "cohort_fraction": cohort / clients if cohort else 0.01},
            "stop": {"rounds": n_rounds},
            "evaluation": {"every": 1, "personalized": False},
            "runtime": {"backend": backend, "num_actors": 2, "placement": "pooled"},
            "output": {"flush_every_s": 60, "progress": False},
        }, "scale").runs[0]

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    runtime = Runtime(backend)
    first = scenario(1)
    federation = build_federation(first.dataset, clients, first.seed)  # built once, shared by both runs
    data = sum(t.element_size() * t.nelement() for t in (federation.x, federation.y, federation.x_test,
                                                          federation.y_test))
    with tempfile.TemporaryDirectory() as tmp:
        run_scenario(first, runtime, Path(tmp) / "warmup", federation=federation)
        start = time.perf_counter()
        run_scenario(scenario(rounds), runtime, Path(tmp) / "run", federation=federation)
        wall = time.perf_counter() - start
    cpu = sum(tree_cpu_by_pid(os.getpid()).values())  # before the Ray processes end
    runtime.close()
    stop.set()
    thread.join()
    print(f"clients={clients} cohort={cohort or max(1, clients // 100)} rounds={rounds} "
          f"s_per_round={wall / rounds:.3f} peak_rss_MiB={peak[0] / 2**20:.0f} peak_pss_MiB={peak[1] / 2**20:.0f} "
          f"data_MiB={data / 2**20:.0f} cpu_s={cpu:.1f} "
          f"peak_pss_by_role_MiB={','.join(f'{k}:{v / 2**20:.0f}' for k, v in at_peak.items())}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("ray", "inline"), default="ray")
    parser.add_argument("--samples", type=int, default=100_000, help="synthetic samples in all (at least 4 a client)")
    parser.add_argument("--features", type=int, default=60, help="synthetic features (a million clients: 20)")
    parser.add_argument("--cohort", type=int, default=None, help="clients a round (default 1%%)")
    parser.add_argument("--out", type=Path, default=None, help="also write the lines to this file")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.clients[0], args.rounds, args.backend, args.samples, args.cohort, args.features)
        return
    lines: list[str] = []
    base: tuple[int, float, float] | None = None  # (clients, peak RSS and PSS less data) of the smallest size
    for n in sorted(args.clients):
        extra = ["--cohort", str(args.cohort)] if args.cohort else []
        out = subprocess.run([sys.executable, __file__, "--one", "--clients", str(n), "--rounds", str(args.rounds),
                              "--backend", args.backend, "--samples", str(args.samples),
                              "--features", str(args.features), *extra],
                             capture_output=True, text=True, check=False)
        found = [ln for ln in out.stdout.splitlines() if ln.startswith("clients=")]
        line = found[-1] if found else f"clients={n} failed:\n{out.stderr[-3000:]}"
        if found:
            fields = dict(f.split("=") for f in line.split())
            beyond = (float(fields["peak_rss_MiB"]) - float(fields["data_MiB"])) * 2**20
            beyond_pss = (float(fields["peak_pss_MiB"]) - float(fields["data_MiB"])) * 2**20
            if base is None:
                base = (n, beyond, beyond_pss)
            elif n > base[0]:
                line += (f" per_client_B={(beyond - base[1]) / (n - base[0]):.0f}"
                         f" per_client_pss_B={(beyond_pss - base[2]) / (n - base[0]):.0f}")
        line = f"backend={args.backend} " + line
        lines.append(line)
        print(line, flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
