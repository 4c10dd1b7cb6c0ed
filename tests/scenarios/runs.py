"""Whole runs shared by the scenario tests: a run crashed after a checkpoint and resumed
must end with the same tables as the same run uninterrupted."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from tests.conftest import scenario
from tests.scenarios.test_checkpoints import Crash, _assert_same, _crash_at


def assert_resume_is_bit_identical(sections: dict[str, Any], out: Path, monkeypatch: pytest.MonkeyPatch,
                                   every: int, crash: int,
                                   before_resume: Callable[[Path], None] | None = None) -> Path:
    """Run the scenario ``sections`` inline under ``out/plain``; run it again under
    ``out/crashed`` with a checkpoint every ``every`` server versions, crash it when version
    ``crash`` is applied, call ``before_resume`` on that folder, resume it, and assert its
    tables equal the uninterrupted run's (wall times aside). Returns ``out/plain``."""
    inline = Runtime("inline")
    run_scenario(scenario(**sections), inline, out / "plain")
    with_ckpt = scenario(**sections, output={"checkpoint_every": every, "progress": False})
    _crash_at(monkeypatch, crash)
    with pytest.raises(Crash):
        run_scenario(with_ckpt, inline, out / "crashed")
    monkeypatch.undo()
    if before_resume is not None:
        before_resume(out / "crashed")
    run_scenario(with_ckpt, inline, out / "crashed", resume=True)
    _assert_same(out / "plain", out / "crashed")
    return out / "plain"
