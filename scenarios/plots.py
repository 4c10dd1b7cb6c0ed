"""``fedclock plot DIR``: PNG figures of one run or a suite of runs.

Written into ``DIR/plots`` (or ``--out``):

* ``accuracy_vs_time.png`` and ``accuracy_vs_version.png``: global accuracy (and mean
  personalized accuracy, dashed, when evaluated) of every run on one plot, against virtual
  time and against the server version. The seeds of one run (``seed_S`` directories) are
  drawn as one curve, their mean, with a band of ± one standard deviation (sample, ddof=1):
  against the version at the versions every seed evaluated; against virtual time on the union
  of the seeds' evaluation times up to the earliest last one, each seed holding its latest
  accuracy until its next evaluation;
* ``client_accuracy_<run>.png``, one per run with ``client_metrics.parquet``
  (``evaluation.per_client``): each client's personalized accuracy against the server
  version (the first ``max_clients`` clients);
* ``timeline_<run>.png``, one per run: a row per client, a bar per task split into its
  download, compute and upload phases (from ``download_s``/``compute_s``/``upload_s`` of
  ``events.parquet``, cut at the task's end). Communication is drawn light, computation in the
  colour of the task's outcome (applied fresh, applied stale, dropped, or any other status
  the engine records, each in its own colour), so stragglers show as long bars ending in
  drops or stale uploads. Rows are labelled with the client's compute speed when
  ``clients.parquet`` is present;
* ``staleness.png``: histogram of the staleness of applied uploads, one outline per run;
* ``bytes_per_client.png``: megabytes downloaded and uploaded by each client, per run (bars,
  or lines beyond ``max_clients`` clients);
* ``participation.png``: each client's participation (tasks dispatched to it, ``tasks`` of
  ``clients.parquet``) against its device's compute speed (log scale), one colour per run,
  with the run's Jain fairness index of participation in the legend: who a selector favours;
  clients retired by their privacy budget (``retired_at`` of ``clients.parquet``) are ringed
  and counted in the legend.

matplotlib runs with the Agg backend (no display needed).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from fedclock.scenarios.rundirs import RunResults

COMM_COLOR = "#9ecae1"
STATUS_COLORS = {"fresh": "#2ca02c", "stale": "#ff7f0e", "dropped": "#d62728", "unfinished": "#7f7f7f"}
OTHER_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#1f1f1f"]
STATUS_LABELS = {"fresh": "computing, applied fresh", "stale": "computing, applied stale",
                 "dropped": "computing, dropped", "unfinished": "computing, unfinished at stop"}
DPI = 110


def plot_runs(runs: Sequence[RunResults], out_dir: Path, max_clients: int = 60) -> list[Path]:
    """Write every figure for ``runs`` into ``out_dir``; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        _save(accuracy_figure(runs, "virtual_time", "virtual time (s)"), out_dir / "accuracy_vs_time.png"),
        _save(accuracy_figure(runs, "version", "server version"), out_dir / "accuracy_vs_version.png"),
    ]
    for run in runs:
        if run.events is not None and len(run.events):
            written.append(_save(timeline_figure(run, max_clients), out_dir / f"timeline_{_slug(run.name)}.png"))
        if run.client_metrics is not None and len(run.client_metrics):
            written.append(_save(client_accuracy_figure(run, max_clients),
                                 out_dir / f"client_accuracy_{_slug(run.name)}.png"))
    with_events = [r for r in runs if r.events is not None]
    if with_events:
        written.append(_save(staleness_figure(with_events), out_dir / "staleness.png"))
        written.append(_save(bytes_figure(with_events, max_bars=max_clients), out_dir / "bytes_per_client.png"))
    with_clients = [r for r in runs if r.clients is not None and {"tasks", "compute"} <= set(r.clients.columns)]
    if with_clients:
        written.append(_save(participation_figure(with_clients), out_dir / "participation.png"))
    return written


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run"


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _label(run: RunResults) -> str:
    return run.name if run.algorithm == "?" else f"{run.name} ({run.algorithm}, {run.mode})"


