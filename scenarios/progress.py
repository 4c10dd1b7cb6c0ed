"""What a run shows a person: a live progress bar and the final summary table."""
from __future__ import annotations

import sys
from types import TracebackType
from typing import Callable, Sequence

import numpy as np

from rich.console import Console, JustifyMethod
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedclock.scenarios.experiment import RunSummary
from fedclock.scenarios.grid import GridListener, Job, Outcome
from fedclock.scenarios.loader import Suite
from fedclock.scenarios.schema import Scenario


def make_console() -> Console:
    """A console that stays wide enough for the summary table when output is not a terminal."""
    console = Console(stderr=False)
    if not console.is_terminal:
        console = Console(width=200)
    return console


class RunProgress:
    """A progress bar per run: virtual time, server version, tasks in flight, latest accuracy.

    The bar advances with the server version (or virtual time when the run is bounded only
    by a virtual-time budget)."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description:<22}"), BarColumn(),
            TextColumn("t={task.fields[vt]:>9.1f}s  v={task.fields[version]:>5}  in-flight={task.fields[inflight]:>3}"
                       "  acc={task.fields[acc]}"),
            TimeElapsedColumn(), console=console, disable=not (enabled and console.is_terminal), transient=False)
        self._task: TaskID | None = None
        self._by_time = False

    def __enter__(self) -> "RunProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.__exit__(exc_type, exc, tb)

    def start(self, scenario: Scenario, label: str | None = None) -> None:
        stop = scenario.stop
        total: float | None = stop.rounds or stop.versions
        self._by_time = total is None
        if self._by_time:
            total = stop.virtual_time_s
        self._task = self.progress.add_task(label or scenario.name, total=total, vt=0.0, version=0, inflight=0, acc="-")

    def update(self, now: float, version: int, in_flight: int, accuracy: float | None) -> None:
        if self._task is None:
            return
        acc = f"{accuracy:.3f}" if accuracy is not None else "-"
        self.progress.update(self._task, completed=now if self._by_time else version, vt=now, version=version,
                             inflight=in_flight, acc=acc)

    def finish(self, summary: RunSummary) -> None:
        if self._task is not None:
            self.progress.update(self._task, completed=self.progress.tasks[-1].total, vt=summary.virtual_time,
                                 version=summary.versions, inflight=0, acc=f"{summary.global_accuracy:.3f}")
        self._task = None


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.2f}"


def _spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``mean ± std`` (sample std, ddof=1) of ``values``; the value alone when there is one, or
    when every seed gave the same."""
    if len(values) == 1 or len(set(values)) == 1:
        return fmt(values[0])
    arr = np.asarray(values, dtype=float)
    if np.isnan(arr).all():
        return "-"
    mean = float(np.nanmean(arr))
    std = float(np.nanstd(arr, ddof=1)) if np.sum(~np.isnan(arr)) > 1 else 0.0
    return f"{fmt(mean)} ± {fmt(std)}"


def _whole(x: float) -> str:
    """A count as a whole number; a mean of counts with one decimal."""
    return f"{x:.0f}" if x == int(x) else f"{x:.1f}"


def _privacy(group: Sequence[RunSummary]) -> str:
    """The privacy spent over a run (``epsilon (delta)``; mean ± std across seeds), "-" for
    a run without differential privacy."""
    if all(x.privacy_epsilon != x.privacy_epsilon for x in group):
        return "-"
    return f"{_spread([x.privacy_epsilon for x in group], lambda v: f'{v:.3g}')} ({group[0].privacy_delta:g})"


