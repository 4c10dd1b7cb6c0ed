"""``fedclock run FILE --jobs N`` / ``run(..., jobs=N)``: the (run, seed) jobs of a file side by
side in worker processes (:mod:`fedclock.scenarios.grid`)."""
from __future__ import annotations

import json
import queue
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.scenarios.api import run
from fedclock.scenarios.cli import main
from fedclock.scenarios.grid import (GridListener, Job, Outcome, _collect, default_jobs, physical_cores, thread_share,
                                     unslowed_cores)
from fedclock.scenarios.loader import parse_suite

FILE = """\
name: grid
seeds: [4, 1]
dataset: {name: digits}
model: {name: mlp, hidden: [8]}
population: {num_clients: 3}
algorithm: {name: fedavg, local_steps: 3}
stop: {rounds: 3}
runtime: {backend: inline}
runs:
  - {name: a}
  - {name: b, algorithm: {name: fedprox, mu: 0.1, local_steps: 3}}
"""
JOBS = [("a", 4), ("a", 1), ("b", 4), ("b", 1)]


def _tables(job: Path) -> list[pd.DataFrame]:
    return [pd.read_parquet(job / "metrics.parquet").drop(columns=["wall_time"]),
            pd.read_parquet(job / "events.parquet"), pd.read_parquet(job / "clients.parquet")]


