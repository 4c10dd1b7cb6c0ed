"""Result files: metrics.parquet, events.parquet, clients.parquet, timeline.parquet,
client_metrics.parquet (with ``evaluation.per_client``), scenario.resolved.yaml.

``events.parquet`` has one row per task; ``timeline.parquet`` one row per firing of a
scripted event (the scenario's ``timeline`` and device-trace replay): virtual time,
server version, round, the event's index in the timeline (-1 for device-trace rows), its
type, the client ids it acted on and a short detail such as ``compute x0.1``. They are
separate tables so that every row of events.parquet stays a task. ``clients.parquet``
holds each client's initial device profile (before timeline changes), device class and tags.
``client_metrics.parquet`` has one row per client per evaluation: the client's personalized
model on its own test split (accuracy and loss; NaN for a client without test samples, see
``num_test``), with the virtual time, server version and round of the evaluation, and with
``evaluation.adapted`` the client's adapted copy of the global model on the same split
(``adapted_accuracy``, ``adapted_loss``; null without it).

Tables are written incrementally and survive a crash at any point. Rows accumulate in memory
and the whole file is rewritten atomically (temporary file, then rename) at most every
``flush_every_s`` seconds and at the end. Between two such rewrites, each completed event's
new rows also go at once into a small Parquet *part* file, ``<table>.parts/<first row>.parquet``
(also written to a temporary name and renamed), and a rewrite deletes the parts it covers. An
event is completed when the clock next reports progress, evaluates or fires a scripted event
(after every dispatch, server update and give-up), so the task ends of one sync round go into
one part, not one part each. So at any moment every Parquet file on disk is complete and
valid, and the main file plus the parts that start at or after its row count
(:func:`read_rows`) hold every row up to the last completed event; after a normal end only
the main files remain. ``clients.parquet`` is a
per-client summary written at the end (empty until then). A file is written
:data:`ROWS_PER_GROUP` rows at a time, one Parquet row group each, so that a million-client
table never exists whole in Arrow (readers join the row groups).
"""
from __future__ import annotations

import hashlib
import numbers
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from fedclock.scenarios.participation import Participation
from fedclock.scenarios.runfiles import PARTS_SUFFIX, RESOLVED_FILE, TENSORBOARD_DIR
from fedclock.scenarios.schema import Scenario
from fedclock.scenarios.selection_config import selection_dict
from fedclock.scenarios.tensorboard import TensorBoardScalars
from fedclock.scheduling.clock import APPLIED, CANCELLED, DROPPED, LOST, TIMED_OUT, Task

EVENTS_SCHEMA = pa.schema([
    ("task", pa.int64()), ("client", pa.int64()), ("client_task", pa.int64()), ("round", pa.int64()),
    ("dispatched_at", pa.float64()), ("finished_at", pa.float64()),
    ("version_dispatched", pa.int64()), ("version_applied", pa.int64()), ("staleness", pa.int64()),
    ("bytes_down", pa.int64()), ("bytes_up", pa.int64()),
    ("download_s", pa.float64()), ("compute_s", pa.float64()), ("upload_s", pa.float64()), ("comm_s", pa.float64()),
    ("num_samples", pa.int64()), ("train_loss", pa.float64()), ("status", pa.string()),
    ("steps", pa.int64()), ("steps_full", pa.int64()),
])

METRICS_SCHEMA = pa.schema([
    ("virtual_time", pa.float64()), ("wall_time", pa.float64()), ("version", pa.int64()), ("round", pa.int64()),
    ("global_accuracy", pa.float64()), ("global_loss", pa.float64()),
    ("personal_accuracy_mean", pa.float64()), ("personal_accuracy_p10", pa.float64()),
    ("personal_accuracy_p90", pa.float64()),
    ("adapted_accuracy_mean", pa.float64()), ("adapted_accuracy_p10", pa.float64()),
    ("adapted_accuracy_p90", pa.float64()),
    ("tasks_applied", pa.int64()), ("tasks_dropped", pa.int64()), ("bytes_total", pa.int64()),
    ("dp_epsilon", pa.float64()), ("dp_delta", pa.float64()), ("dp_uploads_max", pa.int64()),
    ("dp_clipped_fraction", pa.float64()), ("dp_noise_std", pa.float64()), ("dp_amplified", pa.float64()),
    ("dp_clip", pa.float64()), ("global_body_drift", pa.float64()), ("global_body_change", pa.float64()),
    ("participation_jain", pa.float64()), ("never_picked_fraction", pa.float64()),
    ("data_seen_fraction", pa.float64()), ("wasted_compute_s", pa.float64()), ("tasks_cancelled", pa.int64()),
    ("update_norm_gain", pa.float64()),
])

