"""``fedclock compare DIR...``: one table across runs.

For every run directory found (see :mod:`fedclock.scenarios.rundirs`) one row:

* final global accuracy (last evaluation), best global accuracy, final personalized accuracy
  (mean and 10th percentile over clients);
* for each target accuracy ``T``: ``time_to_T``, the virtual time of the first evaluation
  whose global accuracy is at least ``T``, and ``versions_to_T``, its server version (a
  version is one aggregation: one round in sync mode, one applied upload or buffer in async
  mode), both empty when the run never reached ``T``. Targets come from ``--target``
  (repeatable); without it the single target is the *common target*: the best accuracy that
  every run reached, rounded down to a hundredth, so every row has a finite time to it.
  The resolution is that of the evaluations (``evaluation.every``);
* virtual time (the last event or evaluation), wall time (at the last evaluation), server
  versions, bytes moved (down and up, every task), uploads applied, uploads dropped, and the
  mean staleness of applied uploads.

The table is printed and written as ``compare.parquet`` and ``compare.csv``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from fedclock.scenarios.rundirs import RunResults

APPLIED = "applied"
DROPPED = "dropped"


def common_target(runs: Sequence[RunResults]) -> float | None:
    """The best global accuracy every run reached, rounded down to 0.01 (None if undefined)."""
    bests = [_best(r.metrics) for r in runs]
    if not bests or any(math.isnan(b) for b in bests):
        return None
    target = math.floor(min(bests) * 100 + 1e-9) / 100
    return target if target > 0 else None


def target_label(target: float) -> str:
    """Column suffix for a target accuracy, e.g. 0.8 -> '0.8'."""
    return f"{target:g}"


def reach(metrics: pd.DataFrame, target: float) -> tuple[float, int | None]:
    """Virtual time and server version of the first evaluation with global accuracy >= target."""
    ordered = metrics.sort_values(["virtual_time", "version"], kind="stable")
    hit = ordered[ordered["global_accuracy"].to_numpy(dtype=float, na_value=np.nan) >= target]
    if hit.empty:
        return float("nan"), None
    first = hit.iloc[0]
    return float(first["virtual_time"]), int(first["version"])


def compare_runs(runs: Sequence[RunResults], targets: Sequence[float] | None = None) -> pd.DataFrame:
    """One row per run (see the module docstring for the columns)."""
    if targets is None or len(targets) == 0:
        common = common_target(runs)
        targets = [] if common is None else [common]
    rows = []
    for run in runs:
        m = run.metrics.sort_values(["virtual_time", "version"], kind="stable")
        last = m.iloc[-1] if len(m) else None
        row: dict[str, object] = {
            "run": run.name, "algorithm": run.algorithm, "mode": run.mode,
            "global_accuracy": _get(last, "global_accuracy"),
            "best_global_accuracy": _best(m),
            "personal_accuracy_mean": _get(last, "personal_accuracy_mean"),
            "personal_accuracy_p10": _get(last, "personal_accuracy_p10"),
        }
        for t in targets:
            time_to, version_to = reach(m, t)
            row[f"time_to_{target_label(t)}"] = time_to
            row[f"versions_to_{target_label(t)}"] = version_to
        row.update(_totals(run))
        rows.append(row)
    frame = pd.DataFrame(rows)
    for col in frame.columns:
        if col.startswith("versions_to_") or col in ("versions", "bytes_moved", "tasks_applied", "dropped"):
            frame[col] = frame[col].astype("Int64")
    return frame


def _get(row: pd.Series | None, name: str) -> float:
    if row is None or name not in row.index or pd.isna(row[name]):
        return float("nan")
    return float(row[name])


def _best(metrics: pd.DataFrame) -> float:
    values = metrics["global_accuracy"].to_numpy(dtype=float, na_value=np.nan)
    return float(np.nanmax(values)) if len(values) and not np.isnan(values).all() else float("nan")


def _totals(run: RunResults) -> dict[str, object]:
    m, ev = run.metrics, run.events
    virtual = float(m["virtual_time"].max()) if len(m) else float("nan")
    out: dict[str, object] = {
        "virtual_time": virtual,
        "wall_time": float(m["wall_time"].max()) if "wall_time" in m and len(m) else float("nan"),
        "versions": int(m["version"].max()) if len(m) else None,
    }
    if ev is not None and len(ev):
        virtual = float(np.nanmax([virtual, float(ev["finished_at"].max())]))
        status = ev["status"].astype(str)
        moved = 0
        for col in ("bytes_down", "bytes_up"):
            if col in ev:
                moved += int(ev[col].fillna(0).sum())
        applied = status == APPLIED
        stale = ev.loc[applied, "staleness"].dropna() if "staleness" in ev else pd.Series(dtype=float)
        out.update(bytes_moved=moved, tasks_applied=int(applied.sum()), dropped=int((status == DROPPED).sum()),
                   mean_staleness=float(stale.mean()) if len(stale) else float("nan"))
    else:
        bytes_total = m["bytes_total"].max() if "bytes_total" in m and len(m) else None
        out.update(bytes_moved=None if bytes_total is None or pd.isna(bytes_total) else int(bytes_total),
                   tasks_applied=int(m["tasks_applied"].max()) if "tasks_applied" in m and len(m) else None,
                   dropped=int(m["tasks_dropped"].max()) if "tasks_dropped" in m and len(m) else None,
                   mean_staleness=float("nan"))
    out["virtual_time"] = virtual
    return out


def write_comparison(frame: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``compare.parquet`` and ``compare.csv`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parquet, csv = out_dir / "compare.parquet", out_dir / "compare.csv"
    frame.to_parquet(parquet, index=False)
    frame.to_csv(csv, index=False)
    return parquet, csv


def comparison_table(frame: pd.DataFrame, title: str = "comparison") -> Table:
    """The comparison as a rich table (accuracies in %, bytes in MB)."""
    table = Table(title=title, caption="s/ver. to T: virtual seconds and server version of the first evaluation "
                  "with global accuracy >= T (- = never); pers. = final mean / p10 personalized accuracy; "
                  "staleness = mean over applied")
    cols: list[tuple[str, str, Callable[[object], str]]] = [
        ("run", "run", str), ("algorithm", "algorithm", str), ("mode", "mode", str),
        ("global %", "global_accuracy", _pct), ("best %", "best_global_accuracy", _pct),
        ("pers. %", "personal_accuracy_mean", _pct), ("pers. p10 %", "personal_accuracy_p10", _pct),
    ]
    for col in frame.columns:
        if col.startswith("time_to_"):
            t = col.removeprefix("time_to_")
            cols += [(f"s to {t}", col, _num(1)), (f"ver. to {t}", f"versions_to_{t}", _int)]
    cols += [("virtual s", "virtual_time", _num(1)), ("wall s", "wall_time", _num(1)), ("versions", "versions", _int),
             ("MB moved", "bytes_moved", _mb), ("applied", "tasks_applied", _int), ("dropped", "dropped", _int),
             ("staleness", "mean_staleness", _num(2))]
    for header, _, _ in cols:
        table.add_column(header, justify="left" if header in ("run", "algorithm", "mode") else "right", no_wrap=True)
    for _, row in frame.iterrows():
        table.add_row(*(fmt(row[key]) for _, key, fmt in cols))
    return table


def _missing(x: object) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def _pct(x: object) -> str:
    return "-" if _missing(x) else f"{100 * float(x):.2f}"  # type: ignore[arg-type]


def _int(x: object) -> str:
    return "-" if _missing(x) else str(int(x))  # type: ignore[call-overload]


def _mb(x: object) -> str:
    return "-" if _missing(x) else f"{float(x) / 1e6:.2f}"  # type: ignore[arg-type]


def _num(digits: int) -> Callable[[object], str]:
    def fmt(x: object) -> str:
        return "-" if _missing(x) else f"{float(x):.{digits}f}"  # type: ignore[arg-type]
    return fmt


def print_comparison(frame: pd.DataFrame, console: Console | None = None, title: str = "comparison") -> None:
    """Print the comparison table."""
    console = console or Console(width=200)
    console.print(comparison_table(frame, title))
