"""The shipped PLGA quick scenario: stragglers emerge from slow devices and arrive exactly
1..5 rounds late; the periodic-missing form skips rounds instead."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "spfl_plga"
# a small MLP instead of the CNN keeps the test fast; durations stay in the same windows
FAST = ["stop.versions=12", "evaluation.every=1000", "model.name=mlp", "evaluation.personalized=false"]


def run(name: str, tmp_path: Path) -> pd.DataFrame:
    suite = load_suite(LIBRARY / "table2_plga_quick.yaml", FAST)
    s = next(r for r in suite.runs if r.name == name)
    run_scenario(s, Runtime("inline"), tmp_path)
    return pd.read_parquet(tmp_path / "events.parquet")


def test_slow_devices_give_staleness_one_to_five(tmp_path: Path) -> None:
    events = run("plga", tmp_path)
    applied = events[events.status == "applied"]
    for client in range(10):
        mine = applied[applied.client == client]
        assert len(mine) >= 1
        want = max(0, client - 4)  # clients 5..9 are 1..5 rounds late, every time
        assert set(mine.staleness) == {want}, (client, sorted(mine.staleness))
        # re-dispatched right after the window that applied it: every (want + 1) windows
        assert sorted(mine["round"]) == list(range(0, 12 - want, want + 1))[:len(mine)]


def test_periodic_missing_form_skips_rounds_without_staleness(tmp_path: Path) -> None:
    events = run("plga-periodic-missing", tmp_path)
    assert (events[events.status == "applied"].staleness == 0).all()
    for k in range(1, 6):
        rounds = sorted(events[events.client == 4 + k]["round"])
        assert rounds == list(range(0, 12, k + 1))
