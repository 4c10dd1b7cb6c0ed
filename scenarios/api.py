"""The Python API: run a scenario from a script or a notebook.

    from fedclock.scenarios import run

    result = run("quickstart", overrides={"runtime.backend": "inline", "stop.rounds": 3})
    result.metrics.tail()          # pandas DataFrames read from the run's Parquet files
    result.events, result.clients

``source`` is a scenario file's path, a shipped scenario's name (``quickstart``,
``library/async_heterogeneous``), a dict in the file format, or a parsed
:class:`~fedclock.scenarios.schema.Scenario` / :class:`~fedclock.scenarios.loader.Suite`.
``overrides`` maps dotted keys to values exactly as ``--set`` does (``runs.NAME.field``
included; text values are read as YAML scalars, as ``--set`` reads them). In place of a name
the dict (or an override) may hold the object itself: an
:class:`~fedclock.algorithms.base.Algorithm` subclass for ``algorithm.name``, a model
factory for ``model.name``, a dataset loader for ``dataset.name``
(:mod:`fedclock.scenarios.plugins`).

A file with one run gives a :class:`RunResult`; a file with ``runs:`` gives a
:class:`SuiteResult` (the runs by name, plus the summary table). The ``fedclock`` command is
a thin layer over :func:`execute`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from fedclock.actors.ray_start import RayStart
from fedclock.actors.runtime import Runtime
from fedclock.algorithms.models import MODEL_NAMES
from fedclock.algorithms.registry import ALGORITHMS
from fedclock.scenarios.data.dataset_specs import DATASET_NAMES
from fedclock.scenarios.experiment import RunSummary, run_scenario
from fedclock.scenarios.grid import (GridListener, Job, Outcome, cluster_cpus, default_jobs, physical_cores, plan_jobs,
                                     run_jobs, unslowed_cores)
from fedclock.scenarios.loader import Override, ScenarioError, Suite, load_suite, parse_suite
from fedclock.scenarios.plugins import find
from fedclock.scenarios.results import resolved_dict
from fedclock.scenarios.rundirs import SEED_DIR_PREFIX
from fedclock.scenarios.run_costs import CountedCosts
from fedclock.scenarios.summary_file import read_summary_rows, write_summary
from fedclock.scenarios.scenario_paths import SCENARIO_DIR, find_scenario
from fedclock.scenarios.schema import Scenario

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RunResult", "RunsFailed", "SuiteResult", "execute", "load", "modules_to_ship", "resolve_path", "run"]


def scenario_dir() -> Path:
    """Where the shipped scenario files live."""
    return SCENARIO_DIR


def shipped_scenarios(root: Path | None = None) -> list[Path]:
    """Every shipped scenario file (under ``root``, default :func:`scenario_dir`), quickstart first."""
    root = scenario_dir() if root is None else root
    return sorted(root.glob("*.yaml")) + sorted((root / "library").rglob("*.yaml"))


def resolve_path(arg: str | Path) -> Path:
    """A path as given, or a shipped scenario by name."""
    path = find_scenario(arg)
    if path is None:
        raise ScenarioError(f"scenario file not found: {arg} (see `fedclock list scenarios`)")
    return path


def load(source: str | Path | Mapping[str, Any] | Scenario | Suite,
         overrides: Mapping[str, Any] | Sequence[Override] | None = None) -> Suite:
    """The validated runs of ``source`` (see the module docstring) with ``overrides``."""
    pairs: list[Override] = list(overrides.items()) if isinstance(overrides, Mapping) else list(overrides or ())
    if isinstance(source, Suite):
        if not pairs:
            return source
        source = {"name": source.name, "runs": [{**resolved_dict(s)} for s in source.runs]}
    if isinstance(source, Scenario):
        source = resolved_dict(source)
    if isinstance(source, Mapping):
        return parse_suite(dict(source), str(source.get("name", "scenario")), pairs, base_dir=Path.cwd())
    return load_suite(resolve_path(source), pairs)


def modules_to_ship(runs: Iterable[Scenario]) -> list[str]:
    """The files and folders of users' own modules that the runs name (Ray's ``py_modules``)."""
    paths = set()
    for s in runs:
        for kind, name, builtin in (("algorithm", s.algorithm.name, ALGORITHMS), ("model", s.model.name, MODEL_NAMES),
                                    ("dataset", s.dataset.name, DATASET_NAMES)):
            if name not in builtin:
                ship = find(kind, name, s.plugin_dir).ship  # beside the run's own scenario file first
                if ship is not None:
                    paths.add(ship)
    return sorted(paths)


@dataclass
class RunResult:
    """One run's results: the summary and its result files as DataFrames (read when asked)."""

    summary: RunSummary

    @property
    def out_dir(self) -> Path:
        return self.summary.out_dir

    @cached_property
    def metrics(self) -> pd.DataFrame:
        """``metrics.parquet``: one row per evaluation."""
        return _read_parquet(self.out_dir / "metrics.parquet")

    @cached_property
    def events(self) -> pd.DataFrame:
        """``events.parquet``: one row per client task."""
        return _read_parquet(self.out_dir / "events.parquet")

    @cached_property
    def clients(self) -> pd.DataFrame:
        """``clients.parquet``: one row per client."""
        return _read_parquet(self.out_dir / "clients.parquet")


