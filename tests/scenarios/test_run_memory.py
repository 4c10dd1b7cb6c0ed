"""What a finished run leaves in memory (``scenarios/experiment.py``)."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios import experiment
from fedclock.scheduling.clock import Clock
from tests.conftest import scenario


def _clocks_alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is Clock)


def test_a_large_run_is_collected_when_it_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of at least COLLECT_AFTER_CLIENTS clients (here 3 of 3) leaves no clock behind.
    Below it (threshold 4) the clock stays, in its reference cycles, until Python's next full
    collection (automatic collections are held off here so that the test can tell; checked
    when the test was written: it then fails with one clock alive). About 1-3 s: one tiny
    run, the first of a test process pays the FLOP count's imports."""
    monkeypatch.setattr(experiment, "COLLECT_AFTER_CLIENTS", 3)
    gc.collect()
    gc.disable()
    try:
        experiment.run_scenario(scenario(stop={"rounds": 1}, evaluation={"every": 1, "personalized": False}),
                                Runtime("inline"), tmp_path)
        assert _clocks_alive() == 0
    finally:
        gc.enable()
        gc.collect()
