"""Finding and reading result directories written by ``fedclock run``.

A *run directory* holds ``metrics.parquet`` (and usually ``events.parquet``,
``clients.parquet`` and ``scenario.resolved.yaml``); a *suite directory* holds several run
directories, at any depth. ``fedclock plot`` and ``fedclock compare`` accept either.

A file with ``seeds:``/``repeats:`` writes one run directory per (run, seed), named
``seed_S`` below the run's directory; such directories form one *group* (the run's name),
whose curves and numbers are shown as mean ± std across its seeds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pyarrow as pa
import yaml

from fedclock.scenarios.results import RESOLVED_FILE, read_rows
from fedclock.scenarios.runstatus import read_status

if TYPE_CHECKING:
    import pandas as pd

METRICS_FILE = "metrics.parquet"
EVENTS_FILE = "events.parquet"
CLIENTS_FILE = "clients.parquet"
CLIENT_METRICS_FILE = "client_metrics.parquet"
SEED_DIR_PREFIX = "seed_"
"""Name prefix of the directory of one seed of a run (``fedclock run`` with ``seeds:``)."""
_SEED_DIR = re.compile(rf"^{SEED_DIR_PREFIX}(\d+)$")

REQUIRED_METRICS = ("virtual_time", "version", "global_accuracy")
REQUIRED_EVENTS = ("client", "dispatched_at", "finished_at", "status")


class ResultsError(Exception):
    """A results directory that cannot be read; the message is one line for the user."""


@dataclass
class RunResults:
    """The tables of one run directory (``events``/``clients`` are None when absent)."""

    name: str
    path: Path
    metrics: pd.DataFrame
    events: pd.DataFrame | None
    clients: pd.DataFrame | None
    resolved: dict[str, Any] | None
    client_metrics: pd.DataFrame | None = None
    """``client_metrics.parquet`` (``evaluation.per_client``), None when absent."""
    group: str = ""
    """The run this directory is one seed of (its name without the ``seed_S`` part); for a
    directory that is not a seed directory, its name."""
    status: str = "finished"
    """How the run ended, with the reason unless finished (``run.json``,
    :mod:`fedclock.scenarios.runstatus`); ``unknown`` for a run written without it."""

    @property
    def seed(self) -> int | None:
        """The scenario seed the run ran with (None when unknown)."""
        seed = (self.resolved or {}).get("seed")
        return int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None

    @property
    def algorithm(self) -> str:
        algo = (self.resolved or {}).get("algorithm")
        return str(algo.get("name", "?")) if isinstance(algo, dict) else "?"

    @property
    def mode(self) -> str:
        mode = (self.resolved or {}).get("mode")
        return str(mode.get("type", "?")) if isinstance(mode, dict) else "?"


def find_runs(paths: Sequence[str | Path]) -> list[RunResults]:
    """Every run directory under ``paths`` (each a run or a suite directory), read.

    Run names are paths relative to the directory given; when two given directories hold
    runs of the same name, the given directory's name is prefixed."""
    found: list[tuple[str, Path, Path]] = []  # (relative name, given dir, run dir)
    for given in (Path(p) for p in paths):
        if not given.is_dir():
            raise ResultsError(f"{given}: no such directory")
        if (given / METRICS_FILE).is_file():
            found.append((given.resolve().name or str(given), given, given))
            continue
        runs = sorted(p.parent for p in given.rglob(METRICS_FILE))
        if not runs:
            raise ResultsError(f"{given}: no results found (a run directory holds {METRICS_FILE}; "
                               "a suite directory holds run directories)")
        found += [(str(r.relative_to(given)), given, r) for r in runs]
    names = [n for n, _, _ in found]
    out = []
    for name, given, run_dir in found:
        if names.count(name) > 1:
            name = f"{given.resolve().name}/{name}"
        run = read_run(run_dir, name)
        if _SEED_DIR.match(run_dir.name):
            run.group = name.rpartition("/")[0] or run_dir.resolve().parent.name
        out.append(run)
    return out


def read_run(run_dir: Path, name: str | None = None) -> RunResults:
    """Read one run directory."""
    metrics = _read_table(run_dir / METRICS_FILE, REQUIRED_METRICS)
    events = _read_table(run_dir / EVENTS_FILE, REQUIRED_EVENTS) if (run_dir / EVENTS_FILE).is_file() else None
    clients = _read_table(run_dir / CLIENTS_FILE, ("client",)) if (run_dir / CLIENTS_FILE).is_file() else None
    per_client = (_read_table(run_dir / CLIENT_METRICS_FILE, ("client", "version", "accuracy"))
                  if (run_dir / CLIENT_METRICS_FILE).is_file() else None)
    resolved = None
    if (run_dir / RESOLVED_FILE).is_file():
        try:
            loaded = yaml.safe_load((run_dir / RESOLVED_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise ResultsError(f"{run_dir / RESOLVED_FILE}: cannot read ({_one_line(err)})") from None
        resolved = loaded if isinstance(loaded, dict) else None
    status = read_status(run_dir)
    return RunResults(name=name or run_dir.name, path=run_dir, metrics=metrics, events=events, clients=clients,
                      resolved=resolved, client_metrics=per_client, group=name or run_dir.name,
                      status=status.label if status is not None else "unknown")


def _read_table(path: Path, required: Sequence[str]) -> pd.DataFrame:
    try:
        table = read_rows(path)  # with the part files a crashed run left
    except (pa.ArrowException, OSError, ValueError) as err:
        raise ResultsError(f"{path}: not a readable Parquet file ({_one_line(err)})") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}; not a fedclock results file")
    return table.to_pandas()


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:200] + "..." if len(text) > 200 else text