def _read_parquet(path: Path) -> pd.DataFrame:
    import pandas as pd  # imported on use (0.2 s): a CLI run never needs it

    return pd.read_parquet(path)


@dataclass
class SuiteResult:
    """The runs of a file with ``runs:`` (or ``seeds:``), by name (``NAME/seed_S`` with seeds),
    and the summary table (one row per run)."""

    runs: dict[str, RunResult] = field(default_factory=dict)

    def __getitem__(self, name: str) -> RunResult:
        return self.runs[name]

    @property
    def summary(self) -> pd.DataFrame:
        return summary_frame([r.summary for r in self.runs.values()])


def summary_frame(summaries: Sequence[RunSummary]) -> pd.DataFrame:
    """The final table of several runs (what ``summary.parquet`` holds)."""
    import pandas as pd

    return pd.DataFrame([{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(s).items()} for s in summaries])


def run_out_dir(suite: Suite, index: int, out: Path | None) -> Path:
    """Where run ``index`` of ``suite`` writes its results: ``ROOT/RUN`` when the file has several
    runs (else ``ROOT``), and below that ``seed_S`` when the file lists ``seeds:``/``repeats:``.
    ROOT is ``out``, else ``output.dir``, else ``results/SUITE`` (several runs) or ``results/RUN``."""
    scenario = suite.runs[index]
    several = len({s.name for s in suite.runs}) > 1
    if out is not None:
        path = out / scenario.name if several else out
    elif scenario.output.dir is not None:
        path = scenario.output.dir / scenario.name if several else scenario.output.dir
    else:
        path = Path("results") / suite.name / scenario.name if several else Path("results") / scenario.name
    return path if suite.seeds is None else path / f"{SEED_DIR_PREFIX}{scenario.seed}"


Progress = Callable[[float, int, int, float | None], None]


def execute(suite: Suite, out: Path | None, resume: bool = False,
            on_start: Callable[[Scenario], Progress | None] | None = None,
            on_finish: Callable[[RunSummary], None] | None = None, overwrite: bool = False,
            on_note: Callable[[str], None] | None = None, ray_start: RayStart | None = None) -> list[RunSummary]:
    """Run every run of ``suite`` on one runtime (Ray, or inline, as the runs say; ``ray_start``:
    Ray already starting, which the runtime adopts when the runs are on it) and
    return their summaries; ``on_start`` may return a progress callback for the run. A run
    whose folder holds anything refuses it unless ``overwrite``
    (:mod:`fedclock.scenarios.runstatus`); ``on_note`` hears what a resume skipped."""
    first = suite.runs[0].runtime
    if len({s.runtime.backend for s in suite.runs}) > 1 or len({s.runtime.address for s in suite.runs}) > 1:
        raise ScenarioError("runtime.backend and runtime.address must be the same for every run of a file")
    # Ray and the first run's actors start in the background while that run loads its data
    runtime = Runtime(first.backend, first.address, prestart=(first, suite.runs[0].population.num_clients),
                      py_modules=modules_to_ship(suite.runs), ray_start=ray_start)
    summaries = []
    runtime.on_note = on_note
    costs = CountedCosts()  # counted once per session (fedclock.scenarios.run_costs)
    try:
        for i, scenario in enumerate(suite.runs):
            progress = on_start(scenario) if on_start is not None else None
            summary = run_scenario(scenario, runtime, run_out_dir(suite, i, out), on_progress=progress, resume=resume,
                                   on_note=on_note, overwrite=overwrite, costs=costs)
            if on_finish is not None:
                on_finish(summary)
            summaries.append(summary)
    finally:
        runtime.close()
    return summaries


def summary_root(suite: Suite, out: Path | None) -> Path | None:
    """Where ``summary.parquet`` goes (None for a file with one run and one seed)."""
    several = len({s.name for s in suite.runs}) > 1
    if not several and suite.seeds is None:
        return None
    root = run_out_dir(suite, 0, out).parent
    return root.parent if several and suite.seeds is not None else root


class RunsFailed(Exception):
    """Some runs of a grid failed (``run(..., jobs=N)``); the message names each with its
    error, and ``result`` holds the runs that finished."""

    def __init__(self, message: str, result: SuiteResult) -> None:
        super().__init__(message)
        self.result = result