CLIENTS_SCHEMA = pa.schema([
    ("client", pa.int64()), ("num_train", pa.int64()), ("num_test", pa.int64()),
    ("compute", pa.float64()), ("down_mbps", pa.float64()), ("up_mbps", pa.float64()), ("latency_s", pa.float64()),
    ("availability", pa.string()), ("device_class", pa.string()), ("tags", pa.list_(pa.string())),
    ("tasks", pa.int64()), ("tasks_applied", pa.int64()),
    ("tasks_dropped", pa.int64()), ("busy_s", pa.float64()), ("bytes_down", pa.int64()), ("bytes_up", pa.int64()),
    ("tasks_lost", pa.int64()), ("tasks_timed_out", pa.int64()), ("tasks_cancelled", pa.int64()),
    ("memory_gb", pa.float64()), ("feasible", pa.bool_()),
    ("dp_releases", pa.int64()), ("dp_epsilon", pa.float64()), ("retired_at", pa.float64()),
])

CLIENT_METRICS_SCHEMA = pa.schema([
    ("client", pa.int64()), ("version", pa.int64()), ("round", pa.int64()), ("virtual_time", pa.float64()),
    ("accuracy", pa.float64()), ("loss", pa.float64()), ("num_test", pa.int64()),
    ("adapted_accuracy", pa.float64()), ("adapted_loss", pa.float64()),
])

TIMELINE_SCHEMA = pa.schema([
    ("time", pa.float64()), ("version", pa.int64()), ("round", pa.int64()), ("event", pa.int64()),
    ("type", pa.string()), ("num_clients", pa.int64()), ("clients", pa.list_(pa.int64())), ("detail", pa.string()),
])


class RowsColumn:
    """A column of ``length`` rows that is computed only a block of rows at a time, when its
    table is written (``column[start:stop]`` is ``rows(start, stop)``): a per-client column of
    ``clients.parquet`` then never exists whole, in NumPy or in Arrow."""

    def __init__(self, length: int, rows: Callable[[int, int], np.ndarray | list[Any]]) -> None:
        self.length = length
        self.rows = rows

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, block: slice) -> np.ndarray | list[Any]:
        start, stop, step = block.indices(self.length)
        if step != 1:
            raise ValueError("a RowsColumn is read in blocks of consecutive rows")
        return self.rows(start, max(start, stop))


class ClientEvents:
    """The client of each event (``clients``, one entry an event), read a block of clients at a
    time for the per-client columns of ``clients.parquet`` (:meth:`counts`). The events are
    put in client order once (a stable sort, shared by every column), so a block's events are
    one slice: a scan of every event for every block and column took seconds at a million
    clients. Within a client the events keep their order, so weighted sums add in the order
    ``np.bincount`` over all events adds them: the same floats."""

    def __init__(self, clients: np.ndarray, num_clients: int) -> None:
        self.clients = clients
        self.num_clients = num_clients
        self._order: np.ndarray | None = None
        self._sorted: np.ndarray | None = None

    def _of(self, start: int, stop: int) -> np.ndarray:
        """The indices of the events of clients ``start..stop-1``, by client, in order within one."""
        if self._order is None or self._sorted is None:
            self._order = np.argsort(self.clients, kind="stable")
            self._sorted = self.clients[self._order]
        lo, hi = np.searchsorted(self._sorted, (start, stop))
        return self._order[lo:hi]

    def counts(self, where: np.ndarray | None = None, weights: np.ndarray | None = None) -> RowsColumn:
        """Per client ``0..num_clients-1``: how many of its events ``where`` holds (every event
        when None), or with ``weights`` (one an event) the sum of theirs, as a :class:`RowsColumn`."""
        def rows(start: int, stop: int) -> np.ndarray:
            events = self._of(start, stop)
            if where is not None:
                events = events[where[events]]
            return np.bincount(self.clients[events] - start, weights=None if weights is None else weights[events],
                               minlength=stop - start)
        return RowsColumn(self.num_clients, rows)


