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
``down_mbps``, ``up_mbps``, ``latency_s``, ``memory_gb`` are required; compute, bandwidths
and memory must be > 0, latency >= 0. Units are those of ``population.devices``.
``memory_gb`` (what training may use, as a device class's) is read from the rows at
``time_s = 0`` only and feeds feasibility like a device class's memory (a client whose task
does not fit is never dispatched); feasibility is decided once per run, so a later row
giving memory is refused.

**Recorded unit.** A Parquet device trace may record the unit of its ``compute`` column in
its schema metadata (key ``fedclock.compute_unit``: ``gflops`` or ``samples_per_s``) and of
its memory (``fedclock.memory_unit: GB``); ``fedclock traces convert`` writes them
(:func:`convert_fedscale`: FedScale's capacity is in samples per second). A scenario whose
``population.compute_unit`` contradicts the recorded unit is refused in one line
(:func:`recorded_compute_unit`).

**FedScale's files** as published (:mod:`fedclock.scheduling.fedscale_traces`): a file that
starts like a pickle is read as FedScale's ``client_device_capacity`` (a device trace of
time-0 rows, every client taking an entry) or ``client_behave_trace`` (an availability
trace repeating every ``finish_time``), through an unpickler that runs no code.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedclock.scheduling.fedscale_traces import FedScaleError, is_pickle, read_behavior, read_capacity

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEVICE_COLUMNS", "MEMORY_COLUMN", "TraceError", "recorded_compute_unit", "write_device_trace",
           "check_trace_file", "read_availability_trace", "read_device_trace",
           "read_fedscale_availability", "trace_clients"]

DEVICE_COLUMNS = ("compute", "down_mbps", "up_mbps", "latency_s")
MEMORY_COLUMN = "memory_gb"
"""The device trace's optional memory column (time-0 rows only)."""
COMPUTE_UNIT_KEY = b"fedclock.compute_unit"
"""Parquet schema-metadata key recording the unit of a device trace's ``compute``."""
MEMORY_UNIT_KEY = b"fedclock.memory_unit"
"""Parquet schema-metadata key recording the unit of a device trace's ``memory_gb`` (GB)."""
COMPUTE_UNITS = ("gflops", "samples_per_s")


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


def read_device_trace(path: Path, num_clients: int | None = None) -> pd.DataFrame:
    """The device trace with columns client, time_s, every device column and ``memory_gb``
    (NaN where a row keeps the value), sorted by time then client (rows of one client at one time are
    applied in file order). A FedScale capacity file gives one time-0 row per client
    ``0..num_clients-1`` (cycling over its entries; all entries once without ``num_clients``)."""
    import pandas as pd

    if is_pickle(path):
        devices = _fedscale(read_capacity, path)
        count = len(devices) if num_clients is None else num_clients
        rows = devices[np.arange(count) % len(devices)]
        return pd.DataFrame({"client": np.arange(count, dtype=np.int64), "time_s": 0.0, "compute": rows[:, 0],
                             "down_mbps": rows[:, 1], "up_mbps": rows[:, 2], "latency_s": np.nan,
                             MEMORY_COLUMN: np.nan})
    frame = read_table(path)
    _require(frame, path, ("client",))
    present = [c for c in (*DEVICE_COLUMNS, MEMORY_COLUMN) if c in frame.columns]
    if not present:
        raise TraceError(f"{path}: needs at least one of the columns {', '.join((*DEVICE_COLUMNS, MEMORY_COLUMN))}")
    out = pd.DataFrame({"client": _clients(frame, path)})
    out["time_s"] = _numeric(frame, "time_s", path) if "time_s" in frame.columns else 0.0
    if (out["time_s"] < 0).any():
        raise TraceError(f"{path}: column 'time_s' must be >= 0")
    for column in (*DEVICE_COLUMNS, MEMORY_COLUMN):
        values = _numeric(frame, column, path, allow_missing=True) if column in frame.columns \
            else np.full(len(frame), np.nan)
        known = values[~np.isnan(values)]
        if column == "latency_s" and (known < 0).any() or column != "latency_s" and (known <= 0).any():
            raise TraceError(f"{path}: column {column!r} must be {'>= 0' if column == 'latency_s' else '> 0'}")
        out[column] = values
    later = (out["time_s"].to_numpy() > 0) & ~np.isnan(out[MEMORY_COLUMN].to_numpy())
    if later.any():
        row = int(np.flatnonzero(later)[0])
        raise TraceError(f"{path}: row {row + 1}: column 'memory_gb' is read at time_s 0 only (feasibility is decided "
                         f"at the start of a run); leave it empty in later rows")
    out["row"] = np.arange(len(out))
    return out.sort_values(["time_s", "client", "row"], kind="stable").drop(columns="row").reset_index(drop=True)


