"""scenarios/free_memory.py: glibc's malloc_trim is found and called; elsewhere nothing is done."""
from __future__ import annotations

import platform

import pytest

from fedclock.scenarios import free_memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_returns_its_free_pages() -> None:
    assert free_memory.return_free_memory() is True


def test_without_malloc_trim_nothing_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(free_memory, "_trim", lambda: None)
    assert free_memory.return_free_memory() is False
