"""Every module of the execution layer stays small enough to hold in mind (issue 32)."""
from __future__ import annotations

from pathlib import Path

MAX_LINES = 250
ACTORS = Path(__file__).resolve().parents[2] / "actors"


def test_no_actors_module_is_over_250_lines() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in ACTORS.glob("*.py")}
    assert sizes, "no modules found"
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
