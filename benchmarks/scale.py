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

``--availability diurnal`` gives every client a daily cycle (online half of it, phases drawn at
once: ``phases: population``, kept as flat arrays) and ``--selection oort`` Oort's selector
instead of uniform draws. ``setup_s`` is the time from the start of the measured run to its
first evaluation (devices, availability, the clock and its index; the data are built once
before, in ``federation_s``), ``steady_s_per_round`` the median time between two evaluations
(one a round: aggregations) of the measured run after its first two rounds.

``--blocks`` draws the synthetic data many clients a call (``synthetic_draws: blocks``),
``--natural`` keeps synthetic's own per-client data as the clients' (``partition: natural``),
``--client-test-fraction 0`` holds nothing out of the clients (global evaluation only), and
``--eval-every N`` evaluates the global test set (which grows with the clients) every N rounds.

``--user-arrays DIR`` keeps every user's samples in files under ``DIR/generated``
(``dataset.format: user_arrays``, :mod:`fedclock.scenarios.data.user_arrays`), drawn by the first
run of a size and mapped by every later one: a user's rows are read from disk when it trains, so
``federation_s`` is the draw (first run) or the mapping (later runs), ``data_MiB`` the files' size,
and the memory figures count only the pages read.

``--memory-phases`` prints, for the driver alone, its PSS at the end of each step of :func:`one`
(imports, data built, ``Runtime.session``: the put, the clock's run, the analysis, the client table,
the writer's close), its peak within each step and its Python stack at that peak (sampled every
20 ms): where the driver's memory peaks.

``--population-only`` runs no training and builds no data: the run's clock over the scenario's
population (its devices, availability and selector) with a backend whose tasks cost nothing
and report a loss, so the scheduling layer's own cost is read apart from PyTorch's.

    python benchmarks/scale.py [--clients 100 1000 10000] [--rounds 5]
    python benchmarks/scale.py --backend inline --clients 10000 100000 1000000 --cohort 100 --rounds 2 --features 20
    python benchmarks/scale.py --population-only --availability diurnal --selection oort --clients 100000 10000000 \
        --cohort 100 --rounds 20
    python benchmarks/scale.py --backend inline --clients 100000 10000000 --cohort 100 --rounds 12 --features 5 \
        --samples 400000 --blocks --natural --client-test-fraction 0 --eval-every 5 --availability diurnal \
        --selection oort
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

from proctree import (tree_cpu_by_pid, tree_pss_by_role, tree_pss_of_files,  # benchmarks/ is the script's folder
                      tree_rss)


class _FreeTasks:
    """Population only: every task is free and reports a loss (Oort reads it); each
    aggregation bumps the version."""

    def __init__(self) -> None:
        self.version = 0

    def start(self, task) -> None:  # type: ignore[no-untyped-def]
        task.metrics = {"train_loss": 1.0 + (task.client * 2654435761 % 1000) / 1000.0}

    def apply(self, tasks) -> int:  # type: ignore[no-untyped-def]
        self.version += 1
        return self.version

    def release(self, task, keep_state: bool) -> None:  # type: ignore[no-untyped-def]
        pass

    def failed(self, task) -> None:  # type: ignore[no-untyped-def]
        pass

    def evaluate(self) -> dict[str, float]:
        return {}


class _NoRecorder:
    def task_ended(self, task) -> None:  # type: ignore[no-untyped-def]
        pass

    def evaluated(self, *args) -> None:  # type: ignore[no-untyped-def]
        pass

    def progress(self, *args) -> None:  # type: ignore[no-untyped-def]
        pass


DATA_OPTIONS: dict = {}
"""--blocks, --natural, --client-test-fraction, --eval-every (set by main in the child)."""


def _scenario_dict(clients: int, rounds: int, backend: str, samples: int, cohort: int | None, features: int,
                   availability: str, selection: str) -> dict:
    avail = {"type": "diurnal", "phases": "population"} if availability == "diurnal" else \
        {"type": "diurnal"} if availability == "diurnal_client" else {"type": "always"}
    dataset = {"name": "synthetic", "synthetic_samples": samples, "synthetic_features": features,
               "synthetic_draws": "blocks" if DATA_OPTIONS.get("blocks") else "client",
               "partition": {"type": "natural" if DATA_OPTIONS.get("natural") else "iid"},
               "client_test_fraction": DATA_OPTIONS.get("client_test_fraction", 0.2)}
    if DATA_OPTIONS.get("user_arrays") is not None:  # users' files mapped from disk, drawn once into that folder
        dataset = {"name": "synthetic", "format": "user_arrays", "root": str(DATA_OPTIONS["user_arrays"]),
                   "generate": {"users": clients, "mean_samples": DATA_OPTIONS["mean_samples"], "test_fraction": 0.2},
                   "synthetic_features": features, "partition": {"type": "natural"}}
    return {
        "name": "scale", "seed": 0,
        "dataset": dataset,
        "model": {"name": "mlp", "hidden": [32]},
        "population": {"num_clients": clients, "availability": avail},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 20, "local_epochs": 1},
        "mode": {"type": "sync", "cohort_fraction": cohort / clients if cohort else 0.01},
        "stop": {"rounds": rounds},
        "evaluation": {"every": DATA_OPTIONS.get("eval_every", 1), "personalized": False},
        "selection": {"name": selection},
        "runtime": {"backend": backend, "num_actors": 2, "placement": "pooled"},
        "output": {"flush_every_s": 60, "progress": False},
    }


