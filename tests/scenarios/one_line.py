"""The check every test of a user mistake makes on the command line: ``fedclock ARGS`` run
in-process ends with exit status 2 and exactly one line on stderr, ``fedclock: error: ...``,
that names what it should (the field, the file, the allowed values) and is no traceback (the
project's rule for user mistakes: :mod:`fedclock.scenarios.cli`, :mod:`fedclock.scenarios.loader`).

One helper for every test file that checks such a line, so that they all check the same thing.
"""
from __future__ import annotations

import contextlib
import io

from fedclock.scenarios.cli import main

PREFIX = "fedclock: error: "
"""How every one-line error starts."""


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Run ``fedclock`` with ``argv`` in this process: its exit status and what it wrote on
    stderr (stdout is discarded; nothing reaches pytest's capture)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def assert_one_line(code: int, err: str, *names: str, status: int = 2, prefix: str = PREFIX) -> str:
    """Assert that a command ended with ``status`` and stderr ``err`` is one line starting
    with ``prefix``, naming each of ``names`` after the prefix, without a traceback; the line."""
    assert code == status, f"exit {code}, stderr {err!r}"
    assert "Traceback" not in err, err
    assert err.startswith(prefix) and err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    message = err.removeprefix(prefix)
    for name in names:
        assert name in message, f"{name!r} not named in {err!r}"
    return err


def one_line_error(argv: list[str], *names: str, status: int = 2, prefix: str = PREFIX) -> str:
    """Run ``fedclock`` with ``argv`` in this process and assert that it fails with a one-line
    error (exit ``status``, default 2) naming each of ``names``; the line."""
    code, err = run_cli(argv)
    return assert_one_line(code, err, *names, status=status, prefix=prefix)