# --------------------------------------------------------------------------- accuracy
def accuracy_figure(runs: Sequence[RunResults], x: str, xlabel: str) -> Figure:
    """Global (solid) and mean personalized (dashed) accuracy of every run against ``x``; the
    seeds of one run as their mean with a ± std band (see the module docstring)."""
    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    any_personal = any_band = False
    for i, group in enumerate(_groups(runs)):
        color = colors[i % len(colors)]
        for column, style in (("global_accuracy", {"lw": 1.8}), ("personal_accuracy_mean", {"lw": 1.2, "ls": "--"})):
            if not all(column in r.metrics and r.metrics[column].notna().any() for r in group):
                continue
            label = None
            if column == "global_accuracy":
                label = _label(group[0]) if len(group) == 1 else f"{group[0].group} ({group[0].algorithm}, " \
                    f"{group[0].mode}; mean ± std of {len(group)} seeds)"
            else:
                any_personal = True
            xs, mean, std = seed_curve([r.metrics for r in group], x, column)
            ax.plot(xs, mean, color=color, label=label, drawstyle="steps-post" if len(group) > 1 and
                    x == "virtual_time" else "default", **style)
            if len(group) > 1:
                any_band = True
                ax.fill_between(xs, mean - std, mean + std, color=color, lw=0,
                                alpha=0.18 if column == "global_accuracy" else 0.08,
                                step="post" if x == "virtual_time" else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    title = "global accuracy (solid)" + (" and mean personalized accuracy (dashed)" if any_personal else "")
    ax.set_title(f"{title} vs {xlabel}" + ("\nlines: mean across seeds, bands: ± one std" if any_band else ""))
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _groups(runs: Sequence[RunResults]) -> list[list[RunResults]]:
    """Runs grouped by :attr:`RunResults.group`, in order of first appearance."""
    groups: dict[str, list[RunResults]] = {}
    for run in runs:
        groups.setdefault(run.group or run.name, []).append(run)
    return list(groups.values())


def seed_curve(tables: Sequence[pd.DataFrame], x: str, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and sample std (ddof=1; 0 for one table) of ``column`` across ``tables`` against
    ``x``: for ``version``, at the versions every table has; for ``virtual_time``, on the union of
    the tables' times up to the earliest last one, each table holding its latest value."""
    ordered = [t.sort_values([x, "version"], kind="stable") for t in tables]
    if len(ordered) == 1:
        t = ordered[0]
        return t[x].to_numpy(float), t[column].to_numpy(float, na_value=np.nan), np.zeros(len(t))
    if x == "version":
        common = set.intersection(*(set(t["version"].astype(int)) for t in ordered))
        xs = np.array(sorted(common), dtype=float)
        values = np.stack([t.drop_duplicates("version", keep="last").set_index("version")[column]
                           .reindex(xs.astype(int)).to_numpy(float, na_value=np.nan) for t in ordered])
    else:
        end = min(float(t[x].max()) for t in ordered)
        xs = np.unique(np.concatenate([t[x].to_numpy(float) for t in ordered]))
        xs = xs[xs <= end]
        values = np.stack([t[column].to_numpy(float, na_value=np.nan)[
            np.clip(np.searchsorted(t[x].to_numpy(float), xs, side="right") - 1, 0, None)] for t in ordered])
    return xs, np.nanmean(values, axis=0), np.nanstd(values, axis=0, ddof=1)


def client_accuracy_figure(run: RunResults, max_clients: int = 60) -> Figure:
    """Each client's personalized accuracy against the server version (``client_metrics.parquet``)."""
    cm = run.client_metrics
    assert cm is not None
    clients = np.sort(cm["client"].unique())
    shown = clients[:max_clients]
    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    for c in shown:
        rows = cm[cm["client"] == c].sort_values("version", kind="stable")
        ax.plot(rows["version"], rows["accuracy"], lw=1.0, alpha=0.8, label=f"client {c}")
    ax.set_xlabel("server version")
    ax.set_ylabel("personalized accuracy (own test split)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    more = "" if len(clients) <= max_clients else f" (first {max_clients} of {len(clients)} clients)"
    ax.set_title(f"{_label(run)}: accuracy of each client{more}")
    if len(shown) <= 20:
        ax.legend(fontsize=7, ncol=2)
    return fig


# --------------------------------------------------------------------------- timeline
def _outcome(status: str, staleness: float) -> str:
    if status == "applied":
        return "stale" if staleness > 0 else "fresh"
    return status


def timeline_figure(run: RunResults, max_clients: int = 60) -> Figure:
    """Per-client task bars: communication light, computation coloured by outcome."""
    ev = run.events
    assert ev is not None
    clients = np.sort(ev["client"].unique())
    total = len(clients)
    clients = clients[:max_clients]
    ev = ev[ev["client"].isin(clients)]
    row = {c: i for i, c in enumerate(clients)}
    start = ev["dispatched_at"].to_numpy(float)
    end = ev["finished_at"].to_numpy(float)
    end = np.where(np.isnan(end), start, end)
    zeros = np.zeros(len(ev))
    down = ev["download_s"].to_numpy(float, na_value=0.0) if "download_s" in ev else zeros
    comp = ev["compute_s"].to_numpy(float, na_value=0.0) if "compute_s" in ev else end - start
    stale = ev["staleness"].to_numpy(float, na_value=0.0) if "staleness" in ev else zeros
    outcomes = [_outcome(s, st) for s, st in zip(ev["status"].astype(str), stale)]
    others = sorted({o for o in outcomes if o not in STATUS_COLORS})
    colors = dict(STATUS_COLORS, **{o: OTHER_COLORS[i % len(OTHER_COLORS)] for i, o in enumerate(others)})
    # phases, each cut at the task's end
    t1 = np.minimum(start + down, end)
    t2 = np.minimum(t1 + comp, end)
    height = 0.7
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.32 * len(clients) + 1.6)), layout="constrained")
    rows = np.array([row[c] for c in ev["client"]])
    for r in row.values():
        mask = rows == r
        ax.broken_barh(list(zip(start[mask], t1[mask] - start[mask])), (r - height / 2, height),
                       facecolors=COMM_COLOR, edgecolor="none")
        ax.broken_barh(list(zip(t2[mask], end[mask] - t2[mask])), (r - height / 2, height),
                       facecolors=COMM_COLOR, edgecolor="none")
        outs = np.array(outcomes, dtype=object)[mask]
        for name in np.unique(outs):
            sel = outs == name
            ax.broken_barh(list(zip(t1[mask][sel], (t2 - t1)[mask][sel])), (r - height / 2, height),
                           facecolors=colors[name], edgecolor="white", linewidth=0.4)
    ax.set_yticks(range(len(clients)))
    ax.set_yticklabels(_client_labels(run, clients), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, float(np.nanmax(end)) if len(end) else 1.0)
    ax.set_xlabel("virtual time (s)")
    ax.grid(axis="x", alpha=0.3)
    shown = "" if total <= max_clients else f" (first {max_clients} of {total} clients)"
    ax.set_title(f"{_label(run)}: tasks per client{shown}")
    present = [o for o in list(STATUS_COLORS) + others if o in set(outcomes)]
    handles = [Patch(color=COMM_COLOR, label="communicating (download / upload)")]
    handles += [Patch(color=colors[o], label=STATUS_LABELS.get(o, f"computing, {o}")) for o in present]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 if len(clients) > 8 else -0.2),
              ncol=min(3, len(handles)), fontsize=8, frameon=False)
    return fig