def _fedscale(reader: Any, path: Path) -> Any:
    """``reader(path)`` with its errors as :class:`TraceError`."""
    try:
        return reader(path)
    except FedScaleError as exc:
        raise TraceError(str(exc)) from None


def read_fedscale_availability(path: Path) -> list[tuple[list[tuple[float, float]], float]]:
    """A FedScale behaviour file's entries (intervals within a period, the period), in the
    order clients take them (see :mod:`fedclock.scheduling.fedscale_traces`)."""
    out: list[tuple[list[tuple[float, float]], float]] = _fedscale(read_behavior, path)
    return out


def check_trace_file(path: Path, kind: str) -> None:
    """Raise :class:`TraceError` unless ``path`` is a readable trace of ``kind``
    ("availability" or "devices")."""
    if is_pickle(path):
        _fedscale(read_capacity if kind == "devices" else read_behavior, path)
        return
    if kind == "devices":
        read_device_trace(path)
    else:
        read_availability_trace(path)


def recorded_compute_unit(path: Path) -> str | None:
    """The unit a Parquet device trace records for its ``compute`` (module docstring), or
    None (a CSV, a pickle, or a Parquet file that records none). A recorded value other than
    the known units is a :class:`TraceError`."""
    if path.suffix.lower() != ".parquet" or not path.is_file():
        return None
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except Exception as exc:  # any reader failure is reported as one line
        raise TraceError(f"{path}: cannot read trace ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None
    unit = metadata.get(COMPUTE_UNIT_KEY)
    if unit is None:
        return None
    text = unit.decode("utf-8", "replace")
    if text not in COMPUTE_UNITS:
        raise TraceError(f"{path}: records compute unit {text!r} (allowed: {', '.join(COMPUTE_UNITS)})")
    return text


def write_device_trace(frame: pd.DataFrame, target: Path, compute_unit: str) -> None:
    """Write a device trace as Parquet, recording the unit of its ``compute`` (and ``GB``
    for its ``memory_gb`` when it has that column) in the schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    units = {COMPUTE_UNIT_KEY: compute_unit.encode()}
    if MEMORY_COLUMN in frame.columns:
        units[MEMORY_UNIT_KEY] = b"GB"
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), **units}), target)


def trace_clients(path: Path) -> np.ndarray:
    """The distinct client ids a (valid) trace file names (none for a FedScale file: its
    entries are dealt to however many clients there are)."""
    if is_pickle(path):
        return np.zeros(0, dtype=np.int64)
    return np.unique(_clients(read_table(path), path))


def convert_fedscale(source: Path, target: Path, clients: int | None = None, until_s: float | None = None) -> str:
    """Write a FedScale file as fedclock's own Parquet trace (``target``, suffix
    ``.parquet``) and return a one-line summary. A ``client_device_capacity`` file becomes a
    device trace of time-0 rows (``compute`` in training samples/s, bandwidths in Mbit/s:
    :mod:`fedclock.scheduling.fedscale_traces`); a ``client_behave_trace`` file becomes an
    availability trace whose repeating intervals are written out over ``[0, until_s)``
    (default: each entry's own ``finish_time``, one period). ``clients`` (default: one per
    entry) deals the entries to clients ``0..clients-1`` in ascending key order, cycling, as
    a scenario reading the file directly does."""
    import pandas as pd

    from fedclock.scheduling.fedscale_traces import is_plain_pickle_kind, unrolled

    if target.suffix.lower() != ".parquet":
        raise TraceError(f"{target}: the converted trace is Parquet (name it *.parquet)")
    if not source.is_file():
        raise TraceError(f"trace file not found: {source}")
    if not is_pickle(source):
        raise TraceError(f"{source}: not a FedScale pickle (client_device_capacity or client_behave_trace)")
    kind = _fedscale(is_plain_pickle_kind, source)
    if kind == "capacity":
        frame = read_device_trace(source, clients).drop(columns=["latency_s", MEMORY_COLUMN])
        what = "device trace"
    else:
        entries = read_fedscale_availability(source)
        count = len(entries) if clients is None else clients
        rows = []
        for client in range(count):
            spans, period = entries[client % len(entries)]
            rows += [(client, s, e) for s, e in unrolled(spans, period, period if until_s is None else until_s)]
        frame = pd.DataFrame(rows, columns=["client", "start", "end"]).astype({"client": "int64"})
        what = "availability trace"
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "capacity":
        write_device_trace(frame, target, "samples_per_s")
        what += " (compute in samples_per_s, recorded in the file)"
    else:
        frame.to_parquet(target, index=False)
    return f"{source} -> {target}: {what}, {frame['client'].nunique()} clients, {len(frame)} rows"
