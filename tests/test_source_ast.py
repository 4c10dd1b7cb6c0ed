"""tests/source_ast.py: the spurious CPython 3.11 error is retried, every other error is not."""
from __future__ import annotations

import ast

import pytest

from tests import source_ast

MISMATCH = SystemError("AST constructor recursion depth mismatch (before=144, after=43)")


def failing(errors: list[BaseException]) -> object:
    """An ``ast.parse`` that raises ``errors`` in turn, then parses."""
    real = ast.parse

    def fake(source: str) -> ast.Module:
        if errors:
            raise errors.pop(0)
        return real(source)

    return fake


def test_the_spurious_mismatch_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_ast.ast, "parse", failing([MISMATCH, MISMATCH]))
    tree = source_ast.parse("x = 1\n")
    assert isinstance(tree.body[0], ast.Assign)


def test_other_errors_and_a_mismatch_every_time_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_ast.ast, "parse", failing([SystemError("something else")]))
    with pytest.raises(SystemError, match="something else"):
        source_ast.parse("x = 1\n")
    monkeypatch.setattr(source_ast.ast, "parse", failing([MISMATCH] * source_ast.ATTEMPTS))
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        source_ast.parse("x = 1\n")
    with pytest.raises(SyntaxError):
        source_ast.parse("x = = 1\n")
