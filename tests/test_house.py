"""The house stays small (issue 44): no module of ``scheduling/`` or ``actors/`` over 350 lines
and no class there over 250, and at most 20 ``isinstance`` checks on config classes (the
pydantic models the four packages define) in the four packages: a config variant carries its
behaviour instead of being tested for its class."""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pydantic
from tests.source_ast import parse

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("actors", "algorithms", "scheduling", "scenarios")
MAX_MODULE, MAX_CLASS, MAX_CONFIG_CHECKS = 350, 250, 20


def _sizes(layer: str) -> tuple[dict[str, int], dict[str, int]]:
    modules, classes = {}, {}
    for path in sorted((ROOT / layer).glob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        modules[name] = len(source.splitlines())
        for node in ast.walk(parse(source)):
            if isinstance(node, ast.ClassDef):
                classes[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    return modules, classes


def test_no_module_or_class_of_the_run_is_too_big() -> None:
    for layer in ("scheduling", "actors"):
        modules, classes = _sizes(layer)
        assert modules and classes
        assert {m: n for m, n in modules.items() if n > MAX_MODULE} == {}
        assert {c: n for c, n in classes.items() if n > MAX_CLASS} == {}


def config_classes() -> set[str]:
    """The names of the pydantic models defined in the four packages."""
    names = set()
    for layer in PACKAGES:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = importlib.import_module(".".join(["fedclock", *(parts[:-1] if parts[-1] == "__init__"
                                                                     else parts)]))
            names |= {obj.__name__ for obj in vars(module).values() if inspect.isclass(obj)
                      and issubclass(obj, pydantic.BaseModel) and obj.__module__.startswith("fedclock.")}
    return names


def config_checks(source: str, names: set[str]) -> int:
    """``isinstance(x, C)`` (or with a tuple holding ``C``) calls in ``source`` whose ``C`` is in ``names``."""
    count = 0
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            count += any((k.id if isinstance(k, ast.Name) else getattr(k, "attr", None)) in names for k in kinds)
    return count


def test_the_count_sees_config_checks() -> None:
    source = "isinstance(m, SyncMode)\nisinstance(m, (int, modes.AsyncMode))\nisinstance(m, int)\n"
    assert config_checks(source, {"SyncMode", "AsyncMode"}) == 2


def test_few_isinstance_checks_on_config_classes() -> None:
    names = config_classes()
    assert {"SyncMode", "AsyncMode", "StopConfig"} <= names
    counts = {str(path.relative_to(ROOT)): n for layer in PACKAGES for path in sorted((ROOT / layer).rglob("*.py"))
              if (n := config_checks(path.read_text(encoding="utf-8"), names))}
    assert sum(counts.values()) <= MAX_CONFIG_CHECKS, counts
