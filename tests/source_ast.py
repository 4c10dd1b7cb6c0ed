"""Parsing this project's source files in tests."""
from __future__ import annotations

import ast

ATTEMPTS = 5
"""How many times :func:`parse` tries before it lets the error through."""


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, tried again when CPython 3.11 raises its spurious
    ``SystemError: AST constructor recursion depth mismatch`` (seen here on 3.11.7, in a
    pytest worker that holds a Ray session and so has threads; CPython issue 106905 reports
    the error in threaded processes). The error says nothing about the source, so a second
    parse gives its tree; any other error, or the same one every time, is raised."""
    for attempt in range(ATTEMPTS):
        try:
            return ast.parse(source)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