def population_only(clients: int, rounds: int, cohort: int | None, availability: str, selection: str) -> None:
    """The clock over the population alone (module docstring); print its figures."""
    import numpy as np

    from fedclock.scenarios.loader import parse_suite
    from fedclock.scenarios.selection_config import build_selector
    from fedclock.scheduling.clock import Clock, TaskCosts
    from fedclock.scheduling.devices import Devices
    from fedclock.scheduling.modes import StopConfig
    from fedclock.scheduling.population import population_availability

    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    before = tree_rss(os.getpid())
    start = time.perf_counter()
    sc = parse_suite(_scenario_dict(clients, rounds, "inline", 10 * clients, cohort, 1, availability, selection),
                     "scale").runs[0]
    devices = Devices.draw(sc.population, sc.seed)
    models = population_availability(sc.population, sc.seed)
    selector = build_selector(sc.selection, sc.seed)
    stamps: list[float] = []
    backend = _FreeTasks()
    apply = backend.apply

    def stamped(tasks) -> int:  # type: ignore[no-untyped-def]
        stamps.append(time.perf_counter())
        return apply(tasks)

    backend.apply = stamped  # type: ignore[method-assign]
    clock = Clock(devices=devices, availability=models, client_sizes=np.full(clients, 20, dtype=np.int64),
                  costs=TaskCosts(40_000, 40_000, lambda n: 5.0 * n), mode=sc.mode, stop=StopConfig(rounds=rounds),
                  eval_every=10**9, backend=backend, recorder=_NoRecorder(), seed=sc.seed, selector=selector)
    setup = time.perf_counter() - start
    run_start = time.perf_counter()
    clock.run()
    wall = time.perf_counter() - run_start
    stop.set()
    thread.join()
    steps = np.diff(np.asarray([run_start] + stamps))
    steady = float(np.median(steps[2:])) if len(steps) > 2 else float(steps.mean())
    print(f"clients={clients} cohort={cohort or max(1, clients // 100)} rounds={rounds} population_only=1 "
          f"availability={availability} selection={selection} setup_s={setup:.2f} s_per_round={wall / rounds:.4f} "
          f"steady_s_per_round={steady:.4f} max_s_per_round={float(steps.max()):.4f} "
          f"peak_rss_MiB={peak[0] / 2**20:.0f} start_rss_MiB={before / 2**20:.0f} data_MiB=0 "
          f"virtual_s={clock.env.now:.0f}", flush=True)


