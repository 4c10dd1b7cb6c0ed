"""Dispatches under every availability model are pinned: the cohorts, picks and task events
of small runs (Periodic, Markov, Diurnal, TraceReplay, a mix, each with and without timeline
gates; sync, sync with deadline or timeout, async, async with timeout, windowed) equal those
recorded in ``data/availability_runs.json`` with the clock that scanned every client."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scheduling.availability_cases import CASES, case_id, run_case

RECORDED = json.loads((Path(__file__).parent / "data" / "availability_runs.json").read_text())


def test_every_case_is_recorded() -> None:
    assert sorted(RECORDED) == sorted(case_id(*c) for c in CASES)


@pytest.mark.parametrize("model,gate,mode", CASES, ids=[case_id(*c) for c in CASES])
def test_run_matches_the_recorded_scan(model: str, gate: bool, mode: str) -> None:
    assert run_case(model, gate, mode) == RECORDED[case_id(model, gate, mode)]