def summary_table(title: str, runs: Sequence[RunSummary]) -> Table:
    """The end-of-run comparison table: a row per run; a run given several seeds is one row of
    mean ± standard deviation across its seeds (the ``seeds`` column counts them)."""
    groups: dict[str, list[RunSummary]] = {}
    for r in runs:
        groups.setdefault(r.name, []).append(r)
    seeded = any(len(g) > 1 for g in groups.values())
    table = Table(title=title, show_lines=False,
                  caption="pers. = mean / 10th percentile over clients of accuracy on their own test split; "
                          "staleness = mean over applied uploads" + ("; a ± b = mean ± std across seeds (a alone: "
                                                                       "the same for every seed)" if seeded else ""))
    columns: list[tuple[str, JustifyMethod]] = [("run", "left")]
    if seeded:
        columns.append(("seeds", "right"))
    columns += [
        ("algorithm", "left"), ("mode", "left"), ("global %", "right"), ("pers. %", "right"),
        ("pers. p10 %", "right"), ("virtual s", "right"), ("wall s", "right"), ("versions", "right"),
        ("MB moved", "right"), ("dropped", "right"), ("staleness", "right"), ("stopped by", "left")]
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)
    private = any(r.privacy_epsilon == r.privacy_epsilon for r in runs)
    if private:  # DP runs: the privacy spent over the whole run (fedclock.algorithms.dp)
        table.add_column("DP eps (delta)", justify="right", no_wrap=True)
    one = lambda x: f"{x:.1f}"  # noqa: E731
    for name, g in groups.items():
        r = g[0]
        stops = sorted({x.stop_reason for x in g})
        table.add_row(name, *([str(len(g))] if seeded else []), r.algorithm, r.mode,
                      _spread([x.global_accuracy for x in g], _pct),
                      _spread([x.personal_accuracy_mean for x in g], _pct),
                      _spread([x.personal_accuracy_p10 for x in g], _pct),
                      _spread([x.virtual_time for x in g], one), _spread([x.wall_time for x in g], one),
                      _spread([float(x.versions) for x in g], _whole), _spread([x.bytes_moved / 1e6 for x in g], one),
                      _spread([float(x.stragglers_dropped) for x in g], _whole),
                      _spread([x.mean_staleness for x in g], lambda v: f"{v:.2f}"), "/".join(stops),
                      *([_privacy(g)] if private else []))
    return table


class GridProgress(GridListener):
    """What ``fedclock run --jobs`` shows: a bar per job as it starts in a worker (the runs
    side by side, each with its virtual time, version and accuracy), or, without a live
    display, a line per job as it ends. A failed job's bar stops where it failed."""

    def __init__(self, console: Console, enabled: bool, suite: Suite) -> None:
        self.console = console
        self.suite = suite
        self.bars = RunProgress(console, enabled)
        self._tasks: dict[int, tuple[TaskID, bool]] = {}

    def __enter__(self) -> "GridProgress":
        self.bars.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.bars.__exit__(exc_type, exc, tb)

    @property
    def live(self) -> bool:
        return bool(self.bars.progress.live.is_started)

    def started(self, job: Job) -> None:
        stop = self.suite.runs[job.index].stop
        total: float | None = stop.rounds or stop.versions
        by_time = total is None
        task = self.bars.progress.add_task(job.label, total=stop.virtual_time_s if by_time else total, vt=0.0,
                                           version=0, inflight=0, acc="-")
        self._tasks[job.index] = (task, by_time)

    def progress(self, job: Job, now: float, version: int, in_flight: int, accuracy: float | None) -> None:
        if job.index in self._tasks:
            task, by_time = self._tasks[job.index]
            self.bars.progress.update(task, completed=now if by_time else version, vt=now, version=version,
                                      inflight=in_flight, acc=f"{accuracy:.3f}" if accuracy is not None else "-")

    def ended(self, outcome: Outcome) -> None:
        job, s = outcome.job, outcome.summary
        if s is not None and job.index in self._tasks:
            task, _ = self._tasks[job.index]
            total = next(t.total for t in self.bars.progress.tasks if t.id == task)
            self.bars.progress.update(task, completed=total, vt=s.virtual_time, version=s.versions, inflight=0,
                                      acc=f"{s.global_accuracy:.3f}")
        elif job.index in self._tasks:
            self.bars.progress.update(self._tasks[job.index][0], description=f"{job.label} FAILED", inflight=0)
        if self.live:
            return
        if s is not None:
            self.console.print(f"  {job.label}: global accuracy {s.global_accuracy:.4f} after {s.versions} versions, "
                               f"{s.virtual_time:.1f} virtual s ({s.stop_reason})")
        else:
            self.console.print(f"  {job.label}: failed")

    def failure_detail(self, job: Job, text: str) -> None:
        self.console.print(f"{job.label}: error in the run", style="red")
        sys.stderr.write(text)