class MetricError(Exception):
    """A reported metric that is not a number (it cannot become a float64 column)."""


class RowsDigest:
    """A SHA-256 of a table's rows, fed a block of rows at a time, that does not depend on how
    the rows were cut into blocks: each column feeds three running hashes (which rows are
    null, the values' bytes, the lengths of strings and lists), and the digest hashes the
    columns' names with their hashes. Fixed-width values go in as their little-endian bytes
    (floats bit for bit, NaN payloads included); strings as UTF-8 with their lengths; lists as
    their lengths and their flattened values. Rows read back from Parquet give the digest the
    rows had when written: a checkpoint records it, and a resume compares (a flipped byte in a
    Snappy page, which Parquet does not notice, changes a value and so the digest)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.names = list(schema.names)
        self._hashes: dict[str, list[tuple[Any, Any, Any]]] = {name: [] for name in self.names}
        """Per column, per nesting level (a list's elements are the next level): the hashes of
        null flags, values and lengths."""
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        """Feed the rows of ``table`` (same column names), after those fed before."""
        for name in self.names:
            for chunk in table.column(name).chunks:
                _feed(chunk, self._hashes[name], 0)
        self.rows += table.num_rows

    def hexdigest(self) -> str:
        """The digest of every row fed so far (feeding may go on)."""
        total = hashlib.sha256()
        for name in self.names:
            total.update(name.encode() + b"\0")
            for level in self._hashes[name]:
                for h in level:
                    total.update(h.digest())
        total.update(str(self.rows).encode())
        return total.hexdigest()


def _feed(array: pa.Array, levels: list[tuple[Any, Any, Any]], depth: int) -> None:
    """One column block into the hashes of its nesting level ``depth`` (:class:`RowsDigest`);
    a level's hashes start with its first value, so empty blocks change nothing."""
    if len(array) == 0:
        return
    if len(levels) <= depth:
        levels.append((hashlib.sha256(), hashlib.sha256(), hashlib.sha256()))
    nulls, values, lengths = levels[depth]
    kind = array.type
    nulls.update(array.is_null().to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths.update(pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
                       .astype("<i8").tobytes())
        _feed(pc.list_flatten(array), levels, depth + 1)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        data = [b"" if v is None else v.encode() for v in array.to_pylist()]
        lengths.update(np.fromiter((len(d) for d in data), dtype="<i8", count=len(data)).tobytes())
        values.update(b"".join(data))
    elif pa.types.is_boolean(kind):
        values.update(pc.fill_null(array, False).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
    else:
        filled = pc.fill_null(array, pa.scalar(0, type=kind)) if array.null_count else array
        numbers = np.asarray(filled.to_numpy(zero_copy_only=False))
        values.update(numbers.astype(numbers.dtype.newbyteorder("<"), copy=False).tobytes())


def rows_digest(table: pa.Table) -> str:
    """The :class:`RowsDigest` of every row of ``table``."""
    digest = RowsDigest(table.schema)
    digest.add(table)
    return digest.hexdigest()


class Table:
    """Rows of one Parquet file, rewritten atomically on flush; with ``journal``, rows appended
    since the last flush are also written at once as part files (see the module docstring).

    With ``open_columns`` the schema is a typed core that grows: a row's key the schema does
    not have becomes one more float64 column (after the core and the extras before it, in the
    order first seen; earlier rows hold null there), so a metric an algorithm reports is never
    dropped. Such a key's values must be numbers (``int``, ``float``, ``bool``, NumPy scalars)
    or None; any other value is a :class:`MetricError` naming the key."""

    def __init__(self, path: Path, schema: pa.Schema, journal: bool = False, open_columns: bool = False) -> None:
        self.path = path
        self.schema = schema
        self.journal = journal
        self.open_columns = open_columns
        self.core = frozenset(schema.names)
        """The typed columns (the schema given); every other column is an open float64 one."""
        self.columns: dict[str, list[Any]] = {name: [] for name in schema.names}
        self._dirty = True
        self._journaled = 0  # rows already on disk, in the main file or in parts
        self._digest = RowsDigest(schema)

    def digest(self, rows: int) -> str:
        """The :class:`RowsDigest` of the first ``rows`` rows (fed on from the last call, so a
        run digests each row once)."""
        if rows < self._digest.rows:
            self._digest = RowsDigest(self.schema)
        if rows > self._digest.rows:
            self._digest.add(self._arrow(self._digest.rows, rows))
        return self._digest.hexdigest()

    def restart_digest(self, rows: pa.Table) -> None:
        """Take ``rows`` (the table's rows, as read back) as already digested."""
        self._digest = RowsDigest(self.schema)
        self._digest.add(rows)

    @property
    def parts_dir(self) -> Path:
        return parts_dir(self.path)

    def append(self, row: dict[str, Any]) -> None:
        if self.open_columns and row.keys() - self.core:
            self._check_open(row)
        for name, values in self.columns.items():
            values.append(row.get(name))
        self._dirty = True

    def _check_open(self, row: dict[str, Any]) -> None:
        """Add a float64 column for each key of ``row`` the schema lacks; refuse a value of an
        open column that is not a number."""
        core, columns = self.core, self.columns
        for name, value in row.items():
            if name in core:
                continue
            if value is not None and not isinstance(value, numbers.Real):
                raise MetricError(f"{self.path.name}: metric {name!r} is {type(value).__name__} {value!r}; "
                                  "a reported metric must be a number (int, float, bool) or None")
            if name not in columns:
                self.schema = self.schema.append(pa.field(name, pa.float64()))
                columns[name] = [None] * len(self)

    def commit(self) -> None:
        """Write the rows appended since the last commit or flush as one part file."""
        if not self.journal or self._journaled >= len(self):
            return
        start = self._journaled
        self.parts_dir.mkdir(exist_ok=True)
        self._write_atomic(start, self.parts_dir / f"{start:012d}.parquet")
        self._journaled = len(self)

    def sync(self) -> None:
        """Flush the files holding this table's rows (main file, parts) to the disk (``fsync``)."""
        paths = [self.path] if self.path.is_file() else []
        if self.parts_dir.is_dir():
            paths += sorted(self.parts_dir.glob("*.parquet")) + [self.parts_dir]
        for path in paths:
            fsync(path)

    def replace(self, columns: dict[str, Any]) -> None:
        # NumPy columns stay arrays: a list of a million NumPy scalars per column costs ~40 bytes a value;
        # a RowsColumn is computed a block of rows at a time when written
        if self.open_columns:  # open columns of the rows given (e.g. read back from disk) join the schema
            for name in columns:
                if name not in self.schema.names:
                    self.schema = self.schema.append(pa.field(name, pa.float64()))
            rows = len(next(iter(columns.values()))) if columns else 0
            columns = {name: columns[name] if name in columns else [None] * rows for name in self.schema.names}
        self.columns = {name: columns[name] if isinstance(columns[name], (np.ndarray, list, RowsColumn))
                        else list(columns[name]) for name in self.schema.names}
        self._dirty = True

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def flush(self) -> None:
        if not self._dirty:
            return
        self._write_atomic(0, self.path)
        self._dirty = False
        self._journaled = len(self)
        if self.parts_dir.is_dir():  # every part is now in the main file
            for part in sorted(self.parts_dir.iterdir()):
                part.unlink()
            self.parts_dir.rmdir()

    def _arrow(self, start: int, stop: int | None = None) -> pa.Table:
        return pa.table({n: pa.array(v[start:stop], type=self.schema.field(n).type) for n, v in self.columns.items()},
                        schema=self.schema)

    def _write_atomic(self, start: int, path: Path) -> None:
        """Rows ``start:`` to ``path`` (a temporary file, then renamed), converted to Arrow
        and written :data:`ROWS_PER_GROUP` rows at a time, one row group each: one Arrow copy
        of the whole table and the Parquet writer's buffers for it cost about twice the
        columns' own bytes at a million clients (``benchmarks/RESULTS.md``, "Idle clients,
        third pass"). A table of at most that many rows is one row group, written as
        ``pq.write_table`` writes it."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            with pq.ParquetWriter(tmp, self.schema) as out:
                for first in range(start, max(len(self), start + 1), ROWS_PER_GROUP):
                    out.write_table(self._arrow(first, first + ROWS_PER_GROUP))
        except BaseException:
            tmp.unlink(missing_ok=True)  # a row that does not convert: the previous file stays, alone
            raise
        os.replace(tmp, path)


ROWS_PER_GROUP = 16_384
"""Rows converted to Arrow and written at a time (one Parquet row group each)."""


def fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TablesOnDisk:
    """The incrementally written tables of a run directory as a resume finds them, read once:
    their row counts and whether the rows a checkpoint counted are the rows it recorded."""

    def __init__(self, out_dir: Path) -> None:
        self.tables: dict[str, pa.Table] = {}
        self.unreadable: dict[str, str] = {}
        for name in JOURNALED:
            path = out_dir / f"{name}.parquet"
            if path.is_file():
                try:
                    self.tables[name] = read_rows(path)
                except (pa.ArrowException, OSError, ValueError) as exc:
                    self.unreadable[name] = " ".join(str(exc).split())[:160] or type(exc).__name__

    def rows(self) -> dict[str, int]:
        """Rows on disk per readable table (:meth:`problem` names one that does not read)."""
        return {n: t.num_rows for n, t in self.tables.items()}

    def problem(self, rows: dict[str, int], digests: dict[str, str] | None) -> str | None:
        """Why the tables on disk do not hold the rows a checkpoint counted (``rows``) and
        recorded (``digests``, None for a checkpoint written without them); None when they do."""
        for name in sorted(rows):
            if name in self.unreadable and rows[name] > 0:
                return f"{name}.parquet does not read ({self.unreadable[name]})"
            table = self.tables.get(name)
            if table is None or digests is None or name not in digests:
                continue
            if table.num_rows >= rows[name] and rows_digest(table.slice(0, rows[name])) != digests[name]:
                return (f"the first {rows[name]} rows of {name}.parquet differ from the rows it recorded (the table "
                        f"was damaged on disk)")
        return None


JOURNALED = ("events", "metrics", "timeline", "client_metrics")
"""The tables written incrementally (their rows are counted by checkpoints)."""


def parts_dir(path: Path) -> Path:
    """Where the part files of the table at ``path`` go (``events.parquet`` → ``events.parts``)."""
    return path.with_name(path.stem + PARTS_SUFFIX)


def read_rows(path: Path) -> pa.Table:
    """Every row of a results table, also after a crash: the main file, then the part files
    that start at or after its row count, in order (older parts duplicate rows already in the
    main file and are skipped)."""
    main = pq.read_table(path)
    parts = parts_dir(path)
    if not parts.is_dir():
        return main
    pieces, rows = [main], main.num_rows
    for part in sorted(parts.glob("*.parquet")):
        start = int(part.stem)
        if start < rows:
            continue
        if start > rows:
            break  # a gap: nothing after it can be trusted
        piece = pq.read_table(part)
        pieces.append(piece)
        rows += piece.num_rows
    # a part written after an open column first appeared has one more column (null before)
    return pa.concat_tables(pieces, promote_options="default")


def resolved_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario with every default filled in, in the file format (loadable again)."""
    data = scenario.model_dump(mode="json", exclude={"algorithm", "selection"})
    data["algorithm"] = {"name": scenario.algorithm.name, **scenario.algorithm.params.model_dump(mode="json")}
    if scenario.algorithm.server_optimizer is not None:
        data["algorithm"]["server_optimizer"] = scenario.algorithm.server_optimizer.model_dump(mode="json")
    if not (scenario.selection.is_uniform and not scenario.selection.disclose):  # the default section is left out
        data["selection"] = selection_dict(scenario.selection)
    return data


@dataclass
class RunTotals:
    """Running counts for the metrics rows and the final summary."""

    applied: int = 0
    dropped: int = 0
    unfinished: int = 0
    lost: int = 0
    timed_out: int = 0
    cancelled: int = 0
    bytes_total: int = 0
    staleness_sum: int = 0


class ResultsWriter:
    """The clock's recorder: writes result files and forwards progress."""

    def __init__(self, out_dir: Path, scenario: Scenario, flush_every_s: float,
                 on_progress: Callable[[float, int, int, float | None], None] | None = None,
                 resume: bool = False) -> None:
        self.out_dir = out_dir
        self.muted = resume
        """Resuming (:mod:`fedclock.actors.replay`): rows are kept in memory only, and the
        files on disk left as they are, until :meth:`resume_rows`."""
        out_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            (out_dir / RESOLVED_FILE).write_text(
                yaml.safe_dump(resolved_dict(scenario), sort_keys=False), encoding="utf-8")
        self.events = Table(out_dir / "events.parquet", EVENTS_SCHEMA, journal=True, open_columns=True)
        self.metrics = Table(out_dir / "metrics.parquet", METRICS_SCHEMA, journal=True, open_columns=True)
        self.clients = Table(out_dir / "clients.parquet", CLIENTS_SCHEMA)
        self.timeline = Table(out_dir / "timeline.parquet", TIMELINE_SCHEMA, journal=True)
        self.client_metrics = (Table(out_dir / "client_metrics.parquet", CLIENT_METRICS_SCHEMA, journal=True)
                               if scenario.evaluation.per_client else None)
        self.participation: Participation | None = None
        """Participation counts (:mod:`fedclock.scenarios.participation`), once the run sets them."""
        self._client_results: Sequence[Any] = ()
        """Each client's result of the evaluation just made, as the backend handed it
        (:meth:`clients_evaluated`)."""
        self._client_adapted: Sequence[Any] = ()
        """Each client's adapted result of the evaluation just made (:meth:`clients_adapted`)."""
        self.flush_every_s = flush_every_s
        self.on_progress = on_progress
        self.totals = RunTotals()
        self.started = time.perf_counter()
        self._last_flush = self.started
        self.last_accuracy: float | None = None
        self.last_metrics: dict[str, float] = {}
        self.last_round = 0
        """The ``round`` of the last evaluation (as in metrics.parquet)."""
        self.tensorboard: TensorBoardScalars | None = None
        """TensorBoard scalars (``output.tensorboard``); when resuming, opened by :meth:`resume_rows`."""
        self._wants_tensorboard = scenario.output.tensorboard
        if not resume:
            self.tensorboard = TensorBoardScalars(out_dir / TENSORBOARD_DIR) if self._wants_tensorboard else None
            self.flush()

    @property
    def wall_time(self) -> float:
        return time.perf_counter() - self.started

    # ------------------------------------------------------------------ Recorder
    def task_ended(self, task: Task) -> None:
        row = self._event_core(task)
        # what the client reported beyond the core columns (an applied task's metrics) joins as open columns
        self.events.append({**task.metrics, **row} if task.metrics else row)
        if self.participation is not None:
            self.participation.ended(task)
        totals = self.totals
        if task.status == APPLIED:
            totals.applied += 1
            totals.staleness_sum += int(task.staleness or 0)
            totals.bytes_total += task.bytes_down + task.bytes_up
        elif task.status in (DROPPED, TIMED_OUT):
            totals.dropped += int(task.status == DROPPED)
            totals.timed_out += int(task.status == TIMED_OUT)
            totals.bytes_total += task.bytes_down + task.bytes_up
        elif task.status == CANCELLED:
            totals.cancelled += 1
            totals.bytes_total += task.bytes_down
        else:
            totals.lost += int(task.status == LOST)
            totals.unfinished += int(task.status != LOST)
            totals.bytes_total += task.bytes_down
        # written at the clock's next progress report: a sync round's hundreds of task ends are one part file

    @staticmethod
    def _event_core(task: Task) -> dict[str, Any]:
        """The typed columns of ``task``'s events row."""
        t = task.timing
        return {
            "task": task.index, "client": task.client, "client_task": task.client_task, "round": task.round,
            "dispatched_at": task.dispatched_at, "finished_at": task.ended_at,
            "version_dispatched": task.version, "version_applied": task.version_applied,
            "staleness": task.staleness if task.status == APPLIED else None,
            "bytes_down": task.bytes_down,
            "bytes_up": task.bytes_up if task.status in (APPLIED, DROPPED, TIMED_OUT) else 0,
            "download_s": t.download_s, "compute_s": t.compute_s, "upload_s": t.upload_s, "comm_s": t.comm_s,
            "num_samples": task.num_samples, "train_loss": task.metrics.get("train_loss"), "status": task.status,
            "steps": task.steps_reported if task.steps_reported is not None else task.steps,
            "steps_full": task.steps_full,
        }

    def clients_evaluated(self, results: Sequence[Any]) -> None:
        """The backend hands each client's personalized result (an
        :class:`~fedclock.algorithms.base.EvalResult` per client, in client order) of the
        evaluation it is computing; :meth:`evaluated` records them (``evaluation.per_client``)."""
        self._client_results = list(results)

    def clients_adapted(self, results: Sequence[Any]) -> None:
        """The backend hands each client's adapted result (``evaluation.adapted``, an
        :class:`~fedclock.algorithms.base.EvalResult` per client, in client order) of the
        evaluation it is computing; :meth:`evaluated` records them beside the personalized
        ones (``evaluation.per_client``)."""
        self._client_adapted = list(results)

    def evaluated(self, now: float, version: int, round_index: int, metrics: dict[str, float]) -> None:
        row = {"virtual_time": now, "wall_time": self.wall_time, "version": version, "round": round_index, **metrics,
               "tasks_applied": self.totals.applied, "tasks_dropped": self.totals.dropped,
               "bytes_total": self.totals.bytes_total,
               **(self.participation.row() if self.participation is not None else {})}
        self.metrics.append(row)
        if not self.muted:  # a resumed run's replay computes nothing; its rows come back from disk
            if self.client_metrics is not None:
                adapted = self._client_adapted
                for client, result in enumerate(self._client_results):
                    self.client_metrics.append({"client": client, "version": version, "round": round_index,
                                                "virtual_time": now, "accuracy": result.accuracy,
                                                "loss": result.loss, "num_test": result.count,
                                                "adapted_accuracy": adapted[client].accuracy if adapted else None,
                                                "adapted_loss": adapted[client].loss if adapted else None})
        self.last_accuracy = metrics.get("global_accuracy")
        self.last_metrics = dict(metrics)
        self.last_round = round_index
        if self.tensorboard is not None and not self.muted:
            self.tensorboard.add(now, version, row)
        self._maybe_flush()

    def timeline_event(self, record: Any) -> None:
        """A scripted event fired (a :class:`~fedclock.scheduling.timeline.TimelineRecord`)."""
        self.timeline.append({"time": record.time, "version": record.version, "round": record.round,
                              "event": record.event, "type": record.type, "num_clients": len(record.clients),
                              "clients": list(record.clients), "detail": record.detail})
        self._maybe_flush()

    def progress(self, now: float, version: int, in_flight: int) -> None:
        self._maybe_flush()
        if self.on_progress is not None:
            self.on_progress(now, version, in_flight, self.last_accuracy)

    # ------------------------------------------------------------------ files
    def write_clients(self, columns: dict[str, Any]) -> None:
        self.clients.replace(columns)

    def row_counts(self) -> dict[str, int]:
        """Rows of each incrementally written table so far (kept in a checkpoint)."""
        return {name: len(table) for name, table in self._journaled()}

    def row_digests(self, rows: dict[str, int]) -> dict[str, str]:
        """The :class:`RowsDigest` of the first ``rows[name]`` rows of each incrementally
        written table (kept in a checkpoint beside the counts)."""
        return {name: table.digest(rows[name]) for name, table in self._journaled() if name in rows}

    def make_durable(self) -> None:
        """Put every row appended so far on disk and flush it there (``fsync``): called before
        a checkpoint that counts these rows is written."""
        for _, table in self._journaled():
            if table.path.is_file():
                table.commit()
            else:
                table.flush()
            table.sync()
        fsync(self.out_dir)

    def _journaled(self) -> list[tuple[str, Table]]:
        """The incrementally written tables, by name."""
        tables = [("events", self.events), ("metrics", self.metrics), ("timeline", self.timeline)]
        return tables + ([("client_metrics", self.client_metrics)] if self.client_metrics is not None else [])

    def resume_rows(self, rows: dict[str, int]) -> None:
        """End of a resumed run's replay: take back the first ``rows[name]`` rows of each
        table from disk (the replay produced as many, without the training metrics and with
        other wall times; it produces no ``client_metrics`` rows, which come from disk alone),
        rewrite the files with exactly those rows, and write from now on."""
        kept_versions: list[int] = []
        for name, table in self._journaled():
            if name not in rows:
                raise ValueError(f"{name}: the checkpoint counted no rows of it (written by a run without it)")
            if name != "client_metrics" and len(table) != rows[name]:
                raise ValueError(f"{name}: the replay wrote {len(table)} rows, the checkpoint counted {rows[name]}")
            on_disk = read_rows(table.path)
            if on_disk.num_rows < rows[name]:
                raise ValueError(f"{table.path}: holds {on_disk.num_rows} rows, the checkpoint counted {rows[name]}")
            first = on_disk.slice(0, rows[name])
            kept = first.to_pydict()
            table.replace(kept)
            table.restart_digest(first)
            if name == "metrics":
                kept_versions = [int(v) for v in kept["version"]]
        if self._wants_tensorboard:  # scalars past the checkpoint's evaluations are written again
            self.tensorboard = TensorBoardScalars(self.out_dir / TENSORBOARD_DIR,
                                                  purge_from=kept_versions[-1] + 1 if kept_versions else 0)
        self.muted = False
        self.flush()

    def _maybe_flush(self) -> None:
        """After each completed event: a full rewrite when one is due, else the new rows as parts."""
        if self.muted:
            return
        if time.perf_counter() - self._last_flush >= self.flush_every_s:
            self.flush()
            return
        for _, table in self._journaled():
            table.commit()

    def flush(self) -> None:
        for table in [self.clients] + [table for _, table in self._journaled()]:
            table.flush()
        if self.tensorboard is not None:
            self.tensorboard.flush()
        self._last_flush = time.perf_counter()

    def close(self) -> None:
        """Flush everything and release the TensorBoard writer, if any."""
        self.flush()
        if self.tensorboard is not None:
            self.tensorboard.close()

    def client_columns(self) -> dict[str, np.ndarray]:
        """Per-client task counts, busy time and bytes from the events so far."""
        ev = self.events.columns
        client = np.asarray(ev["client"], dtype=np.int64)
        status = np.asarray(ev["status"], dtype=object)
        busy = np.asarray(ev["finished_at"], dtype=np.float64) - np.asarray(ev["dispatched_at"], dtype=np.float64)
        return {"client": client, "status": status, "busy": busy,
                "bytes_down": np.asarray(ev["bytes_down"], dtype=np.int64),
                "bytes_up": np.asarray(ev["bytes_up"], dtype=np.int64)}
