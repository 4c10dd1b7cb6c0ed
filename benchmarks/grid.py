"""A study grid one after another against side by side: ``fedclock run GRID`` and ``--jobs N``.

The grid is the quickstart's FedAvg (sync) and FedBuff runs (``scenarios/quickstart.yaml``,
12 digit clients, 150 virtual seconds) times ``--seeds`` seeds: 16 (run, seed) jobs by
default. Each side is one whole cold process, timed from before it starts to its exit (CPU:
user + system of it and every descendant it waited for); the per-run slowdown is the mean
of the runs' own wall times (``summary.parquet``'s ``wall_time``, from a run's start to its
end, imports excluded) side by side over one after another. The two sides' tables must be
equal (every column of ``summary.parquet`` but the wall time and the folder); the script
fails otherwise.

    python benchmarks/grid.py --out results.json                  # inline, --jobs auto
    python benchmarks/grid.py --backend ray --jobs 8 --out r.json
    python benchmarks/grid.py --quickstart --out q.json           # cold `fedclock run quickstart`, inline and Ray

``--quickstart`` instead times cold whole-process runs of the quickstart file (its five runs)
on the inline and the Ray backend, best of ``--repeats``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
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


def compare_grid(args: argparse.Namespace) -> dict[str, Any]:
    """The grid one after another, then side by side; figures and the check that they agree."""
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = grid_file(folder, args.seeds, args.virtual_time_s, args.backend)
        sequential = timed(fedclock(str(path), "--quiet", "--out", str(folder / "seq")))
        parallel = timed(fedclock(str(path), "--quiet", "--out", str(folder / "par"), "--jobs", str(args.jobs)))
        tables = [pd.read_parquet(folder / side / "summary.parquet").sort_values(["name", "seed"], ignore_index=True)
                  for side in ("seq", "par")]
    same = tables[0].drop(columns=["wall_time", "out_dir"]).equals(tables[1].drop(columns=["wall_time", "out_dir"]))
    if not same:
        raise SystemExit("the side-by-side tables differ from the sequential ones")
    runs = len(tables[0])
    seq_run, par_run = float(tables[0]["wall_time"].mean()), float(tables[1]["wall_time"].mean())
    return {"backend": args.backend, "runs": runs, "jobs": args.jobs, "cpus": _cpus(),
            "sequential": sequential, "parallel": parallel, "speedup": sequential["wall_s"] / parallel["wall_s"],
            "mean_run_wall_s": {"sequential": seq_run, "parallel": par_run},
            "per_run_slowdown": par_run / seq_run, "tables_equal": same}


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
    """One line of text for RESULTS.md."""
    if "speedup" not in figures:
        return (f"cpus={figures['cpus']} cold whole process, best of {figures['repeats']}: quickstart inline "
                f"{figures['inline']['wall_s']:.2f} s (CPU {figures['inline']['cpu_s']:.1f}), ray "
                f"{figures['ray']['wall_s']:.2f} s (CPU {figures['ray']['cpu_s']:.1f}); 1 round 4 clients inline "
                f"{figures['inline_1round']['wall_s']:.2f} s (CPU {figures['inline_1round']['cpu_s']:.1f}), ray "
                f"{figures['ray_1round']['wall_s']:.2f} s (CPU {figures['ray_1round']['cpu_s']:.1f})")
    s, p = figures["sequential"], figures["parallel"]
    return (f"cpus={figures['cpus']} backend={figures['backend']} runs={figures['runs']} jobs={figures['jobs']}: "
            f"sequential {s['wall_s']:.1f} s (CPU {s['cpu_s']:.1f}), "
            f"--jobs {p['wall_s']:.1f} s (CPU {p['cpu_s']:.1f}); "
            f"speed-up {figures['speedup']:.2f}x; mean run {figures['mean_run_wall_s']['sequential']:.2f} s -> "
            f"{figures['mean_run_wall_s']['parallel']:.2f} s (per-run slowdown {figures['per_run_slowdown']:.2f}x); "
            f"tables equal: {figures['tables_equal']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("inline", "ray"), default="inline")
    parser.add_argument("--jobs", default="auto", help="worker processes side by side (a number or auto)")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per run (2 runs: 16 jobs at 8)")
    parser.add_argument("--virtual-time-s", type=float, default=None, help="a shorter budget (tests)")
    parser.add_argument("--quickstart", action="store_true", help="cold whole-process quickstart timings instead")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the figures (a .txt line beside it)")
    args = parser.parse_args(argv)
    figures = cold_quickstart(args) if args.quickstart else compare_grid(args)
    line = report(figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    args.out.with_suffix(".txt").write_text(line + "\n", encoding="utf-8")
    print(line, flush=True)


if __name__ == "__main__":
    main()