def one(clients: int, rounds: int, backend: str, samples: int, cohort: int | None, features: int,
        availability: str = "always", selection: str = "uniform", memory_phases: bool = False) -> None:
    """Run one population size here and print its figures."""
    from fedclock.actors.runtime import Runtime
    from fedclock.scenarios.experiment import run_scenario
    from fedclock.scenarios.data.federation import build_federation
    from fedclock.scenarios.loader import parse_suite

    peak = [0, 0]  # RSS, PSS
    at_peak: dict[str, int] = {}  # the PSS by role when the PSS peaked
    stop = threading.Event()

    phases = _DriverPhases(threading.get_ident()) if memory_phases else None

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            by_role = tree_pss_by_role(os.getpid())
            if sum(by_role.values()) > peak[1]:
                peak[1] = sum(by_role.values())
                at_peak.clear()
                at_peak.update(by_role)
                if DATA_OPTIONS.get("user_arrays") is not None:  # how much of that peak is the mapped files' pages
                    folder = str(Path(DATA_OPTIONS["user_arrays"]).resolve())
                    at_peak["mapped_data"] = tree_pss_of_files(os.getpid(), folder)
            if phases is not None:
                phases.sample(by_role["driver"])
            time.sleep(0.1 if phases is None else 0.02)

    def scenario(n_rounds: int):
        return parse_suite(_scenario_dict(clients, n_rounds, backend, samples, cohort, features, availability,
                                          selection), "scale").runs[0]

    from fedclock.scheduling.clock import Clock

    stamps: list[float] = []  # the first evaluation (set-up done), then every aggregation (a round each)
    evaluate, aggregate = Clock.evaluate, Clock.aggregate

    def evaluated(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not stamps:
            stamps.append(time.perf_counter())
        return evaluate(self, *args, **kwargs)

    def aggregated(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        stamps.append(time.perf_counter())
        return aggregate(self, *args, **kwargs)

    Clock.evaluate, Clock.aggregate = evaluated, aggregated  # type: ignore[method-assign]
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    if phases is not None:  # the run's own steps as phases too
        import fedclock.scenarios.experiment as experiment
        phases.after(Runtime, "session", "session (the data put)")
        phases.after(experiment, "_run_clock", "clock run")
        phases.after(experiment, "run_analysis", "analysis")
        phases.after(experiment, "_client_table", "client table")
        from fedclock.scenarios.results import ResultsWriter
        phases.after(ResultsWriter, "close", "writer closed")
    runtime = Runtime(backend)
    first = scenario(1)
    _phase(phases, "imports")
    built = time.perf_counter()
    federation = build_federation(first.dataset, clients, first.seed)  # built once, shared by both runs
    built = time.perf_counter() - built
    _phase(phases, "data built")
    data = sum(t.element_size() * t.nelement() for t in (federation.x, federation.y) + (
        () if federation.mapped else (federation.x_test, federation.y_test)))  # mapped: the test rows are in x, y
    with tempfile.TemporaryDirectory() as tmp:
        run_scenario(first, runtime, Path(tmp) / "warmup", federation=federation)
        _phase(phases, "warm-up run")
        start = time.perf_counter()
        stamps.clear()
        run_scenario(scenario(rounds), runtime, Path(tmp) / "run", federation=federation)
        wall = time.perf_counter() - start
        _phase(phases, "measured run")
    import numpy as np
    setup = stamps[0] - start if stamps else float("nan")
    steps = np.diff(np.asarray(stamps))
    steady = float(np.median(steps[2:])) if len(steps) > 2 else float(steps.mean()) if len(steps) else float("nan")
    cpu = sum(tree_cpu_by_pid(os.getpid()).values())  # before the Ray processes end
    runtime.close()
    stop.set()
    thread.join()
    print(f"clients={clients} cohort={cohort or max(1, clients // 100)} rounds={rounds} "
          f"availability={availability} selection={selection} federation_s={built:.1f} setup_s={setup:.1f} "
          f"steady_s_per_round={steady:.3f} "
          f"s_per_round={wall / rounds:.3f} peak_rss_MiB={peak[0] / 2**20:.0f} peak_pss_MiB={peak[1] / 2**20:.0f} "
          f"data_MiB={data / 2**20:.0f} cpu_s={cpu:.1f} "
          f"peak_pss_by_role_MiB={','.join(f'{k}:{v / 2**20:.0f}' for k, v in at_peak.items())}", flush=True)
    if phases is not None:
        phases.report()


def _phase(phases: "_DriverPhases | None", name: str) -> None:
    if phases is not None:
        phases.end(name)


class _DriverPhases:
    """``--memory-phases``: the driver's own PSS (this process, ``/proc/self/smaps_rollup``)
    at each phase boundary of :func:`one` and its peak within each phase, with the driver's
    call stack (its innermost fedclock frames) at that peak: where the driver's memory peaks."""

    def __init__(self, main_thread: int) -> None:
        self.main = main_thread
        self.peak, self.where = 0, ""
        self.rows: list[tuple[str, int, int, str]] = []  # phase, PSS at its end, its peak, where

    def sample(self, pss: int) -> None:
        if pss > self.peak:
            self.peak, self.where = pss, self._stack()
        self.now = pss

    def _stack(self) -> str:
        import traceback
        frame = sys._current_frames().get(self.main)
        if frame is None:
            return "?"
        ours = [f for f in traceback.extract_stack(frame) if "fedclock" in f.filename or "wt-" in f.filename
                or "/actors/" in f.filename or "/scenarios/" in f.filename or "/scheduling/" in f.filename]
        return " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(ours[-5:]))

    def end(self, name: str) -> None:
        from proctree import tree_pss_by_role
        time.sleep(0.05)
        now = tree_pss_by_role(os.getpid())["driver"]
        if os.environ.get("SCALE_TRIM"):
            import ctypes
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            time.sleep(0.05)
            trimmed = tree_pss_by_role(os.getpid())["driver"]
            name += f" (trimmed {trimmed / 2**20:.0f})"
        self.rows.append((name, now, max(self.peak, now), self.where))
        self.peak, self.where = 0, ""

    def after(self, owner: object, name: str, label: str) -> None:
        """End a phase called ``label`` each time ``owner.name`` returns."""
        inner = getattr(owner, name)

        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = inner(*args, **kwargs)
            self.end(label)
            return out

        setattr(owner, name, wrapped)

    def report(self) -> None:
        for name, now, top, where in self.rows:
            print(f"memory_phase={name!r} driver_pss_end_MiB={now / 2**20:.0f} driver_pss_peak_MiB={top / 2**20:.0f} "
                  f"at={where}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("ray", "inline"), default="ray")
    parser.add_argument("--samples", type=int, default=100_000, help="synthetic samples in all (at least 4 a client)")
    parser.add_argument("--features", type=int, default=60, help="synthetic features (a million clients: 20)")
    parser.add_argument("--cohort", type=int, default=None, help="clients a round (default 1%%)")
    parser.add_argument("--out", type=Path, default=None, help="also write the lines to this file")
    parser.add_argument("--availability", choices=("always", "diurnal", "diurnal_client"), default="always",
                        help="diurnal: phases drawn at once (flat arrays); diurnal_client: one model per client")
    parser.add_argument("--selection", choices=("uniform", "oort"), default="uniform")
    parser.add_argument("--blocks", action="store_true", help="synthetic_draws: blocks (many clients a call)")
    parser.add_argument("--natural", action="store_true", help="partition: natural (synthetic's own per-client data)")
    parser.add_argument("--client-test-fraction", type=float, default=0.2)
    parser.add_argument("--eval-every", type=int, default=1, help="evaluation.every (the global test set grows "
                        "with the clients)")
    parser.add_argument("--population-only", action="store_true",
                        help="no training and no data: the clock, availability and selection alone")
    parser.add_argument("--memory-phases", action="store_true",
                        help="print the driver's PSS at each phase's end, its peak in each and the call stack there")
    parser.add_argument("--user-arrays", type=Path, default=None, metavar="DIR",
                        help="dataset.format user_arrays: every user's samples in files under DIR/generated, mapped "
                        "and read when the user trains (drawn by the first run, reused by later ones)")
    parser.add_argument("--mean-samples", type=int, default=2,
                        help="--user-arrays: generate.mean_samples (a user: max(4, round(mean x lognormal(0, 0.8))))")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    DATA_OPTIONS.update(blocks=args.blocks, natural=args.natural, client_test_fraction=args.client_test_fraction,
                        eval_every=args.eval_every, user_arrays=args.user_arrays, mean_samples=args.mean_samples)
    if args.one and args.population_only:
        population_only(args.clients[0], args.rounds, args.cohort, args.availability, args.selection)
        return
    if args.one:
        one(args.clients[0], args.rounds, args.backend, args.samples, args.cohort, args.features, args.availability,
            args.selection, args.memory_phases)
        return
    lines: list[str] = []
    base: tuple[int, float, float] | None = None  # (clients, peak RSS and PSS less data) of the smallest size
    for n in sorted(args.clients):
        extra = ["--cohort", str(args.cohort)] if args.cohort else []
        extra += ["--availability", args.availability, "--selection", args.selection]
        extra += ["--population-only"] if args.population_only else []
        extra += ["--client-test-fraction", str(args.client_test_fraction), "--eval-every", str(args.eval_every)]
        extra += (["--blocks"] if args.blocks else []) + (["--natural"] if args.natural else [])
        extra += ["--memory-phases"] if args.memory_phases else []
        extra += ["--user-arrays", str(args.user_arrays), "--mean-samples", str(args.mean_samples)] \
            if args.user_arrays is not None else []
        out = subprocess.run([sys.executable, __file__, "--one", "--clients", str(n), "--rounds", str(args.rounds),
                              "--backend", args.backend, "--samples", str(args.samples),
                              "--features", str(args.features), *extra],
                             capture_output=True, text=True, check=False)
        found = [ln for ln in out.stdout.splitlines() if ln.startswith("clients=")]
        for ln in out.stdout.splitlines():
            if ln.startswith("memory_phase="):
                print(f"clients={n} {ln}", flush=True)
        line = found[-1] if found else f"clients={n} failed:\n{out.stderr[-3000:]}"
        if found:
            fields = dict(f.split("=") for f in line.split())
            beyond = (float(fields["peak_rss_MiB"]) - float(fields["data_MiB"])) * 2**20
            beyond_pss = (float(fields.get("peak_pss_MiB", fields["peak_rss_MiB"])) - float(fields["data_MiB"])) * 2**20
            if base is None:
                base = (n, beyond, beyond_pss)
            elif n > base[0]:
                line += (f" per_client_B={(beyond - base[1]) / (n - base[0]):.0f}"
                         f" per_client_pss_B={(beyond_pss - base[2]) / (n - base[0]):.0f}")
        line = f"backend={'none' if args.population_only else args.backend} " + line + \
            " load={:.1f},{:.1f},{:.1f}".format(*os.getloadavg())
        lines.append(line)
        print(line, flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