def _same_tables(left: Path, right: Path) -> None:
    for a, b in zip(_tables(left), _tables(right)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def _run_id(job: Path) -> str:
    return str(json.loads((job / "run.json").read_text())["run_id"])


@pytest.mark.slow
def test_grid_side_by_side_equals_sequential_names_failures_and_reruns_only_unfinished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four jobs (two runs x two seeds) in two worker processes give
    each job's tables bit for bit as one after another; one job that fails (its folder holds
    a stranger's file) leaves the others to finish, is named at the end with exit status 1,
    and ``unfinished`` (here through the Python API) runs that job alone. About 40 s on the shared
    2-core box at load ~7 (a forkserver imports PyTorch once, two workers forked from it set up
    their first run; it replaces the earlier test of seeds in processes, which started four and
    was marked slow); the rerun of one job runs in this process. Each worker runs two jobs on
    one set of counted costs, as one after another does."""
    path = tmp_path / "g.yaml"
    path.write_text(FILE, encoding="utf-8")
    seq, par = tmp_path / "seq", tmp_path / "par"
    assert main(["run", str(path), "--quiet", "--out", str(seq)]) == 0
    (par / "b" / "seed_1").mkdir(parents=True)
    (par / "b" / "seed_1" / "notes.txt").write_text("mine", encoding="utf-8")
    capsys.readouterr()
    assert main(["run", str(path), "--quiet", "--out", str(par), "--jobs", "2"]) == 1
    captured = capsys.readouterr()
    assert "in 2 worker process(es)" in captured.out
    failed = [line for line in captured.err.splitlines() if line.startswith("fedclock: error:")]
    assert len(failed) == 1 and "b seed 1" in failed[0] and "not a file a fedclock run writes" in failed[0]
    assert "1 of 4 run(s) failed" in captured.err and "--unfinished" in captured.err
    for name, seed in JOBS[:3]:
        _same_tables(seq / name / f"seed_{seed}", par / name / f"seed_{seed}")
    ids = {job: _run_id(par / job[0] / f"seed_{job[1]}") for job in JOBS[:3]}
    (par / "b" / "seed_1" / "notes.txt").unlink()
    result = run(path, out=par, jobs=2, unfinished=True)
    assert {job: _run_id(par / job[0] / f"seed_{job[1]}") for job in JOBS[:3]} == ids  # not run again
    _same_tables(seq / "b" / "seed_1", par / "b" / "seed_1")
    assert sorted(result.runs) == ["a/seed_1", "a/seed_4", "b/seed_1", "b/seed_4"]  # type: ignore[union-attr]
    def summary(out: Path) -> pd.DataFrame:
        frame = pd.read_parquet(out / "summary.parquet").drop(columns=["wall_time", "out_dir"])
        return frame.sort_values(["name", "seed"], ignore_index=True)

    pd.testing.assert_frame_equal(summary(seq), summary(par))


def test_jobs_must_be_a_whole_number_or_auto(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(FILE, encoding="utf-8")
    assert main(["run", str(path), "--jobs", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--jobs: must be at least 1 or auto (got 0)" in err
    assert main(["run", str(path), "--jobs", "many"]) == 2
    assert "must be a whole number or auto (got 'many')" in capsys.readouterr().err


def test_physical_cores_count_the_threads_of_one_core_once(tmp_path: Path) -> None:
    """Four CPUs in two cores of two hardware threads each (Linux's sysfs layout): two cores;
    of the allowed CPUs 0 and 2 (one core) one; a topology that cannot be read counts every CPU."""
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "core_cpus_list").write_text(siblings + "\n", encoding="ascii")
    assert physical_cores(range(4), tmp_path) == 2
    assert physical_cores([0, 2], tmp_path) == 1
    assert physical_cores([0, 1, 5], tmp_path) == 3


def test_a_local_grid_fills_half_the_physical_cores() -> None:
    assert [unslowed_cores(n) for n in (1, 2, 3, 16, 17)] == [1, 1, 1, 8, 8]


def test_default_jobs_are_the_cpus_over_what_one_run_uses() -> None:
    base = {"name": "d", "dataset": {"name": "digits"}, "model": {"name": "mlp"}, "population": {"num_clients": 3},
            "stop": {"rounds": 1}, "algorithm": {"name": "fedavg"}, "seeds": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}
    inline = parse_suite({**base, "runtime": {"backend": "inline", "threads_per_actor": 2}}, "d")
    assert default_jobs(inline, 16, 20) == 8 and default_jobs(inline, 16, 5) == 5 and default_jobs(inline, 1, 5) == 1
    ray = parse_suite({**base, "runtime": {"backend": "ray", "num_actors": 2, "num_cpus": 1.5}}, "d")
    assert default_jobs(ray, 16, 20) == 5  # 16 // (2 x 1.5)
    assert default_jobs(parse_suite(base, "d"), 16, 20) == 16  # num_actors unset: one executor each
    dedicated = parse_suite({**base, "runtime": {"placement": "dedicated"}}, "d")
    assert default_jobs(dedicated, 16, 20) == 5  # 3 clients, an executor each


def test_each_worker_gets_its_whole_share_of_the_cpus_as_threads() -> None:
    """16 CPUs: 8 workers 2 threads each, 5 workers 3 (15 of 16), 16 or more workers one each;
    never none (2 CPUs, 4 workers)."""
    assert thread_share(16, 8) == 2 and thread_share(16, 5) == 3 and thread_share(16, 16) == 1
    assert thread_share(16, 32) == 1 and thread_share(2, 4) == 1 and thread_share(12.0, 4) == 3


def test_an_outcome_carries_its_runs_own_wall_and_cpu_seconds_from_the_worker(tmp_path: Path) -> None:
    """A worker's ``done`` event (summary, wall s, CPU s) fills the job's outcome; its ``start``
    names the worker."""
    pending = [Outcome(Job(0, "a seed 4", tmp_path / "a")), Outcome(Job(1, "b seed 4", tmp_path / "b"))]
    events: queue.Queue[tuple[Any, ...]] = queue.Queue()
    for event in [("start", 7, 0), ("start", 8, 1), ("done", 7, 0, None, 2.5, 1.25),
                  ("failed", 8, 1, "b: broken", "")]:
        events.put(event)
    ended: list[Outcome] = []

    class Heard(GridListener):
        def ended(self, outcome: Outcome) -> None:
            ended.append(outcome)

    _collect(pending, [], events, Heard())
    assert (pending[0].wall_s, pending[0].cpu_s, pending[0].error, pending[0].worker) == (2.5, 1.25, None, 7)
    assert pending[1].error == "b: broken" and pending[1].cpu_s != pending[1].cpu_s  # failed: nan
    assert [o.job.index for o in ended] == [0, 1]
