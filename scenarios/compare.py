"""``fedclock compare DIR...``: one table across runs.

For every run directory found (see :mod:`fedclock.scenarios.rundirs`) one row:

* final global accuracy (last evaluation), best global accuracy, final personalized accuracy
  (mean and 10th percentile over clients), and when any run has it the final mean adapted
  accuracy (``evaluation.adapted``: every algorithm's clients scored after the same local
  adaptation of the global model, :mod:`fedclock.algorithms.adapted`);
* ``auc_global_accuracy``, the area under the accuracy curve as convergence speed: the mean
  global accuracy over the run's evaluations (all of them, version 0 included), i.e. the area
  under the accuracy-vs-evaluation curve divided by its length; runs compared on it must share
  their evaluation schedule (``evaluation.every``). Two runs that end at the same accuracy
  differ here when one got there sooner (FedMRUR, An et al., NeurIPS 2023, Table 3 reports
  convergence speed beside final accuracy);
* for each target accuracy ``T``: ``time_to_T``, the virtual time of the first evaluation
  whose global accuracy is at least ``T``, and ``versions_to_T``, its server version (a
  version is one aggregation: one round in sync mode, unless a round applied no upload; one
  applied upload or buffer in async mode), both empty when the run never reached ``T``. Targets come from ``--target``
  (repeatable); without it the single target is the *common target*: the best accuracy that
  every run reached, rounded down to a hundredth, so every row has a finite time to it.
  The resolution is that of the evaluations (``evaluation.every``, ``evaluation.at_rounds``).
  With ``metric="personal"`` (``--metric personal``) the accuracy compared with ``T`` is the
  mean personalized accuracy (each client's model on its own test split) and the columns are
  named ``time_to_personal_T`` etc.; a run without that metric is an error;
* for runs with differential privacy (a ``dp_epsilon`` column: ``privacy:`` or a DP
  algorithm), the epsilon spent at the last evaluation by the client that spent the most, and
  its delta (``dp_epsilon``, ``dp_delta``);
* virtual time (the last event or evaluation), wall time (at the last evaluation), server
  versions, bytes moved (down and up, every task), uploads applied, uploads dropped, and the
  mean staleness of applied uploads.

Runs that are seeds of one run (``seed_S`` directories, see :mod:`fedclock.scenarios.rundirs`)
are folded into one row by :func:`across_seeds`: every number is the mean across seeds, with
its sample standard deviation in ``<column>_std`` and the number of seeds in ``seeds``; a
time or version to ``T`` is averaged over the seeds that reached ``T``, counted in
``reached_T``.

Every row also says how its run ended (``status``: ``finished``, or ``running``,
``interrupted``, ``failed`` with the reason, from the run's ``run.json``; ``unknown`` for a run
written before fedclock recorded it); the printed table shows the column when a run did not
finish, since such a row holds partial numbers.

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

from fedclock.scenarios.rundirs import ResultsError, RunResults
from fedclock.scenarios.runfiles import COMPARE_FILES

APPLIED = "applied"
DROPPED = "dropped"
METRICS = {"global": "global_accuracy", "personal": "personal_accuracy_mean"}
"""``--metric`` choices and the metrics.parquet column each reads."""
LABELS = ("run", "algorithm", "mode", "status")


def common_target(runs: Sequence[RunResults], metric: str = "global") -> float | None:
    """The best accuracy (``metric``) every run reached, rounded down to 0.01 (None if undefined)."""
    bests = [_best(r.metrics, METRICS[metric]) for r in runs]
    if not bests or any(math.isnan(b) for b in bests):
        return None
    target = math.floor(min(bests) * 100 + 1e-9) / 100
    return target if target > 0 else None


def target_label(target: float, metric: str = "global") -> str:
    """Column suffix for a target accuracy, e.g. 0.8 -> '0.8' (personal: 'personal_0.8')."""
    return f"{target:g}" if metric == "global" else f"{metric}_{target:g}"


def reach(metrics: pd.DataFrame, target: float, metric: str = "global") -> tuple[float, int | None]:
    """Virtual time and server version of the first evaluation whose accuracy (``metric``:
    global, or mean personalized) is at least ``target``."""
    ordered = metrics.sort_values(["virtual_time", "version"], kind="stable")
    column = METRICS[metric]
    if column not in ordered:
        return float("nan"), None
    hit = ordered[ordered[column].to_numpy(dtype=float, na_value=np.nan) >= target]
    if hit.empty:
        return float("nan"), None
    first = hit.iloc[0]
    return float(first["virtual_time"]), int(first["version"])


def area_under_curve(metrics: pd.DataFrame, column: str = "global_accuracy") -> float:
    """The mean of ``column`` over the evaluations (rows) that measured it: the area under the
    accuracy curve per evaluation (NaN without any)."""
    if column not in metrics:
        return float("nan")
    values = metrics[column].to_numpy(dtype=float, na_value=np.nan)
    return float(np.nanmean(values)) if len(values) and not np.isnan(values).all() else float("nan")


def check_metric(runs: Sequence[RunResults], metric: str) -> None:
    """A one-line :class:`ResultsError` when ``metric`` is unknown or a run never measured it."""
    if metric not in METRICS:
        raise ResultsError(f"--metric: unknown metric {metric!r} (allowed: {', '.join(METRICS)})")
    if metric == "global":
        return
    column = METRICS[metric]
    for run in runs:
        values = run.metrics[column] if column in run.metrics else None
        if values is None or values.isna().all():
            raise ResultsError(f"--metric {metric}: run {run.name!r} has no {column} (it evaluated no "
                               f"personalized models: evaluation.personalized false or no client test split)")


def compare_runs(runs: Sequence[RunResults], targets: Sequence[float] | None = None,
                 metric: str = "global") -> pd.DataFrame:
    """One row per run (see the module docstring for the columns)."""
    check_metric(runs, metric)
    if targets is None or len(targets) == 0:
        common = common_target(runs, metric)
        targets = [] if common is None else [common]
    rows = []
    for run in runs:
        m = run.metrics.sort_values(["virtual_time", "version"], kind="stable")
        last = m.iloc[-1] if len(m) else None
        row: dict[str, object] = {
            "run": run.group or run.name, "seed": run.seed, "dir": run.name, "algorithm": run.algorithm,
            "mode": run.mode, "status": run.status,
            "global_accuracy": _get(last, "global_accuracy"),
            "best_global_accuracy": _best(m),
            "auc_global_accuracy": area_under_curve(m),
            "personal_accuracy_mean": _get(last, "personal_accuracy_mean"),
            "personal_accuracy_p10": _get(last, "personal_accuracy_p10"),
        }
        if last is not None and not pd.isna(last.get("adapted_accuracy_mean", float("nan"))):
            row["adapted_accuracy_mean"] = _get(last, "adapted_accuracy_mean")
        if last is not None and not pd.isna(last.get("dp_epsilon", float("nan"))):
            row["dp_epsilon"] = _get(last, "dp_epsilon")
            row["dp_delta"] = _get(last, "dp_delta")
        for t in targets:
            time_to, version_to = reach(m, t, metric)
            label = target_label(t, metric)
            row[f"time_to_{label}"] = time_to
            row[f"versions_to_{label}"] = version_to
        row.update(_totals(run))
        rows.append(row)
    frame = pd.DataFrame(rows)
    for col in frame.columns:
        if col.startswith("versions_to_") or col in ("seed", "versions", "bytes_moved",
                                                                       "tasks_applied", "dropped"):
            frame[col] = frame[col].astype("Int64")
    return frame


def across_seeds(frame: pd.DataFrame) -> pd.DataFrame:
    """Fold the rows of one run's seeds into one row: mean, ``<column>_std`` (sample standard
    deviation, ddof=1; 0 for a single seed), ``seeds`` and ``reached_T`` (see the module
    docstring). Runs without seeds stay one row each, with ``seeds`` 1."""
    numeric = [c for c in frame.columns if c not in LABELS + ("seed", "dir")]
    rows = []
    for name, g in frame.groupby("run", sort=False):
        row: dict[str, object] = {"run": name, "seeds": len(g), "algorithm": "/".join(dict.fromkeys(g["algorithm"])),
                                  "mode": "/".join(dict.fromkeys(g["mode"])),
                                  "status": "/".join(dict.fromkeys(g["status"]))}
        for col in numeric:
            values = pd.to_numeric(g[col], errors="coerce").astype(float)
            row[col] = float(values.mean()) if values.notna().any() else float("nan")
            row[f"{col}_std"] = float(values.std(ddof=1)) if values.notna().sum() > 1 else (
                0.0 if values.notna().any() else float("nan"))
            if col.startswith("time_to_"):
                row[f"reached_{col.removeprefix('time_to_')}"] = int(values.notna().sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _get(row: pd.Series | None, name: str) -> float:
    if row is None or name not in row.index or pd.isna(row[name]):
        return float("nan")
    return float(row[name])


def _best(metrics: pd.DataFrame, column: str = "global_accuracy") -> float:
    if column not in metrics:
        return float("nan")
    values = metrics[column].to_numpy(dtype=float, na_value=np.nan)
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
    parquet, csv = (out_dir / name for name in COMPARE_FILES)
    frame.to_parquet(parquet, index=False)
    frame.to_csv(csv, index=False)
    return parquet, csv


def comparison_table(frame: pd.DataFrame, title: str = "comparison") -> Table:
    """The comparison as a rich table (accuracies in %, bytes in MB); on a frame from
    :func:`across_seeds`, a run of several seeds shows ``mean ± std``."""
    personal = any(c.startswith("time_to_personal_") for c in frame.columns)
    which = "mean personalized" if personal else "global"
    seeded = "seeds" in frame.columns and bool((frame["seeds"] > 1).any())
    caption = (f"s/ver. to T: virtual seconds and server version (= rounds in sync mode) of the first evaluation "
               f"with {which} accuracy >= T (- = never); AUC = mean global accuracy over the evaluations; "
               "pers. = final mean / p10 personalized accuracy; "
               + ("adapted = final mean accuracy after evaluation.adapted's local steps; "
                  if "adapted_accuracy_mean" in frame.columns else "") +
               "staleness = mean over applied")
    if seeded:
        caption += ("; a ± b = mean ± std across seeds (a alone: the same for every seed), (k/n) = seeds that "
                    "reached T")
    table = Table(title=title, caption=caption)
    per_seed = "seed" in frame.columns and bool(frame["run"].duplicated().any())
    text: Callable[[object], str] = str
    cols: list[tuple[str, str, Callable[[object], str]]] = [
        ("run", "run", text)] + ([("seeds", "seeds", _int)] if seeded else []) + (
        [("seed", "seed", _int)] if per_seed else []) + [
        ("algorithm", "algorithm", str), ("mode", "mode", str)] + (
        [("status", "status", str)] if "status" in frame.columns
        and bool((~frame["status"].isin(["finished", "unknown"])).any()) else []) + [
        ("global %", "global_accuracy", _pct), ("best %", "best_global_accuracy", _pct),
        ("AUC %", "auc_global_accuracy", _pct),
        ("pers. %", "personal_accuracy_mean", _pct), ("pers. p10 %", "personal_accuracy_p10", _pct),
        ("adapted %", "adapted_accuracy_mean", _pct),
        ("epsilon", "dp_epsilon", _num(2)), ("delta", "dp_delta", _general),
    ]
    for col in frame.columns:
        if col.startswith("time_to_") and not col.endswith("_std"):
            t = col.removeprefix("time_to_")
            shown = t.removeprefix("personal_")
            cols += [(f"s to {shown}", col, _num(1)), (f"ver. to {shown}", f"versions_to_{t}", _int)]
    cols += [("virtual s", "virtual_time", _num(1)), ("wall s", "wall_time", _num(1)), ("versions", "versions", _int),
             ("MB moved", "bytes_moved", _mb), ("applied", "tasks_applied", _int), ("dropped", "dropped", _int),
             ("staleness", "mean_staleness", _num(2))]
    cols = [c for c in cols if c[1] in frame.columns]
    for header, _, _ in cols:
        table.add_column(header, justify="left" if header in ("run", "algorithm", "mode", "status") else "right",
                        no_wrap=header != "status")
    for _, row in frame.iterrows():
        table.add_row(*(_cell(row, key, fmt, seeded) for _, key, fmt in cols))
    return table


def _cell(row: pd.Series, key: str, fmt: Callable[[object], str], seeded: bool) -> str:
    """One value, or ``mean ± std`` (and ``(k/n)`` for a target not every seed reached)."""
    value = row[key]
    if not seeded or key in ("run", "seeds", "algorithm", "mode") or _missing(value):
        text = fmt(value) if fmt is not _int or _missing(value) else _int_or_mean(value)
        return text
    n = int(row["seeds"])
    text = _int_or_mean(value) if fmt is _int else fmt(value)
    std = row.get(f"{key}_std")
    if n > 1 and not _missing(std) and float(std) > 0:  # a lone value: the same for every seed
        text += f" ± {_int_or_mean(std) if fmt is _int else fmt(std)}"
    for prefix in ("time_to_", "versions_to_"):
        if key.startswith(prefix):
            reached = row.get(f"reached_{key.removeprefix(prefix)}")
            if not _missing(reached) and int(reached) < n:
                text += f" ({int(reached)}/{n})"
    return text


def _int_or_mean(x: object) -> str:
    """A whole number as such, a mean of whole numbers with one decimal."""
    value = float(x)  # type: ignore[arg-type]
    return str(int(value)) if value == int(value) else f"{value:.1f}"


def _missing(x: object) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def _pct(x: object) -> str:
    return "-" if _missing(x) else f"{100 * float(x):.2f}"  # type: ignore[arg-type]


def _general(x: object) -> str:
    return "" if _missing(x) else f"{float(x):g}"  # type: ignore[arg-type]


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
