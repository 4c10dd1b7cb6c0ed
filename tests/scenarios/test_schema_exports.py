"""``scenarios/schema.py`` composes the other layers' configuration into the file format and
re-exports none of it: its ``__all__`` holds only what it defines, and every module, test,
benchmark and example imports a name from the module that defines it, never through the schema."""
from __future__ import annotations

import ast
from pathlib import Path

import fedclock.scenarios.schema as schema
from tests.source_ast import parse

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("actors", "algorithms", "scheduling", "scenarios", "tests", "benchmarks", "examples")


def _defined_in_schema() -> set[str]:
    tree = parse(Path(schema.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node in tree.body:
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_schema_exports_only_what_it_defines() -> None:
    assert sorted(set(schema.__all__) - _defined_in_schema()) == []


def test_nothing_imports_another_modules_name_through_the_schema() -> None:
    defined = _defined_in_schema()
    wrong = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            if "fedclock.scenarios.schema import" not in text:
                continue
            for node in ast.walk(parse(text)):
                if isinstance(node, ast.ImportFrom) and node.module == "fedclock.scenarios.schema":
                    wrong += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for a in node.names
                              if a.name not in defined]
    assert not wrong, "import these from the module that defines them:\n" + "\n".join(wrong)
