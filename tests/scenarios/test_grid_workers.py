"""How a grid's worker processes start (:mod:`fedclock.scenarios.grid_workers`)."""
from __future__ import annotations

import sys

from fedclock.scenarios.entry import asks_for_workers
from fedclock.scenarios.grid_workers import PRELOAD, worker_context


def test_linux_forks_workers_from_a_server_that_imported_the_run_once() -> None:
    """On Linux the workers come from a forkserver preloading the grid, pandas and PyTorch's
    lazily imported compiler front end; elsewhere they are spawned."""
    context = worker_context()
    if sys.platform.startswith("linux"):
        assert context.get_start_method() == "forkserver"
        assert PRELOAD == ("fedclock.scenarios.grid", "pandas", "torch._dynamo")
    else:
        assert context.get_start_method() == "spawn"


def test_only_a_run_with_jobs_other_than_one_starts_workers_early() -> None:
    assert asks_for_workers(["run", "study.yaml", "--jobs", "auto"])
    assert asks_for_workers(["run", "study.yaml", "--quiet", "--jobs=4", "--unfinished"])
    assert not asks_for_workers(["run", "study.yaml", "--jobs", "1"])
    assert not asks_for_workers(["run", "study.yaml", "--unfinished"])
    assert not asks_for_workers(["reproduce", "fedbuff", "--jobs", "4"])
    assert not asks_for_workers(["run", "--resume", "results/x", "--jobs", "2"])
    assert not asks_for_workers([]) and not asks_for_workers(["run", "study.yaml", "--jobs"])