def _client_labels(run: RunResults, clients: np.ndarray) -> list[str]:
    speed: dict[int, float] = {}
    if run.clients is not None and "compute" in run.clients:
        speed = dict(zip(run.clients["client"].astype(int), run.clients["compute"].astype(float)))
    return [f"client {c}" + (f"  {speed[int(c)]:.0f}/s" if int(c) in speed else "") for c in clients]


# --------------------------------------------------------------------------- staleness
def staleness_figure(runs: Sequence[RunResults]) -> Figure:
    """Histogram of the staleness of applied uploads, one outline per run."""
    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    values: list[tuple[RunResults, np.ndarray]] = []
    for run in runs:
        ev = run.events
        if ev is None or "staleness" not in ev:
            continue
        st = ev.loc[ev["status"].astype(str) == "applied", "staleness"].dropna().to_numpy(float)
        if len(st):
            values.append((run, st))
    top = int(max((v.max() for _, v in values), default=0))
    width = max(1, int(np.ceil((top + 1) / 100)))  # at most about 100 bins
    bins = np.arange(-0.5, top + width + 0.5, width)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (run, st) in enumerate(values):
        ax.hist(st, bins=bins.tolist(), histtype="step", lw=2, color=colors[i % len(colors)],
                label=f"{_label(run)}: mean {st.mean():.2f}")
    if not values:
        ax.text(0.5, 0.5, "no applied uploads", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("staleness (server versions between download and apply)")
    ax.set_ylabel("applied uploads")
    ax.set_title("staleness of applied uploads")
    ax.grid(alpha=0.3)
    if values:
        ax.legend(fontsize=8)
    return fig


# --------------------------------------------------------------------------- bytes
def bytes_figure(runs: Sequence[RunResults], max_bars: int = 60) -> Figure:
    """Megabytes downloaded (top) and uploaded (bottom) per client: a bar per run, or a line
    per run when there are more than ``max_bars`` clients."""
    per_run: list[tuple[RunResults, pd.DataFrame]] = []
    for run in runs:
        ev = run.events
        assert ev is not None
        cols = {k: (ev[k].fillna(0).astype(float) if k in ev else pd.Series(0.0, index=ev.index))
                for k in ("bytes_down", "bytes_up")}
        table = pd.DataFrame({"client": ev["client"].astype(int), **cols}).groupby("client").sum() / 1e6
        per_run.append((run, table))
    clients = sorted({int(c) for _, t in per_run for c in t.index})
    bars = len(clients) <= max_bars
    width_in = min(20.0, max(8.0, 0.45 * len(clients) * max(1, len(runs)) ** 0.5 + 3)) if bars else 14.0
    fig, axes = plt.subplots(2, 1, figsize=(width_in, 7), sharex=True, layout="constrained")
    width = 0.8 / max(1, len(per_run))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    x = np.arange(len(clients))
    for ax, col, what in ((axes[0], "bytes_down", "downloaded"), (axes[1], "bytes_up", "uploaded")):
        for i, (run, table) in enumerate(per_run):
            vals = table[col].reindex(clients, fill_value=0.0).to_numpy()
            if bars:
                ax.bar(x - 0.4 + width * (i + 0.5), vals, width, color=colors[i % len(colors)], label=_label(run))
            else:
                ax.plot(clients, vals, color=colors[i % len(colors)], lw=1.2, label=_label(run))
        ax.set_ylabel(f"MB {what}")
        ax.grid(axis="y", alpha=0.3)
    if bars:
        axes[1].set_xticks(x)
        axes[1].set_xticklabels([str(c) for c in clients], fontsize=8, rotation=90 if len(clients) > 40 else 0)
    axes[1].set_xlabel("client")
    fig.suptitle("bytes moved per client")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=min(3, len(per_run)),
               fontsize=8, frameon=False)
    return fig


