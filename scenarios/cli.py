"""The ``fedclock`` command.

    fedclock run FILE [--out DIR] [--overwrite] [--set key=value ...] [--seed S ...] [--jobs N]
                      [--backend ray|inline] [--address ADDR]
    fedclock run --resume DIR [--backend ray|inline] [--address ADDR]
    fedclock validate FILE [--set key=value ...]
    fedclock list algorithms|models|datasets|scenarios
    fedclock plot DIR [--out DIR]
    fedclock compare DIR... [--target ACC ...] [--metric global|personal] [--per-seed] [--out DIR]
    fedclock traces convert IN OUT [--clients N] [--until-s S]
    fedclock reproduce FAMILY [--seeds N] [--jobs N] [--out DIR] [--report DIR] [--set KEY=VALUE ...]
                              [--allow-dirty]

FILE is a path, or the name of a shipped scenario (``quickstart``,
``library/async_heterogeneous``). User mistakes print one line, ``fedclock: error: …``, and
exit with status 2; no traceback.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence



from fedclock.actors.calls import ActorLost
from fedclock.actors.ray_start import RayStart
from fedclock.actors.watchdog import TaskHung
from fedclock.actors.runtime import ResourceError
from fedclock.algorithms.models import MODEL_SUMMARIES
from fedclock.algorithms.registry import ALGORITHMS, UnknownAlgorithm
from fedclock.scenarios import startup_profile
from fedclock.scenarios.api import execute, resolve_path, scenario_dir, shipped_scenarios, summary_root
from fedclock.scenarios.checkpoints import CheckpointError
from fedclock.scenarios.claims import ClaimError
from fedclock.scenarios.data.dataset_specs import DATASET_SUMMARIES
from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.experiment import Interrupted, OutputError, RunSummary
from fedclock.scenarios.loader import ScenarioError, Suite, load_suite, not_imported, one_line, read_yaml
from fedclock.scenarios.plugins import PluginError, entry_point_origin, entry_points, find
from fedclock.scenarios.results import MetricError
from fedclock.scenarios.rundirs import ResultsError
from fedclock.scenarios.runstatus import FolderInUse, read_status
from fedclock.scenarios.schema import Scenario
from fedclock.scenarios.summary_file import write_summary
from fedclock.scheduling.selection import SelectorError

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake on the command line."""


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """The command line's parser, built once per process (building it costs about 80 ms, most
    of it argparse's message-catalog look-ups; parsing keeps no state in it)."""
    parser = argparse.ArgumentParser(prog="fedclock", description="Federated learning under system heterogeneity, "
                                     "simulated on Ray actors with a deterministic virtual clock.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every run of a scenario file")
    run.add_argument("file", nargs="?")
    run.add_argument("--resume", type=Path, default=None, metavar="DIR",
                     help="go on with the run in DIR from its last checkpoint (written with output.checkpoint_every)")
    run.add_argument("--out", type=Path, default=None, help="output directory (default: output.dir or results/NAME)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results of an earlier run in the output folder (without it, a run refuses "
                     "a folder that is not empty)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field, e.g. --set algorithm.lr=0.1 (repeatable)")
    run.add_argument("--backend", choices=["ray", "inline"], default=None,
                     help="override runtime.backend for every run")
    run.add_argument("--address", default=None, metavar="ADDR",
                     help="run on an existing Ray cluster (overrides runtime.address), e.g. 10.0.0.5:6379 or auto")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--profile-startup", action="store_true", help="print where the seconds before the first "
                     "client task went (imports, scenario, data, model, FLOP count, actors, other)")
    run.add_argument("--seed", dest="seeds", action="append", type=int, default=[], metavar="S",
                     help="run only this seed of the file's seeds:/repeats: (repeatable; separate processes may run "
                     "different seeds side by side into the same --out)")
    run.add_argument("--jobs", type=_jobs_value, default=1, metavar="N|auto",
                     help="run the file's runs and seeds side by side in up to N worker processes (auto: as many "
                     "as the CPUs hold without slowing each run)")
    run.add_argument("--unfinished", action="store_true",
                     help="run only the (run, seed) jobs of FILE whose folder does not say finished (one with a "
                     "checkpoint goes on from it)")
    val = sub.add_parser("validate", help="check a scenario file without running it (a module:attribute name "
                         "imports that module, running its code; --no-import checks without)",
                         description="Check a scenario file without running it. A name of the form module:attribute "
                         "(your own algorithm, model or dataset) or of an installed plugin imports that module, "
                         "which runs its code, as a run would; give --no-import to check a file you do not trust.")
    val.add_argument("file")
    val.add_argument("--no-import", action="store_true",
                     help="import nothing: a plugin algorithm's own fields and the modes it runs in stay unchecked "
                     "(listed in the output)")
    val.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    lst = sub.add_parser("list", help="list algorithms, models, datasets (shipped and installed plugins) or shipped "
                         "scenarios")
    lst.add_argument("what", choices=["algorithms", "models", "datasets", "scenarios"])
    plot = sub.add_parser("plot", help="write PNG figures of a run or suite results directory")
    plot.add_argument("dir", type=Path)
    plot.add_argument("--out", type=Path, default=None, help="where the PNGs go (default: DIR/plots)")
    plot.add_argument("--max-clients", type=int, default=60, help="clients shown in each timeline (default 60)")
    cmp = sub.add_parser("compare", help="tabulate results across runs (writes compare.parquet and compare.csv)")
    cmp.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    cmp.add_argument("--target", dest="targets", action="append", type=float, default=[], metavar="ACC",
                     help="target accuracy (see --metric) in (0, 1] for time/versions-to-target (repeatable; "
                     "default: the best accuracy every run reached)")
    cmp.add_argument("--metric", choices=["global", "personal"], default="global",
                     help="accuracy that --target reads: global (the global model on the global test set, default) "
                     "or personal (mean over clients of each client's model on its own test split)")
    cmp.add_argument("--per-seed", action="store_true",
                     help="one row per seed directory instead of mean ± std per run")
    cmp.add_argument("--out", type=Path, default=None,
                     help="where compare.parquet/.csv go (default: DIR when one is given, else the current folder)")
    traces = sub.add_parser("traces", help="trace files: convert FedScale's device files to fedclock's Parquet traces")
    traces_sub = traces.add_subparsers(dest="traces_command", required=True)
    convert = traces_sub.add_parser("convert", help="FedScale client_device_capacity or client_behave_trace (pickle) "
                                    "-> device or availability trace (Parquet)")
    convert.add_argument("source", type=Path, metavar="IN")
    convert.add_argument("target", type=Path, metavar="OUT")
    convert.add_argument("--clients", type=int, default=None, metavar="N",
                         help="deal the file's entries to clients 0..N-1 (cycling; default: one client per entry)")
    convert.add_argument("--until-s", type=float, default=None, metavar="S",
                         help="behaviour traces: write the repeating intervals out over [0, S) (default: one "
                         "finish_time)")
    rep = sub.add_parser("reproduce", help="run a paper family's claims on paired seeds and write its report "
                         "(docs/reproductions/FAMILY.md)")
    rep.add_argument("family", help="a shipped claim set (scenarios/reproductions/FAMILY.yaml) or a claim file's path")
    rep.add_argument("--seeds", type=int, default=None, metavar="N",
                     help="seeds 0..N-1 per run (at least 2; default: the claim set's seeds:)")
    rep.add_argument("--jobs", type=int, default=1, metavar="N", help="run up to N (run, seed) jobs side by side")
    rep.add_argument("--out", type=Path, default=None,
                     help="where the runs go and are reused from (default: results/reproduce/FAMILY)")
    rep.add_argument("--report", type=Path, default=None,
                     help="where FAMILY.md and its PNGs go (default: docs/reproductions)")
    rep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field of every run, e.g. --set runtime.device=cuda (repeatable)")
    rep.add_argument("--allow-dirty", action="store_true",
                     help="run from a work tree with uncommitted changes (refused otherwise); the report's header "
                     "then gives the changes' hash")
    return parser


