"""One home on the clock (issue 32): a client is freed only by ``Clock.free`` and the stop
bounds (``stop.rounds``, ``stop.versions``) are compared only in ``Clock.check_stop``; the
timeline holds the clock through its narrow ``ClockControl`` protocol, not as ``Any``.

An AST scan of every module of ``scheduling/`` and ``actors/``: removing a busy client (``.busy.pop(...)``,
``del ....busy[...]``) and reading ``.stop.rounds`` / ``.stop.versions``
happen inside those two methods only. A hand-made clock then checks both methods' rules."""
from __future__ import annotations

import ast
import functools
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fedclock.scheduling.clock import Clock
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.modes import StopConfig
from fedclock.scheduling.timeline import ClockControl, Timeline
from tests.source_ast import parse

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("actors", "scheduling")
"""The run's layers (``scenarios/`` validates stop bounds and holds no busy client)."""


@functools.cache
def _functions() -> list[tuple[str, list[ast.AST]]]:
    """(``module:function``, the function's nodes) of every function of the run's layers,
    parsed once for all the checks."""
    out = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = parse(path.read_text(encoding="utf-8"))
            for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
                out.append((f"{path.relative_to(ROOT)}:{func.name}", list(ast.walk(func))))
    return out


def _named(node: ast.AST, name: str) -> bool:
    """``node`` is ``name`` or ``<anything>.name``."""
    return isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name


def _hit(kind: str, node: ast.AST) -> bool:
    if kind == "free":
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "pop" \
            and _named(node.func.value, "busy") or isinstance(node, ast.Delete) and \
            any(isinstance(t, ast.Subscript) and _named(t.value, "busy") for t in node.targets)
    return isinstance(node, ast.Attribute) and node.attr in ("rounds", "versions") and _named(node.value, "stop")


def _homes(kind: str) -> list[str]:
    """``module:function`` of every place that frees a busy client (``free``) or reads a
    stop bound (``stop``)."""
    return sorted({where for where, nodes in _functions() for node in nodes if _hit(kind, node)})


def test_a_client_is_freed_in_one_place() -> None:
    assert _homes("free") == ["scheduling/clock.py:free"]


def test_the_stop_bounds_are_read_in_one_place() -> None:
    assert _homes("stop") == ["scheduling/clock.py:check_stop"]


def test_free_and_check_stop_by_hand() -> None:
    """``free`` frees a client only from the task it is busy with; ``check_stop`` finishes
    with ``rounds`` before ``versions`` and says whether a bound was reached."""
    finished: list[str] = []
    fake: Any = SimpleNamespace(busy=BusyClients(), round=2, version=5, finish=finished.append)
    first, second = SimpleNamespace(client=3), SimpleNamespace(client=3)
    fake.busy[3] = second
    Clock.free(fake, first)
    assert 3 in fake.busy
    Clock.free(fake, second)
    assert 3 not in fake.busy
    fake.stop = StopConfig(rounds=2, versions=5)
    assert Clock.check_stop(fake) and finished == ["rounds"]
    fake.stop = StopConfig(rounds=3, versions=5)
    assert Clock.check_stop(fake) and finished == ["rounds", "versions"]
    fake.stop = StopConfig(rounds=3, versions=6)
    assert not Clock.check_stop(fake) and finished == ["rounds", "versions"]


def test_the_timeline_holds_the_clock_through_its_protocol() -> None:
    hints = typing.get_type_hints(Timeline.start)
    assert hints["clock"] is ClockControl
    assert set(n for n in dir(ClockControl) if not n.startswith("_")) == {"refill", "set_mode_limits"}
