"""``Task`` has one writer: only modules under ``scheduling/`` assign its fields (issue 32).
The backend keys its running work by task index and hands what a task's client reported back
to the clock (:class:`~fedclock.scheduling.task.Applied`), which records it.

The check is an AST scan: in every module outside ``scheduling/``, the names that hold a
task (parameters annotated with ``Task`` or a container of it, and loop or comprehension
variables drawn from such a name) must not have a ``Task`` field assigned (``x.f = ...``,
``x.f += ...``, ``x.f[k] = ...``, ``setattr(x, "f", ...)``)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from fedclock.scheduling.task import Task
from tests.source_ast import parse

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("actors", "algorithms", "scenarios")
FIELDS = frozenset(Task.__slots__) - {"_env"}
TASKISH = re.compile(r"\bTask\b")


def _task_names(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names that hold tasks in ``func``: annotated parameters, then loop variables over them."""
    names = {a.arg for a in [*func.args.args, *func.args.kwonlyargs, *func.args.posonlyargs]
             if a.annotation is not None and TASKISH.search(ast.unparse(a.annotation))}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(func):
            loops = ([(node.target, node.iter)] if isinstance(node, (ast.For, ast.comprehension)) else [])
            for target, source in loops:
                if {n.id for n in ast.walk(source) if isinstance(n, ast.Name)} & names:
                    new = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - names
                    # only the first name of a zip's tuple holds the task when the source is zip(tasks, ...)
                    if isinstance(target, ast.Tuple) and isinstance(source, ast.Call) and source.args:
                        first = {n.id for n in ast.walk(source.args[0]) if isinstance(n, ast.Name)}
                        new = {n.id for n in ast.walk(target.elts[0]) if isinstance(n, ast.Name)} if first & names \
                            else set()
                    if new - names:
                        names |= new
                        changed = True
    return names


def task_writes(source: str) -> list[str]:
    """Every assignment to a ``Task`` field through a name that holds a task, as source text."""
    found = []
    for func in ast.walk(parse(source)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = _task_names(func)
        for node in ast.walk(func):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple)
                                                                  else [target])]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id in names and node.args[1].value in FIELDS:
                found.append(ast.unparse(node))
            for target in targets:
                while isinstance(target, ast.Subscript):
                    target = target.value
                if isinstance(target, ast.Attribute) and target.attr in FIELDS and \
                        isinstance(target.value, ast.Name) and target.value.id in names:
                    found.append(f"line {node.lineno}: {ast.unparse(target)}")
    return found


def test_the_scan_finds_writes() -> None:
    """It can fail: each way of writing a task's field is found, reads are not."""
    source = '''
def f(task: Task, tasks: Sequence[Task], other: Thing) -> None:
    task.metrics = {}
    task.metrics["x"] = 1.0
    for t, m in zip(tasks, ms):
        t.steps_reported = 3
    setattr(task, "status", "applied")
    other.metrics = {}
    x = task.metrics
'''
    assert len(task_writes(source)) == 4


def test_task_fields_are_written_only_under_scheduling() -> None:
    writes = {str(path.relative_to(ROOT)): found for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))
              if (found := task_writes(path.read_text(encoding="utf-8")))}
    assert writes == {}