def run_grid(suite: Suite, out: Path | None, jobs: int | str, overwrite: bool = False, unfinished: bool = False,
             listener: GridListener | None = None,
             on_plan: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Every (run, seed) job of ``suite`` in worker processes side by side
    (:mod:`fedclock.scenarios.grid`): ``jobs`` of them at once, or ``"auto"``
    (:func:`~fedclock.scenarios.grid.default_jobs`). With ``unfinished``, only the jobs whose
    folder does not say finished run (their summaries are read back from ``summary.parquet``).
    ``summary.parquet`` gains each job's row as it ends; ``on_plan(workers, jobs to run)`` is
    told before the workers start. Returns an outcome per job, in the file's order."""
    if len({s.runtime.backend for s in suite.runs}) > 1 or len({s.runtime.address for s in suite.runs}) > 1:
        raise ScenarioError("runtime.backend and runtime.address must be the same for every run of a file")
    root = summary_root(suite, out)
    path = root / "summary.parquet" if root is not None else None
    every = {(s.name, s.seed) for s in suite.runs}
    plan = plan_jobs(suite, [run_out_dir(suite, i, out) for i in range(len(suite.runs))], overwrite, unfinished)
    earlier = {(r["name"], r["seed"]): r for r in read_summary_rows(path)} if path is not None else {}
    fields = set(RunSummary.__dataclass_fields__)
    for o in plan:
        scenario = suite.runs[o.job.index]
        row = earlier.get((scenario.name, scenario.seed))
        if o.skipped and row is not None:
            o.summary = RunSummary(**{**{k: v for k, v in row.items() if k in fields}, "out_dir": Path(row["out_dir"])})
        elif o.skipped and path is None:  # a file with one run keeps no summary file
            pass
        elif o.skipped:  # finished, but its row is gone: run it again
            o.skipped, o.job = False, replace(o.job, overwrite=True)
    todo = sum(not o.skipped for o in plan)
    if jobs == "auto":
        first = suite.runs[0].runtime
        local = first.backend != "ray" or first.address is None
        cpus = unslowed_cores(physical_cores()) if local else cluster_cpus(first.address)
        workers = default_jobs(suite, cpus, max(1, todo))
    else:
        workers = max(1, min(int(jobs), max(1, todo)))
    if on_plan is not None:
        on_plan(workers, todo)
    done: list[RunSummary] = [o.summary for o in plan if o.summary is not None]

    class _Recorder(GridListener):
        def started(self, job: Job) -> None:
            if listener is not None:
                listener.started(job)

        def progress(self, job: Job, now: float, version: int, in_flight: int, accuracy: float | None) -> None:
            if listener is not None:
                listener.progress(job, now, version, in_flight, accuracy)

        def ended(self, outcome: Outcome) -> None:
            if outcome.summary is not None and path is not None:
                done.append(outcome.summary)
                write_summary(path, done, every)
            if listener is not None:
                listener.ended(outcome)

        def failure_detail(self, job: Job, text: str) -> None:
            if listener is not None:
                listener.failure_detail(job, text)

    return run_jobs(suite, plan, workers, _Recorder(), modules_to_ship(suite.runs))


def run(source: str | Path | Mapping[str, Any] | Scenario | Suite, *, out: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None, overwrite: bool = False, jobs: int | str = 1,
        unfinished: bool = False) -> RunResult | SuiteResult:
    """Run ``source`` (see the module docstring) and return its results. ``out``: the
    results folder (default: ``output.dir``, else ``results/NAME``); a file with several
    runs writes one folder per run under it and ``summary.parquet`` beside them. A folder
    that already holds results is refused unless ``overwrite`` (which replaces them).

    ``jobs``: run the file's (run, seed) jobs side by side in that many worker processes
    (``"auto"``: as many as the CPUs hold without slowing each run;
    :mod:`fedclock.scenarios.grid`); the tables are those of running them one after another.
    ``unfinished``: run only the jobs whose folder does not say finished (side by side as
    ``jobs`` says). A job that fails does not stop the others; :class:`RunsFailed` then names
    every failed one after the rest finished."""
    suite = load(source, overrides)
    out_path = Path(out) if out is not None else None
    if jobs != 1 or unfinished:
        if jobs != "auto" and (not isinstance(jobs, int) or jobs < 1):
            raise ScenarioError(f"jobs: must be a whole number of at least 1, or 'auto' (got {jobs!r})")
        outcomes = run_grid(suite, out_path, jobs, overwrite=overwrite, unfinished=unfinished)
        result = SuiteResult({_result_key(suite, o.summary): RunResult(o.summary) for o in outcomes
                              if o.summary is not None})
        failed = [o for o in outcomes if o.error is not None]
        if failed:
            raise RunsFailed("; ".join(f"{o.job.label}: {o.error}" for o in failed), result)
        return result if len(outcomes) > 1 or not result.runs else next(iter(result.runs.values()))
    summaries = execute(suite, out_path, overwrite=overwrite)
    if len(summaries) == 1:
        return RunResult(summaries[0])
    result = SuiteResult({_result_key(suite, s): RunResult(s) for s in summaries})
    result.summary.to_parquet(summaries[0].out_dir.parent / "summary.parquet", index=False)
    return result


def _result_key(suite: Suite, summary: RunSummary) -> str:
    """A run's name in a :class:`SuiteResult`: ``NAME``, or ``NAME/seed_S`` with seeds."""
    return summary.name if suite.seeds is None else f"{summary.name}/seed_{summary.seed}"
