"""``docs/architecture.md`` names only what exists: every file path it gives is a file of the
repository, and every class, function or attribute it names in backticks (``Clock.run``,
``DataStream``, ``task.finishes_at``) is defined or assigned somewhere in the package."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
LAYERS = ("actors", "algorithms", "scheduling", "scenarios")


def _source() -> str:
    return "\n".join(p.read_text() for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py")))


def test_every_path_on_the_page_exists() -> None:
    paths = set(re.findall(r"`((?:[\w.]+/)+[\w.]+\.(?:py|md|yaml|json))`", PAGE.read_text()))
    assert paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def _code_names(text: str) -> set[str]:
    """The CamelCase and snake_case parts of every backticked dotted name (``Clock.set_refill``
    gives ``Clock`` and ``set_refill``; ``mode.task_timeout_s`` gives ``task_timeout_s``)."""
    names = set()
    for token in re.findall(r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`", text):
        for part in token.split("."):
            if re.fullmatch(r"_?[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*", part) or "_" in part.strip("_"):
                names.add(part)
    return names


def test_every_code_name_on_the_page_is_in_the_package() -> None:
    known = {name for match in re.findall(r"(?:def|class)\s+(\w+)|\.(\w+)\b|\b(\w+)\s*[:=]|\"(\w+)\"", _source())
             for name in match if name}
    names = _code_names(PAGE.read_text())
    assert {"Clock", "set_refill", "DataStream", "finishes_at"} <= names
    missing = sorted(names - known)
    assert not missing, missing
