"""The grid benchmark script: its grid is the quickstart's FedAvg and FedBuff runs times the
seeds asked for, on the backend asked for, and its report line names every figure."""
from __future__ import annotations

from pathlib import Path

from fedclock.scenarios.loader import load_suite
from tests.benchmarks.scripts import load_script


def test_grid_file_is_fedavg_and_fedbuff_times_the_seeds(tmp_path: Path) -> None:
    grid = load_script("grid")
    suite = load_suite(grid.grid_file(tmp_path, 8, None, "ray"))
    assert len(suite.runs) == 16 and suite.seeds == tuple(range(8))
    assert {(s.name, s.algorithm.name) for s in suite.runs} == {("fedavg-sync", "fedavg"), ("fedbuff", "fedbuff")}
    assert {s.runtime.backend for s in suite.runs} == {"ray"} and {s.stop.virtual_time_s for s in suite.runs} == {150}
    short = load_suite(grid.grid_file(tmp_path, 1, 5.0, "inline"))
    assert len(short.runs) == 2 and short.runs[0].stop.virtual_time_s == 5.0


def test_report_line_names_speedup_and_per_run_slowdown() -> None:
    grid = load_script("grid")
    side = {"wall_s": 40.0, "cpu_s": 38.0, "setup_cpu_s": 6.0, "mean_run_wall_s": 2.0, "mean_run_cpu_s": 1.9,
            "first_job_cpu_s": 4.6, "later_job_cpu_s": 1.8}
    figures = {"machine": {"physical_cores": 16, "logical_cpus": 16, "load_average": 0.2}, "load_average_after": 3.5,
               "backend": "inline", "runs": 16, "start": "forkserver", "sequential": side,
               "parallel": {**side, "workers": 8, "wall_s": 25.0, "cpu_s": 45.0, "mean_run_wall_s": 2.5,
                            "mean_run_cpu_s": 2.0, "later_job_cpu_s": None},
               "speedup": 1.6, "per_run_wall_slowdown": 1.25, "per_run_cpu_slowdown": 1.05, "tables_equal": True}
    line = grid.report(figures)
    assert line.startswith("| 16 cores / 16 CPUs, load 0.2-3.5 | inline, 16 runs, forkserver | "
                           "40.0 s (CPU 38.0, set-up 6.0)")
    assert ("| 8 workers: 25.0 s (CPU 45.0, set-up 6.0) | 1.60x | 2.00 -> 2.50 s (1.25x) | "
            "1.90 -> 2.00 s (1.05x)") in line
    assert line.endswith("| 4.60 / 1.80 -> 4.60 / - | yes |")


def test_one_round_file_is_quickstarts_fedavg_on_four_clients_for_one_round(tmp_path: Path) -> None:
    grid = load_script("grid")
    (run,) = load_suite(grid.one_round_file(tmp_path)).runs
    assert (run.algorithm.name, run.population.num_clients, run.stop.rounds) == ("fedavg", 4, 1)
