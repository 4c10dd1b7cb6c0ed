"""The package's layers point one way and no module imports itself back (DESIGN.md, "Layers").

Every `import` statement of every module counts, wherever it stands: at module level, inside a
function, under `if TYPE_CHECKING:`. The rule: `algorithms/` and `scheduling/` import no other
fedclock layer, `actors/` imports only those two, `scenarios/` composes all of them; and the graph
of module-to-module imports has no cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.source_ast import parse

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("algorithms", "scheduling", "actors", "scenarios")
ALLOWED = {
    "algorithms": {"algorithms"},
    "scheduling": {"scheduling"},
    "actors": {"actors", "algorithms", "scheduling"},
    "scenarios": set(LAYERS),
}


def module_name(path: Path) -> str:
    """`fedclock.<layer>.<module>` for a file under one of the layer folders."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["fedclock", *parts])


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))}


def imported_modules(name: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The fedclock modules that module `name` imports anywhere in `source` (relative imports resolved)."""
    tree = parse(source)
    package = name if is_package else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` imports the module; `from module import name` the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("fedclock.") and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    return {name: imported_modules(name, path.read_text(), path.name == "__init__.py", known)
            for name, path in modules.items()}


def layer_of(module: str) -> str:
    return module.split(".")[1]


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (sorted)."""
    reach = {module: reachable(graph, module) for module in graph}
    loops = {tuple(sorted(other for other in reach[module] if module in reach[other]))
             for module in graph if module in reach[module]}
    return sorted(list(loop) for loop in loops)


def test_the_graph_sees_imports_everywhere() -> None:
    source = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
              "from fedclock.scheduling import rng\nfrom . import clock\n"
              "if TYPE_CHECKING:\n    from fedclock.scenarios.schema import Scenario\n"
              "def f():\n    import fedclock.actors.runtime as r\n    from ..algorithms.base import Algorithm\n")
    known = {"fedclock.scheduling", "fedclock.scheduling.rng", "fedclock.scheduling.clock", "fedclock.scenarios",
             "fedclock.scenarios.schema", "fedclock.actors", "fedclock.actors.runtime", "fedclock.algorithms",
             "fedclock.algorithms.base", "fedclock.scheduling.probe"}
    found = imported_modules("fedclock.scheduling.probe", source, False, known)
    assert found == {"fedclock.scheduling.rng", "fedclock.scheduling.clock", "fedclock.scenarios.schema",
                     "fedclock.actors.runtime", "fedclock.algorithms.base"}


def test_import_loops_finds_every_loop_and_accepts_a_tree() -> None:
    assert import_loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}) \
        == [["a", "b", "c"], ["d", "e"]]
    assert import_loops({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_the_layers_below(layer: str) -> None:
    upward = sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                    if layer_of(module) == layer for target in targets
                    if layer_of(target) not in ALLOWED[layer])
    assert not upward, "\n".join(upward)


def test_no_import_loops() -> None:
    loops = import_loops(import_graph())
    assert not loops, "modules that import each other:\n" + "\n".join(" <-> ".join(loop) for loop in loops)
