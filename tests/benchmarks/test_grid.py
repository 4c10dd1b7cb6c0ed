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
    figures = {"cpus": 2, "backend": "inline", "runs": 16, "jobs": "auto",
               "sequential": {"wall_s": 40.0, "cpu_s": 38.0},
               "parallel": {"wall_s": 25.0, "cpu_s": 45.0}, "speedup": 1.6,
               "mean_run_wall_s": {"sequential": 2.0, "parallel": 2.5}, "per_run_slowdown": 1.25, "tables_equal": True}
    line = grid.report(figures)
    assert "speed-up 1.60x" in line and "per-run slowdown 1.25x" in line and "sequential 40.0 s" in line


def test_one_round_file_is_quickstarts_fedavg_on_four_clients_for_one_round(tmp_path: Path) -> None:
    grid = load_script("grid")
    (run,) = load_suite(grid.one_round_file(tmp_path)).runs
    assert (run.algorithm.name, run.population.num_clients, run.stop.rounds) == ("fedavg", 4, 1)
