"""Sums over a process and its live descendants, read from /proc (Linux)."""
from __future__ import annotations

import os
from typing import Callable

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_sum(root: int, value: Callable[[list[str]], float]) -> float:
    """Sum of ``value(fields)`` over ``root`` and its descendants, where ``fields`` are the
    fields of ``/proc/PID/stat`` after the command name (``fields[1]`` is the parent pid)."""
    children, values = _scan(value)
    return sum(_tree_values(root, value, children, values).values())


def _tree_values(root: int, value: Callable[[list[str]], float], children: dict[int, list[int]] | None = None,
                 values: dict[int, float] | None = None) -> dict[int, float]:
    """``value(fields)`` of ``root`` and of each of its live descendants, by pid."""
    if children is None or values is None:
        children, values = _scan(value)
    out: dict[int, float] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        out[pid] = values.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return out


def _scan(value: Callable[[list[str]], float]) -> tuple[dict[int, list[int]], dict[int, float]]:
    """Every process's children and ``value(fields)``, from /proc."""
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
    return children, values


def tree_cpu_by_role(root: int | None = None) -> dict[str, float]:
    """User + system CPU seconds of ``root`` (default: this process) and its descendants,
    grouped by role: ``driver`` (``root`` itself), ``server`` and ``executors`` (Ray actor
    processes, told apart by their process title), ``ray`` (every other descendant: the Ray
    daemons and idle workers)."""
    me = os.getpid() if root is None else root
    out: dict[str, float] = {"driver": 0.0, "server": 0.0, "executors": 0.0, "ray": 0.0}
    for pid, seconds in _tree_values(me, lambda f: (int(f[11]) + int(f[12])) / TICKS).items():
        out[_role(pid, me)] += seconds
    return out


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "ray"
    if title.startswith("ray::") and "Server" in title:
        return "server"
    return "executors" if "ClientExecutor" in title else "ray"


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants."""
    return int(tree_sum(root, lambda f: int(f[21]) * PAGE))


def tree_pss_by_role(root: int) -> dict[str, int]:
    """Proportional resident bytes (``Pss`` of ``/proc/PID/smaps_rollup``) of ``root`` and its
    descendants, summed by role (as :func:`tree_cpu_by_role`: ``driver``, ``server``,
    ``executors``, ``ray``): a page mapped by several of them (Ray's shared-memory object
    store, the libraries' code) counts once in all, split among them, where :func:`tree_rss`
    counts it once per process."""
    out = {"driver": 0, "server": 0, "executors": 0, "ray": 0}
    for pid in _tree_values(root, lambda f: 0.0):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss = next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0) * 1024
        except OSError:
            continue
        out[_role(pid, root)] += pss
    return out


def tree_pss_of_files(root: int, folder: str) -> int:
    """Proportional resident bytes of the files under ``folder`` mapped by ``root`` and its
    descendants (the ``Pss`` of each mapping in ``/proc/PID/smaps`` whose path lies there): the
    part of :func:`tree_pss_by_role` that is those files' pages, e.g. mapped data read so far."""
    total = 0
    prefix = folder.rstrip("/") + "/"
    for pid in _tree_values(root, lambda f: 0.0):
        try:
            with open(f"/proc/{pid}/smaps") as f:
                inside = False
                for line in f:
                    first = line.split(maxsplit=1)[0]
                    if "-" in first and not first.endswith(":"):  # a mapping's header: address range, ..., path
                        inside = line.rstrip().split(maxsplit=5)[-1].startswith(prefix)
                    elif inside and first == "Pss:":
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def tree_cpu_by_pid(root: int) -> dict[int, float]:
    """User + system CPU seconds of ``root`` and of each of its live descendants, by pid."""
    return _tree_values(root, lambda f: (int(f[11]) + int(f[12])) / TICKS)


def role_of(pid: int, root: int) -> str:
    """The role of process ``pid`` in the tree of ``root`` (see :func:`tree_cpu_by_role`)."""
    return _role(pid, root)
