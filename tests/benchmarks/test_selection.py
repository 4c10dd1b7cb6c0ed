"""The selection benchmark script runs every selector in a tiny setting and writes its table."""
from __future__ import annotations

from pathlib import Path

from tests.benchmarks.scripts import load_script


def test_tiny_run_writes_one_row_per_size(tmp_path: Path) -> None:
    bench = load_script("selection")
    printed: list[str] = []
    args = ["--sizes", "3000", "--cohort", "10", "--rounds", "2", "--clock", "cpu", "--out", str(tmp_path / "t.md")]
    bench.main(args, out=printed.append)
    lines = (tmp_path / "t.md").read_text().splitlines()
    assert lines == printed and len(lines) == 4
    assert lines[1].startswith("| clients | uniform | oort | tifl | power_of_choice | fedcs |")
    assert lines[3].startswith("| 3,000 |") and lines[3].count(" / ") == 5