# --------------------------------------------------------------------------- participation
def participation_figure(runs: Sequence[RunResults]) -> Figure:
    """Tasks per client against the client's compute speed (log x), one colour per run."""
    from fedclock.scenarios.participation import jain_index

    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    for i, run in enumerate(runs):
        table = run.clients
        assert table is not None
        tasks = table["tasks"].to_numpy(float)
        ax.scatter(table["compute"].to_numpy(float), tasks, s=18, alpha=0.7, color=colors[i % len(colors)],
                   marker=markers[(i // len(colors)) % len(markers)],
                   label=f"{_label(run)}: Jain {jain_index(tasks):.2f}")
        retired = table["retired_at"].notna().to_numpy() if "retired_at" in table.columns else None
        if retired is not None and retired.any():  # privacy.budget: ringed, counted in the legend
            ax.scatter(table["compute"].to_numpy(float)[retired], tasks[retired], s=60, facecolors="none",
                       edgecolors=colors[i % len(colors)], linewidths=1.0,
                       label=f"{_label(run)}: {int(retired.sum())} retired by their privacy budget")
    ax.set_xscale("log")
    ax.set_xlabel("compute speed of the client's device (log scale)")
    ax.set_ylabel("tasks dispatched to the client")
    ax.set_title("participation per client vs device speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
