"""A study grid one after another against side by side: ``run_grid(jobs=1)`` and ``jobs=N``.

The grid is the quickstart's FedAvg (sync) and FedBuff runs (``scenarios/quickstart.yaml``,
12 digit clients, 150 virtual seconds) times ``--seeds`` seeds: 16 (run, seed) jobs by
default. Each side is one whole cold process (this script with ``--child``, which calls
:func:`fedclock.scenarios.api.run_grid`, as ``fedclock run FILE --jobs N`` does), timed from
before it starts to its exit (CPU: user + system of it and every descendant it waited for).
One after another (``jobs=1``) runs every job in that process on one runtime, as ``fedclock
run FILE`` does.

Per run, from each job's outcome (:class:`fedclock.scenarios.grid.Outcome`): its wall seconds
and its CPU seconds (the process time of the worker while it ran the job), and whether it was
its worker's first job (the one that pays what a process sets up at its first run). The per-run wall
slowdown is the mean run's wall time side by side over one after another; the per-run CPU
slowdown the same of CPU seconds. A wall slowdown with a CPU slowdown of 1 means runs waited
for a CPU (more threads than cores); a CPU slowdown means each run did more work or ran slower
on shared hardware (set-up repeated per worker, a core's hardware threads, caches, memory
bandwidth, a lower all-core clock). Set-up CPU: the side's CPU seconds less its runs'. The two
sides' tables must be equal (every column of ``summary.parquet`` but the wall time and the
folder); the script fails otherwise. The machine's physical cores, logical CPUs, processor
and load average are in the figures. The row's second-last column: mean CPU seconds of the
workers' first jobs / of their later jobs (one after another: the first run / the others).

    python benchmarks/grid.py --out results.json                  # inline, --jobs auto
    python benchmarks/grid.py --backend ray --jobs 8 --out r.json
    python benchmarks/grid.py --seeds 16 --jobs 16,12,8 --out j.json   # one sequential side, three --jobs
    python benchmarks/grid.py --start spawn --out s.json          # workers spawned (each imports on its own)
    python benchmarks/grid.py --quickstart --out q.json           # cold `fedclock run quickstart`, inline and Ray

``--start spawn`` replaces the forkserver with ``spawn`` in the child (the ablation of
:func:`fedclock.scenarios.grid.worker_context`). ``--quickstart`` instead times cold
whole-process runs of the quickstart file (its five runs) on the inline and the Ray backend,
best of ``--repeats``. The last line printed is the row of ``benchmarks/RESULTS.md``'s table.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
GRID_RUNS = ("fedavg-sync", "fedbuff")


def grid_file(folder: Path, seeds: int, virtual_time_s: float | None, backend: str) -> Path:
    """The quickstart's FedAvg and FedBuff runs times ``seeds`` seeds, written to ``folder``."""
    spec = yaml.safe_load(QUICKSTART.read_text(encoding="utf-8"))
    spec["runs"] = [r for r in spec["runs"] if r["name"] in GRID_RUNS]
    spec["name"] = "grid"
    spec.pop("seed", None)
    spec["seeds"] = list(range(seeds))
    spec["runtime"] = {"backend": backend}
    spec["output"] = {"progress": False}
    if virtual_time_s is not None:
        spec["stop"] = {"virtual_time_s": virtual_time_s}
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def timed(command: list[str]) -> dict[str, float]:
    """Run ``command`` to its end; its wall seconds and the CPU seconds of it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def fedclock(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedclock.scenarios.cli", "run", *args]


def _spawn_context() -> multiprocessing.context.SpawnContext:
    """Workers that import on their own (``--start spawn``)."""
    return multiprocessing.get_context("spawn")


def child(path: Path, out: Path, report_to: Path, jobs: str, start: str) -> None:
    """One side, in this (cold) process: the grid of ``path`` with ``jobs`` workers; each job's
    wall and CPU seconds to ``report_to``. Workers start as the console script starts them
    (:func:`fedclock.scenarios.grid_workers.start_early` before PyTorch is imported here)."""
    from fedclock.scenarios.grid_workers import start_early

    if start != "spawn" and jobs != "1":
        start_early()
    from fedclock.scenarios import grid
    from fedclock.scenarios.api import run_grid
    from fedclock.scenarios.loader import load_suite

    if start == "spawn":
        grid.worker_context = _spawn_context
    chosen: list[int] = []
    outcomes = run_grid(load_suite(path), out, jobs if jobs == "auto" else int(jobs),
                        on_plan=lambda workers, todo: chosen.append(workers))
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    if start != "spawn" and hasattr(server, "_stop"):  # wait for the forkserver: its CPU and its workers' count
        server._stop()  # (multiprocessing's own shut-down of it; otherwise it outlives this process unwaited)
    failed = [f"{o.job.label}: {o.error}" for o in outcomes if o.error is not None]
    if failed:
        raise SystemExit("\n".join(failed))
    firsts = {}
    for o in outcomes:  # a worker takes jobs in the plan's order: its first is its lowest index
        firsts.setdefault(o.worker, o.job.index)
    runs = [{"label": o.job.label, "wall_s": o.wall_s, "cpu_s": o.cpu_s, "worker": o.worker,
             "first_in_worker": firsts[o.worker] == o.job.index} for o in outcomes]
    report_to.write_text(json.dumps({"workers": chosen[0], "runs": runs}), encoding="utf-8")


def machine() -> dict[str, Any]:
    """The machine's physical cores, logical CPUs, processor and load average now."""
    from fedclock.scenarios.grid import machine_cpus, physical_cores

    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "unknown")
    return {"physical_cores": physical_cores(), "logical_cpus": machine_cpus(), "processor": model,
            "load_average": os.getloadavg()[0], "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def side(path: Path, out: Path, jobs: str, start: str) -> dict[str, Any]:
    """One side as a whole cold process: its wall and CPU seconds and its runs' own."""
    report_to = out.with_suffix(".json")
    whole = timed([sys.executable, str(Path(__file__).resolve()), "--child", str(path), str(out), str(report_to),
                   "--jobs", jobs, "--start", start])
    got = json.loads(report_to.read_text(encoding="utf-8"))
    runs = got["runs"]
    run_cpu = sum(r["cpu_s"] for r in runs)
    first = [r["cpu_s"] for r in runs if r["first_in_worker"]]
    later = [r["cpu_s"] for r in runs if not r["first_in_worker"]]
    return {**whole, "workers": got["workers"], "runs": runs,
            "mean_run_wall_s": statistics.fmean(r["wall_s"] for r in runs),
            "mean_run_cpu_s": statistics.fmean(r["cpu_s"] for r in runs),
            "first_job_cpu_s": statistics.fmean(first), "later_job_cpu_s": statistics.fmean(later) if later else None,
            "setup_cpu_s": whole["cpu_s"] - run_cpu}


def compare_grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The grid one after another, then side by side with each ``--jobs`` value (comma
    separated), each against that one sequential side; figures and the check that they agree."""
    import pandas as pd

    def table(out: Path) -> pd.DataFrame:
        frame = pd.read_parquet(out / "summary.parquet").sort_values(["name", "seed"], ignore_index=True)
        return frame.drop(columns=["wall_time", "out_dir"])

    before = machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = grid_file(folder, args.seeds, args.virtual_time_s, args.backend)
        sequential = side(path, folder / "seq", "1", args.start)
        for i, jobs in enumerate(str(args.jobs).split(",")):
            load = os.getloadavg()[0]
            parallel = side(path, folder / f"par{i}", jobs, args.start)
            same = table(folder / "seq").equals(table(folder / f"par{i}"))
            if not same:
                raise SystemExit(f"the side-by-side tables (--jobs {jobs}) differ from the sequential ones")
            rows.append({"backend": args.backend, "runs": len(parallel["runs"]), "jobs": jobs, "start": args.start,
                         "machine": {**before, "load_average": min(before["load_average"], load)},
                         "load_average_after": os.getloadavg()[0], "sequential": sequential, "parallel": parallel,
                         "speedup": sequential["wall_s"] / parallel["wall_s"],
                         "per_run_wall_slowdown": parallel["mean_run_wall_s"] / sequential["mean_run_wall_s"],
                         "per_run_cpu_slowdown": parallel["mean_run_cpu_s"] / sequential["mean_run_cpu_s"],
                         "tables_equal": same})
    return rows


def one_round_file(folder: Path) -> Path:
    """The quickstart's FedAvg run alone, 4 clients, 1 round (the start-up dominates)."""
    spec = yaml.safe_load(QUICKSTART.read_text(encoding="utf-8"))
    spec.pop("runs")
    spec["name"] = "one_round"
    spec["population"]["num_clients"] = 4
    spec["stop"] = {"rounds": 1}
    spec["output"] = {"progress": False}
    path = folder / "one_round.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def cold_quickstart(args: argparse.Namespace) -> dict[str, Any]:
    """Cold whole-process ``fedclock run quickstart`` and a 1-round 4-client run of its FedAvg
    on each backend, best of ``--repeats``."""
    out: dict[str, Any] = {"cpus": _cpus(), "repeats": args.repeats}
    extra = ["--set", f"stop.virtual_time_s={args.virtual_time_s}"] if args.virtual_time_s is not None else []
    with tempfile.TemporaryDirectory() as folder:
        files = {"": (QUICKSTART, extra), "_1round": (one_round_file(Path(folder)), [])}
        for suffix, (path, more) in files.items():
            for backend in ("inline", "ray"):
                times = []
                for _ in range(args.repeats):
                    with tempfile.TemporaryDirectory() as tmp:
                        times.append(timed(fedclock(str(path), "--quiet", "--backend", backend, "--out", tmp, *more)))
                out[backend + suffix] = min(times, key=lambda t: t["wall_s"])
    return out


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def report(figures: dict[str, Any]) -> str:
    """One line of text for RESULTS.md (for the grid, a row of its table)."""
    if "speedup" not in figures:
        return (f"cpus={figures['cpus']} cold whole process, best of {figures['repeats']}: quickstart inline "
                f"{figures['inline']['wall_s']:.2f} s (CPU {figures['inline']['cpu_s']:.1f}), ray "
                f"{figures['ray']['wall_s']:.2f} s (CPU {figures['ray']['cpu_s']:.1f}); 1 round 4 clients inline "
                f"{figures['inline_1round']['wall_s']:.2f} s (CPU {figures['inline_1round']['cpu_s']:.1f}), ray "
                f"{figures['ray_1round']['wall_s']:.2f} s (CPU {figures['ray_1round']['cpu_s']:.1f})")
    m, s, p = figures["machine"], figures["sequential"], figures["parallel"]
    return (f"| {m['physical_cores']} cores / {m['logical_cpus']} CPUs, load {m['load_average']:.1f}-"
            f"{figures['load_average_after']:.1f} | {figures['backend']}, {figures['runs']} runs, "
            f"{figures['start']} | {s['wall_s']:.1f} s (CPU {s['cpu_s']:.1f}, set-up {s['setup_cpu_s']:.1f}) | "
            f"{p['workers']} workers: {p['wall_s']:.1f} s (CPU {p['cpu_s']:.1f}, set-up {p['setup_cpu_s']:.1f}) | "
            f"{figures['speedup']:.2f}x | {s['mean_run_wall_s']:.2f} -> {p['mean_run_wall_s']:.2f} s "
            f"({figures['per_run_wall_slowdown']:.2f}x) | {s['mean_run_cpu_s']:.2f} -> {p['mean_run_cpu_s']:.2f} s "
            f"({figures['per_run_cpu_slowdown']:.2f}x) | {_split(s)} -> {_split(p)} | "
            f"{'yes' if figures['tables_equal'] else 'NO'} |")


def _split(side: dict[str, Any]) -> str:
    """A side's mean CPU seconds of its workers' first jobs / of their later jobs."""
    later = side.get("later_job_cpu_s")
    return f"{side['first_job_cpu_s']:.2f} / " + ("-" if later is None else f"{later:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("inline", "ray"), default="inline")
    parser.add_argument("--jobs", default="auto",
                        help="worker processes side by side (a number or auto; several, comma separated, are "
                             "each compared with one sequential side)")
    parser.add_argument("--start", choices=("auto", "spawn"), default="auto",
                        help="auto: fedclock's way (forkserver on Linux); spawn: every worker imports on its own")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per run (2 runs: 16 jobs at 8)")
    parser.add_argument("--virtual-time-s", type=float, default=None, help="a shorter budget (tests)")
    parser.add_argument("--quickstart", action="store_true", help="cold whole-process quickstart timings instead")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, help="JSON file for the figures (a .txt line beside it)")
    parser.add_argument("--child", nargs=3, type=Path, metavar=("FILE", "OUT", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(*args.child, jobs=args.jobs, start=args.start)
        return
    if args.out is None:
        parser.error("--out is required")
    figures: Any = cold_quickstart(args) if args.quickstart else compare_grid(args)
    line = report(figures) if args.quickstart else "\n".join(report(row) for row in figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    args.out.with_suffix(".txt").write_text(line + "\n", encoding="utf-8")
    print(line, flush=True)


if __name__ == "__main__":
    main()
