"""``summary.parquet``: one row per (run, seed) of a file, written by whoever ran the rows.

Several processes may add rows to one file: ``fedclock run FILE --seed S`` side by side, on
one machine or on the nodes of a cluster sharing a file system, and the calling process of
``fedclock run FILE --jobs N`` as each job ends. Each read, merge and write holds a lock file
beside the summary (the ``filelock`` package) and replaces the file atomically.
"""
from __future__ import annotations

import os
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock


def summary_rows(summaries: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per run summary (a :class:`~fedclock.scenarios.experiment.RunSummary`), paths as text."""
    return [{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(s).items()} for s in summaries]


def read_summary_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of ``path`` ([] when it is absent or unreadable)."""
    try:
        return pq.read_table(path).to_pylist() if path.is_file() else []
    except (pa.ArrowException, OSError):
        return []


def write_summary(path: Path, summaries: Sequence[Any], keep: AbstractSet[tuple[str, int]] = frozenset()) -> None:
    """``summary.parquet``: one row per (run, seed) of ``summaries``, plus the rows already in
    the file of the jobs in ``keep`` that ``summaries`` lacks (written by another process, or
    by an earlier invocation); other rows are dropped."""
    rows = summary_rows(summaries)
    keep = set(keep) - {(r["name"], r["seed"]) for r in rows}
    with FileLock(str(path.with_name(path.name + ".lock"))):
        if keep and path.is_file():
            earlier = read_summary_rows(path)
            rows = [r for r in earlier if (r.get("name"), r.get("seed")) in keep and set(r) == set(rows[0])] + rows
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, path)
