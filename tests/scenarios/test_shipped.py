"""The shipped scenario library: every file validates, and `fedclock list scenarios` lists
each one with a one-line description."""
from __future__ import annotations

from pathlib import Path

import pytest

from fedclock.scenarios.cli import main, scenario_dir, shipped_scenarios
from fedclock.scenarios.loader import read_yaml

SHIPPED = shipped_scenarios()


def test_library_layout() -> None:
    root = scenario_dir()
    assert root / "quickstart.yaml" in SHIPPED
    library = [p for p in SHIPPED if "library" in p.relative_to(root).parts]
    assert library, "no scenario files under scenarios/library/"
    engine_examples = {root / "library" / "async_heterogeneous.yaml"}  # the engine's own example, by name
    for path in library:  # one directory per paper (or topic): library/<dir>/<file>.yaml
        if path not in engine_examples:
            assert len(path.relative_to(root / "library").parts) == 2, path


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(scenario_dir())) for p in SHIPPED])
def test_shipped_scenario_validates(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    assert ": ok (" in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#"), f"{path}: needs a header comment citing what it reproduces"
    description = read_yaml(path).get("description", "")
    assert description and "\n" not in description.strip()


def test_list_scenarios_names_every_file_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SHIPPED)
    root = scenario_dir()
    for path, line in zip(SHIPPED, lines):
        name = str(path.relative_to(root).with_suffix(""))
        assert line.split()[0] == name
        assert read_yaml(path)["description"].strip() in line


def test_shipped_names_resolve_for_run_and_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "library/scripting/slowdown_dropout"]) == 0
    assert main(["validate", "library/scripting/nope"]) == 2
    assert "scenario file not found: library/scripting/nope" in capsys.readouterr().err
