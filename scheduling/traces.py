"""Trace files: real availability and device measurements replayed in virtual time.

Both kinds are tables in CSV (with a header row) or Parquet; the suffix (``.csv`` or
``.parquet``) says which. Extra columns are ignored.

**Availability trace** (``availability: {type: trace, path: FILE}``), one row per online
interval::

    client,start,end          # client id, interval start and end in virtual seconds
    0,0,50                    # client 0 is online during [0, 50)
    0,120,300

``end > start >= 0``. Overlapping or touching intervals of one client are merged.

**Device trace** (``population.device_trace: FILE``), one row per change::

    client,time_s,compute,down_mbps,up_mbps,latency_s
    0,0,0.125,8,2,0.0         # client 0's profile from t = 0
    0,100,0.0625,,,           # from t = 100 its compute halves; empty cells keep the value

``time_s`` (default 0 when the column is absent) is when the values take effect; rows
with ``time_s = 0`` set the client's initial profile (overriding the drawn one), later rows
are replayed by the timeline. Only ``client`` and at least one of ``compute``,
``down_mbps``, ``up_mbps``, ``latency_s`` are required; compute and bandwidths must be
> 0, latency >= 0. Units are those of ``population.devices``.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEVICE_COLUMNS", "TraceError", "check_trace_file", "read_availability_trace", "read_device_trace",
           "trace_clients"]

DEVICE_COLUMNS = ("compute", "down_mbps", "up_mbps", "latency_s")


class TraceError(ValueError):
    """A trace file that is missing or malformed (one line naming the file and the problem)."""


def read_table(path: Path) -> pd.DataFrame:
    """Read a CSV or Parquet table."""
    import pandas as pd  # imported on use: only runs with trace files need it (0.2 s)

    if not path.is_file():
        raise TraceError(f"trace file not found: {path}" if not path.exists() else
                         f"{path}: not a regular file (a trace is a .csv or .parquet file)")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path, skipinitialspace=True, comment="#")
        if suffix == ".parquet":
            return pd.read_parquet(path)
    except Exception as exc:  # any reader failure is reported as one line
        raise TraceError(f"{path}: cannot read trace ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None
    raise TraceError(f"{path}: unknown trace format {suffix!r} (allowed: .csv, .parquet)")


def _numeric(frame: pd.DataFrame, column: str, path: Path, allow_missing: bool = False) -> np.ndarray:
    import pandas as pd

    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(values) & (~frame[column].isna().to_numpy() | (not allow_missing))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{path}: column {column!r}, row {row + 1}: not a number ({frame[column].iloc[row]!r})")
    if not np.isfinite(values[~np.isnan(values)]).all():
        raise TraceError(f"{path}: column {column!r} holds an infinite value")
    return values


def _clients(frame: pd.DataFrame, path: Path) -> np.ndarray:
    values = _numeric(frame, "client", path)
    if (values < 0).any() or (values != np.floor(values)).any():
        raise TraceError(f"{path}: column 'client' must hold client ids (integers >= 0)")
    return values.astype(np.int64)


def _require(frame: pd.DataFrame, path: Path, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise TraceError(f"{path}: missing column {missing[0]!r} (needs: {', '.join(columns)}; "
                         f"has: {', '.join(map(str, frame.columns))})")


def read_availability_trace(path: Path) -> dict[int, list[tuple[float, float]]]:
    """Each listed client's online intervals, sorted and merged."""
    frame = read_table(path)
    _require(frame, path, ("client", "start", "end"))
    clients = _clients(frame, path)
    start, end = _numeric(frame, "start", path), _numeric(frame, "end", path)
    bad = (start < 0) | (end <= start)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{path}: row {row + 1}: needs end > start >= 0 (got start {start[row]:g}, end {end[row]:g})")
    out: dict[int, list[tuple[float, float]]] = {}
    for c, s, e in sorted(zip(clients.tolist(), start.tolist(), end.tolist())):
        spans = out.setdefault(int(c), [])
        if spans and s <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], e))
        else:
            spans.append((float(s), float(e)))
    return out


def read_device_trace(path: Path) -> pd.DataFrame:
    """The device trace with columns client, time_s and every device column (NaN where a
    row keeps the value), sorted by time then client (rows of one client at one time are
    applied in file order)."""
    import pandas as pd

    frame = read_table(path)
    _require(frame, path, ("client",))
    present = [c for c in DEVICE_COLUMNS if c in frame.columns]
    if not present:
        raise TraceError(f"{path}: needs at least one of the columns {', '.join(DEVICE_COLUMNS)}")
    out = pd.DataFrame({"client": _clients(frame, path)})
    out["time_s"] = _numeric(frame, "time_s", path) if "time_s" in frame.columns else 0.0
    if (out["time_s"] < 0).any():
        raise TraceError(f"{path}: column 'time_s' must be >= 0")
    for column in DEVICE_COLUMNS:
        values = _numeric(frame, column, path, allow_missing=True) if column in frame.columns \
            else np.full(len(frame), np.nan)
        known = values[~np.isnan(values)]
        if column == "latency_s" and (known < 0).any() or column != "latency_s" and (known <= 0).any():
            raise TraceError(f"{path}: column {column!r} must be {'>= 0' if column == 'latency_s' else '> 0'}")
        out[column] = values
    out["row"] = np.arange(len(out))
    return out.sort_values(["time_s", "client", "row"], kind="stable").drop(columns="row").reset_index(drop=True)


def check_trace_file(path: Path, kind: str) -> None:
    """Raise :class:`TraceError` unless ``path`` is a readable trace of ``kind``
    ("availability" or "devices")."""
    if kind == "devices":
        read_device_trace(path)
    else:
        read_availability_trace(path)


def trace_clients(path: Path) -> np.ndarray:
    """The distinct client ids a (valid) trace file names."""
    return np.unique(_clients(read_table(path), path))
