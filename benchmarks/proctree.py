"""Sums over a process and its live descendants, read from /proc (Linux)."""
from __future__ import annotations

import os
from typing import Callable

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_sum(root: int, value: Callable[[list[str]], float]) -> float:
    """Sum of ``value(fields)`` over ``root`` and its descendants, where ``fields`` are the
    fields of ``/proc/PID/stat`` after the command name (``fields[1]`` is the parent pid)."""
    children: dict[int, list[int]] = {}
    values: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        values[pid] = value(fields)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += values.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return total


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system CPU seconds of ``root`` (default: this process) and its descendants."""
    return tree_sum(os.getpid() if root is None else root, lambda f: (int(f[11]) + int(f[12])) / TICKS)


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants."""
    return int(tree_sum(root, lambda f: int(f[21]) * PAGE))
