"""The README stays true: its scenario example validates, and CI runs its test command."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedclock.scenarios.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_scenario_example_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sections, timeline = re.findall(r"```yaml\n(.*?)```", README, re.S)[:2]
    path = tmp_path / "example.yaml"
    path.write_text(sections + timeline, encoding="utf-8")
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_ci_runs_exactly_the_readme_test_command() -> None:
    command = "pip install -e '.[test]' && pytest -n 2"
    assert command in README
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    assert command in lines
    # after it only the documented extra step: the numerics tests under the lower kernel paths
    assert lines[lines.index(command) + 1:] == ["python -m tests.kernel_paths"]
    assert "python -m tests.kernel_paths" in README
    # in a virtual environment made anew before it (the newest versions the ranges allow)
    assert any(ln.startswith("python3 -m venv --clear") for ln in lines[:lines.index(command)])