def _convert_trace(source: Path, target: Path, clients: int | None, until_s: float | None) -> int:
    """``fedclock traces convert``: one line saying what was written."""
    from fedclock.scheduling.traces import TraceError, convert_fedscale

    if clients is not None and clients < 1:
        raise UsageError(f"traces convert --clients: must be >= 1 (got {clients})")
    if until_s is not None and not until_s > 0:
        raise UsageError(f"traces convert --until-s: must be > 0 (got {until_s:g})")
    if target.is_dir():
        raise UsageError(f"traces convert: {target}: is a folder, not a file; give the converted trace's file name")
    try:
        print(convert_fedscale(source, target, clients, until_s))
    except TraceError as exc:
        raise UsageError(f"traces convert: {exc}") from None
    return 0


def main(argv: Sequence[str] | None = None, ray_start: RayStart | None = None) -> int:
    """The command (the console script runs it through :mod:`fedclock.scenarios.entry`, which
    may hand it Ray already starting as ``ray_start``; a run on another backend or cluster
    shuts that down)."""
    parser = _parser()
    previous = None
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed a one-line usage error
        return int(exc.code or 0)
    try:
        if args.command == "list":
            return _list(args.what)
        if args.command == "validate":
            suite = load_suite(resolve_path(args.file), args.overrides, imports=not args.no_import)
            names = ", ".join(dict.fromkeys(s.name for s in suite.runs))
            if suite.seeds is not None:
                names += f"; each with seeds {', '.join(str(s) for s in suite.seeds)}"
            unchecked = list(dict.fromkeys(n for s in suite.runs for n in not_imported(s))) if args.no_import else []
            if unchecked:
                names += f"; not imported, so unchecked: {', '.join(unchecked)}"
            print(f"{suite.source}: ok ({len(suite.runs)} run{'s' if len(suite.runs) != 1 else ''}: {names})")
            return 0
        if args.command == "plot":
            return _plot(args.dir, args.out, args.max_clients)
        if args.command == "compare":
            return _compare(args.dirs, args.targets, args.out, args.metric, args.per_seed)
        if args.command == "traces":
            return _convert_trace(args.source, args.target, args.clients, args.until_s)
        if args.command == "reproduce":
            return _reproduce(args)
        previous = _stop_on_sigterm()
        overrides = list(args.overrides)
        if args.backend is not None:
            overrides.append(f"runtime.backend={args.backend}")
        if args.address is not None:
            overrides.append(f"runtime.address={json.dumps(args.address)}")  # quoted: always a string
        if args.resume is not None:
            if args.file is not None or args.overrides or args.out is not None or args.seeds or args.jobs != 1 \
                    or args.overwrite or args.unfinished:
                raise UsageError("--resume DIR: give no FILE, --set, --seed, --jobs, --unfinished, --out or "
                                 "--overwrite (the run's scenario and directory are DIR's)")
            return _run(_resume_suite(args.resume, overrides), args.resume, quiet=args.quiet, resume=True)
        if args.file is None:
            raise UsageError("run: give a scenario FILE, or --resume DIR")
        profile = startup_profile.begin() if args.profile_startup else None
        with startup_profile.phase("scenario"):
            path = resolve_path(args.file)
            suite = _only_seeds(load_suite(path, overrides), args.seeds)
        if args.jobs != 1 or args.unfinished:
            if profile is not None:
                raise UsageError("--profile-startup: profiles one process's run; leave out --jobs and --unfinished")
            return _run_grid(suite, args)
        code = _run(suite, args.out, quiet=args.quiet, overwrite=args.overwrite, ray_start=ray_start)
        if profile is not None:
            print(f"fedclock: {profile.report()}", file=sys.stderr)
        return code
    except (ScenarioError, DatasetError, UsageError, ResourceError, ResultsError, MetricError, CheckpointError,
            PluginError, ClaimError, FolderInUse, SelectorError) as exc:
        print(f"fedclock: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except UnknownAlgorithm as exc:
        print(f"fedclock: error: {one_line(str(exc.args[0]))}", file=sys.stderr)
        return EXIT_USAGE
    except (ActorLost, OutputError, TaskHung) as exc:  # not the user's mistake, but still one line
        print(f"fedclock: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:  # a path the user gave is the wrong kind
        print(f"fedclock: error: {_wrong_kind(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 0
    except KeyboardInterrupt:
        print("fedclock: interrupted; results written so far are complete Parquet files", file=sys.stderr)
        return 130
    except Interrupted as exc:
        print(f"fedclock: {exc}; results written so far are complete Parquet files (with output.checkpoint_every, "
              f"fedclock run --resume DIR goes on)", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _wrong_kind(exc: OSError) -> str:
    """One line for a path that is a file where a folder is needed (or the other way round)."""
    where = exc.filename if exc.filename is not None else "a path given"
    if isinstance(exc, IsADirectoryError):
        return f"{where}: is a folder, not a file; give a file's path"
    if isinstance(exc, FileExistsError):
        return f"{where}: is a file, not a folder; give a folder (or a new name)"
    return f"{where}: a part of this path is a file, not a folder; give a path below a folder"


def _stop_on_sigterm() -> Any:
    """SIGTERM (``kill``, a batch system's time limit) ends a run as Ctrl-C does: the run
    folder records ``interrupted`` and the user reads one line, not a silent death."""
    def stop(signum: int, frame: Any) -> None:
        raise Interrupted(f"interrupted ({signal.Signals(signum).name})")

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, stop)  # the handler before, put back when the command ends


def _resume_suite(directory: Path, overrides: list[str]) -> Suite:
    """The one run in a run directory, from its ``scenario.resolved.yaml``."""
    path = directory / "scenario.resolved.yaml"
    if not path.is_file():
        status = read_status(directory) if directory.is_dir() else None
        if status is not None and status.status == "running":
            raise FolderInUse(f"{directory}: the run in this folder is still running (process {status.pid}); stop "
                              f"it before resuming it")
        if status is not None:
            raise CheckpointError(f"--resume {directory}: the run in this folder was {status.status} before its first "
                                  f"checkpoint; there is nothing to go on from: run it again with --overwrite")
        raise CheckpointError(f"--resume {directory}: no scenario.resolved.yaml there (not a fedclock run directory)")
    return load_suite(path, overrides)


def _run(suite: Suite, out: Path | None, quiet: bool, resume: bool = False, overwrite: bool = False,
         ray_start: RayStart | None = None) -> int:
    from fedclock.scenarios.progress import RunProgress, make_console, summary_table

    console = make_console()
    first = suite.runs[0].runtime
    console.print(f"[bold]fedclock[/bold] {suite.name}: {len(suite.runs)} run(s) on the {first.backend} backend")
    with RunProgress(console, enabled=not quiet and all(s.output.progress for s in suite.runs)) as progress:
        def start(scenario: Scenario) -> Callable[[float, int, int, float | None], None]:
            progress.start(scenario, _label(suite, scenario))
            return progress.update

        def finish(summary: RunSummary) -> None:
            progress.finish(summary)
            if not progress.progress.live.is_started:
                label = summary.name if suite.seeds is None else f"{summary.name} seed {summary.seed}"
                console.print(f"  {label}: global accuracy {summary.global_accuracy:.4f} after "
                              f"{summary.versions} versions, {summary.virtual_time:.1f} virtual s "
                              f"({summary.stop_reason})")

        # Ray and the first run's actors start in the background while that run loads its data
        summaries = execute(suite, out, resume=resume, on_start=start, on_finish=finish, overwrite=overwrite,
                            ray_start=ray_start,
                            on_note=lambda line: print(f"fedclock: note: {one_line(line)}", file=sys.stderr))
    console.print(summary_table(f"{suite.name}: results", summaries))
    root = _summary_root(suite, out)
    if root is not None:
        _write_summary(root / "summary.parquet", summaries, _suite_jobs(suite))
    _print_where(console, suite, out, summaries[0].out_dir)
    return 0


def _label(suite: Suite, scenario: Scenario) -> str:
    return scenario.name if suite.seeds is None else f"{scenario.name} seed {scenario.seed}"


def _summary_root(suite: Suite, out: Path | None) -> Path | None:
    """Where ``summary.parquet`` goes (None for a file with one run and one seed)."""
    return summary_root(suite, out)


def _print_where(console: Any, suite: Suite, out: Path | None, first: Path) -> None:
    root = _summary_root(suite, out)
    if root is None:
        console.print(f"results: {first}/ (metrics, events, clients .parquet)")
        return
    several = len({s.name for s in suite.runs}) > 1
    where = "/".join((["<run>"] if several else []) + (["seed_<seed>"] if suite.seeds is not None else []))
    console.print(f"results: {root}/{where}/ (metrics, events, clients .parquet) and {root}/summary.parquet")


def _jobs_value(text: str) -> int | str:
    """``--jobs``: a whole number, or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number or auto (got {text!r})") from None


def _run_grid(suite: Suite, args: argparse.Namespace) -> int:
    """``run --jobs N`` / ``--unfinished``: every (run, seed) job of the file in worker
    processes (:mod:`fedclock.scenarios.grid`), a bar per job, the final table of every
    finished job, then one line per failed job (exit status 1 if any failed)."""
    from fedclock.scenarios.api import run_grid
    from fedclock.scenarios.progress import GridProgress, make_console, summary_table

    if args.jobs != "auto" and args.jobs < 1:
        raise UsageError(f"--jobs: must be at least 1 or auto (got {args.jobs})")
    console = make_console()
    enabled = not args.quiet and all(s.output.progress for s in suite.runs)
    with GridProgress(console, enabled, suite) as progress:
        outcomes = run_grid(suite, args.out, args.jobs, overwrite=args.overwrite, unfinished=args.unfinished,
                            listener=progress, on_plan=lambda workers, todo: console.print(
                                f"[bold]fedclock[/bold] {suite.name}: {todo} of {len(suite.runs)} run(s) in "
                                f"{workers} worker process(es) on the {suite.runs[0].runtime.backend} backend"))
    summaries = [o.summary for o in outcomes if o.summary is not None]
    if summaries:
        console.print(summary_table(f"{suite.name}: results", summaries))
        _print_where(console, suite, args.out, summaries[0].out_dir)
    failed = [o for o in outcomes if o.error is not None]
    for o in failed:
        print(f"fedclock: error: {o.job.label} ({o.job.out_dir}): {o.error}", file=sys.stderr)
    if failed:
        print(f"fedclock: {len(failed)} of {len(outcomes)} run(s) failed; after fixing, fedclock run "
              f"{args.file} --unfinished (with the same options) runs only those", file=sys.stderr)
    return 1 if failed else 0


def _only_seeds(suite: Suite, seeds: Sequence[int]) -> Suite:
    """The suite with only the (run, seed) jobs of ``seeds`` (``run --seed``)."""
    if not seeds:
        return suite
    if suite.seeds is None:
        raise UsageError(f"--seed: {suite.source} lists no seeds: or repeats:; use --set seed=S for a single seed")
    missing = [s for s in seeds if s not in suite.seeds]
    if missing:
        raise UsageError(f"--seed: {missing[0]} is not among the file's seeds (allowed: "
                         f"{', '.join(str(s) for s in suite.seeds)})")
    return replace(suite, runs=tuple(r for r in suite.runs if r.seed in seeds))


def _plot(directory: Path, out: Path | None, max_clients: int) -> int:
    from fedclock.scenarios.plots import plot_runs
    from fedclock.scenarios.rundirs import find_runs
    from fedclock.scenarios.runfiles import PLOTS_DIR

    if max_clients < 1:
        raise UsageError(f"--max-clients: must be at least 1 (got {max_clients})")
    runs = find_runs([directory])
    for run in runs:
        if run.status not in ("finished", "unknown"):
            print(f"fedclock: note: {run.name}: {one_line(run.status)} (its figures show the results it wrote)",
                  file=sys.stderr)
    written = plot_runs(runs, out if out is not None else directory / PLOTS_DIR, max_clients=max_clients)
    print(f"{len(written)} figure(s) of {len(runs)} run(s) in {written[0].parent}/")
    return 0


def _compare(dirs: Sequence[Path], targets: Sequence[float], out: Path | None, metric: str = "global",
             per_seed: bool = False) -> int:
    from rich.console import Console

    from fedclock.scenarios.compare import across_seeds, compare_runs, print_comparison, write_comparison
    from fedclock.scenarios.rundirs import find_runs

    for t in targets:
        if not 0 < t <= 1:
            raise UsageError(f"--target: must be an accuracy in (0, 1] (got {t})")
    runs = find_runs(dirs)
    frame = compare_runs(runs, targets, metric)
    if not per_seed and frame["run"].duplicated().any():
        frame = across_seeds(frame)
    console = Console()
    if not console.is_terminal:
        console = Console(width=240)
    print_comparison(frame, console, title=f"{len(runs)} run(s)")
    where = out if out is not None else (dirs[0] if len(dirs) == 1 else Path("."))
    parquet, csv = write_comparison(frame, where)
    console.print(f"written: {parquet} and {csv}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    """``fedclock reproduce``: :func:`fedclock.scenarios.reproduce.reproduce`, one line per job run."""
    from fedclock.scenarios.reproduce import not_holding, reproduce

    path, outcomes = reproduce(args.family, args.seeds, args.jobs, args.out, args.report,
                               on_done=lambda job: print(f"  ran {job.out_dir}", flush=True), sets=args.overrides,
                               allow_dirty=args.allow_dirty)
    for o in outcomes:
        print(f"{o.claim.id}: {o.verdict}")
    unexplained = [o.claim.id for o in not_holding(outcomes) if not o.claim.why_not.strip()]
    if unexplained:
        print(f"rows that do not hold without a why_not: sentence in the claim set: {', '.join(unexplained)}")
    print(f"report: {path}")
    return 0


def _suite_jobs(suite: Suite) -> set[tuple[str, int]]:
    """Every (run, seed) job of the file, also those ``--seed`` left out (none without seeds:)."""
    if suite.seeds is None:
        return set()
    return {(name, seed) for name in {s.name for s in suite.runs} for seed in suite.seeds}


_write_summary = write_summary


def _list(what: str) -> int:
    if what in ("algorithms", "models", "datasets"):
        rows = _shipped_rows(what) + _entry_point_rows(what)
        width = max(len(name) for name, _ in rows)
        for name, text in rows:
            print(f"{name:<{width}}  {text}")
    else:
        root = scenario_dir()
        paths = shipped_scenarios(root)
        names = [str(path.relative_to(root).with_suffix("")) for path in paths]
        width = max(len(n) for n in names)
        for path, name in zip(paths, names):
            raw = read_yaml(path)
            text = str(raw.get("description", "")).strip().splitlines()[0] if isinstance(raw, dict) else ""
            reproduces = raw.get("reproduces") if isinstance(raw, dict) else None
            print(f"{name:<{width}}  {text}" + (f"  [reproduces: {reproduces}]" if reproduces else ""))
    return 0


def _shipped_rows(what: str) -> list[tuple[str, str]]:
    """(name, description) of the shipped algorithms, models or datasets."""
    if what == "algorithms":
        return [(name, f"[{'/'.join(sorted(cls.modes)):<10}]  {cls.summary}  ({cls.paper})")
                for name, cls in ALGORITHMS.items()]
    if what == "models":
        return list(MODEL_SUMMARIES.items())
    return list(DATASET_SUMMARIES.items())


def _entry_point_rows(what: str) -> list[tuple[str, str]]:
    """(name, origin) of what installed packages register (entry points), loaded to check
    them: a broken one is listed with its error instead."""
    kind = what[:-1]
    rows = []
    for name, ep in sorted(entry_points(kind).items()):
        try:
            find(kind, name)
            text = f"{ep.value}  ({entry_point_origin(ep)})"
        except PluginError as exc:
            text = f"unusable: {one_line(str(exc))}  ({entry_point_origin(ep)})"
        rows.append((name, text))
    return rows


if __name__ == "__main__":
    sys.exit(main())
