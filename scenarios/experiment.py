"""One run, end to end: scenario → federation, population, algorithm → clock on the runtime."""
from __future__ import annotations

import errno
import gc
import json
import os
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedclock.actors.calls import ActorUnplaced, ServerLost
from fedclock.actors.federation import ClientIndex
from fedclock.actors.replay import CheckpointingBackend
from fedclock.actors.runtime import Runtime
from fedclock.actors.session import Session
from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.compressed import with_links
from fedclock.algorithms.privacy import PrivateUploads, with_privacy
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.registry import algorithm_names, get_algorithm
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scenarios import startup_profile
from fedclock.scenarios.run_costs import CountedCosts, FollowedServer
from fedclock.scenarios.analysis import CKAAtVersions, run_analysis
from fedclock.scenarios.data.federation import Federation, build_federation
from fedclock.scenarios.free_memory import return_free_memory
from fedclock.scenarios.privacy_accounting import RETIRE_REASON, choose_accounting, feasible_accounting, \
    upload_limits
from fedclock.scenarios.diagnostics import has_diagnostics, write_diagnostics
from fedclock.scenarios.plugins import PluginError, algorithm_class, model_builder
from fedclock.scenarios.linear_eval import averages, linear_evaluation, supports_linear_eval, write_linear_eval
from fedclock.scenarios.checkpoints import (Checkpoint, CheckpointError, checkpoint_dir, discard_after, fingerprint,
                                            usable_checkpoint, write_checkpoint)
from fedclock.scenarios.participation import Participation
from fedclock.scenarios.results import ClientEvents, ResultsWriter, RowsColumn, TablesOnDisk, resolved_dict
from fedclock.scenarios.runfiles import PRIVACY_FILE
from fedclock.scenarios.runstatus import FAILED, FINISHED, INTERRUPTED, claim, finish
from fedclock.scenarios.selection_config import build_selector
from fedclock.scenarios.schema import Scenario
from fedclock.scheduling.modes import AsyncMode
from fedclock.scheduling.clock import APPLIED, CANCELLED, DROPPED, LOST, TIMED_OUT, Backend, Clock, TaskCosts
from fedclock.scheduling.population import PopulationConfig, client_class_rows, population_availability
from fedclock.scheduling.devices import Devices, task_timing
from fedclock.scheduling.heterogeneity import TimeoutTooShort, WorkAndLinks
from fedclock.scheduling.timeline import Timeline, client_tags


@dataclass(frozen=True)
class RunSummary:
    """What the final table shows for one run."""

    name: str
    algorithm: str
    mode: str
    global_accuracy: float
    personal_accuracy_mean: float
    personal_accuracy_p10: float
    virtual_time: float
    wall_time: float
    versions: int
    rounds: int
    bytes_moved: int
    tasks_applied: int
    stragglers_dropped: int
    mean_staleness: float
    stop_reason: str
    out_dir: Path
    tasks_lost: int = 0
    linear_generalization: float = float("nan")
    """Self-supervised runs: average linear-evaluation accuracies (``linear_eval.parquet``)."""
    linear_personalization: float = float("nan")
    privacy_epsilon: float = float("nan")
    """DP algorithms: cumulative epsilon of the most-participating client at ``privacy_delta``
    (the ``dp_epsilon`` column of metrics.parquet at the last evaluation)."""
    privacy_delta: float = float("nan")
    seed: int = 0
    """The scenario seed of this run (one row per (run, seed) in ``summary.parquet``)."""
    clients_infeasible: int = 0
    """Clients whose device memory cannot fit the task (never dispatched)."""


def make_algorithm(scenario: Scenario, federation: Federation) -> Algorithm:
    """Instantiate the scenario's algorithm for the federation's input shape and classes."""
    builder = model_builder(scenario.model.name, scenario.plugin_dir)
    factory = ModelFactory(scenario.model.name, federation.input_shape, federation.num_classes,
                           tuple(scenario.model.hidden), builder=builder,
                           target_shape=tuple(federation.y.shape[1:]))
    cls = algorithm_class(scenario.algorithm.name, scenario.plugin_dir)
    if factory.target_shape and not cls.per_token_targets:
        allowed = ", ".join(n for n in algorithm_names() if get_algorithm(n).per_token_targets)
        why = f": {cls.per_token_refusal}" if cls.per_token_refusal else ""
        raise PluginError(f"algorithm.name: {cls.name} does not train on per-token targets ({federation.dataset_name} "
                          f"predicts every next word{why}); allowed: {allowed}")
    objective = getattr(scenario.algorithm.params, "objective", "supervised")
    if factory.target_shape and objective != "supervised":
        raise PluginError(f"algorithm.objective: {objective} learns from augmented images and reports k-NN accuracy "
                          f"per sample; {federation.dataset_name} predicts every next word (allowed: supervised)")
    if factory.builder is not None:
        try:
            factory.build()
        except ValueError as exc:  # a module the rule cannot split into body and head (one line)
            if not str(exc).startswith("model.name: "):
                raise
            raise PluginError(str(exc)) from None
    algorithm = cls(scenario.algorithm.params, factory)
    algorithm.num_clients = scenario.population.num_clients
    algorithm.server_optimizer = scenario.algorithm.server_optimizer
    codec = scenario.upload.compression
    problem = codec.size_problem(factory.num_params) if codec is not None and codec.type == "top_k" else None
    if problem:
        raise PluginError(f"upload.compression: {problem}")
    return with_privacy(with_links(algorithm, scenario.upload, scenario.download), scenario.privacy,
                        choose_accounting(scenario))


def describe_availability(scenario: Scenario) -> RowsColumn:
    """A short text per client naming its availability model, a block of clients at a time
    (the population's own type, or its group's: the last group naming a client wins)."""
    default: str = scenario.population.availability.type
    named: dict[int, str] = {}
    for group in scenario.population.clients:
        if group.availability is not None:
            a = group.availability
            text = f"periodic_missing(period={a.period})" if a.type == "periodic_missing" else a.type
            named.update((int(cid), text) for cid in group.ids)
    ids = np.fromiter(sorted(named), dtype=np.int64, count=len(named))

    def rows(start: int, stop: int) -> list[str]:
        labels: list[str] = [default] * (stop - start)
        for cid in ids[np.searchsorted(ids, start):np.searchsorted(ids, stop)]:
            labels[int(cid) - start] = named[int(cid)]
        return labels

    return RowsColumn(scenario.population.num_clients, rows)


MAX_SERVER_RESTARTS = 3
"""How many times one run restarts from its last checkpoint after losing the server actor."""


def run_scenario(scenario: Scenario, runtime: Runtime, out_dir: Path,
                 on_progress: Callable[[float, int, int, float | None], None] | None = None,
                 federation: Federation | None = None, resume: bool = False,
                 on_note: Callable[[str], None] | None = None, overwrite: bool = False,
                 costs: CountedCosts | None = None) -> RunSummary:
    """Run one scenario on ``runtime`` and write its results under ``out_dir``.

    ``costs``: the counted costs this run shares with the other runs of its session
    (:mod:`fedclock.scenarios.run_costs`); None: the run counts its own.

    With ``output.checkpoint_every`` the run writes checkpoints (:mod:`fedclock.scenarios.checkpoints`)
    and, if the server actor dies, goes on from the last one on a fresh server actor. With
    ``resume`` it goes on from the newest checkpoint in ``out_dir`` (:mod:`fedclock.actors.replay`);
    the results equal an uninterrupted run's, except for wall times. A checkpoint that is
    damaged or counts rows the tables lack is skipped for an older one, and ``on_note`` is
    told (one line each).

    The run takes ``out_dir`` first (:func:`fedclock.scenarios.runstatus.claim`: a fresh run
    refuses a folder holding anything unless ``overwrite``) and records there how it ended."""
    if scenario.runtime.device == "cuda" and runtime.backend == "inline" and not torch.cuda.is_available():
        from fedclock.scenarios.loader import ScenarioError

        raise ScenarioError(f"{scenario.name}: runtime.device: cuda, but PyTorch finds no GPU on this machine "
                            f"(allowed here: cpu)")
    try:
        status = claim(out_dir, resume=resume, overwrite=overwrite)
    except OSError as exc:
        raise _output_error(exc, out_dir, resume) from None
    try:
        summary = _run_scenario(scenario, runtime, out_dir, on_progress, federation, resume, on_note, status.run_id,
                                costs if costs is not None else CountedCosts())
    except OSError as exc:
        error = _output_error(exc, out_dir, any(p.name.isdigit() for p in checkpoint_dir(out_dir).glob("*")))
        finish(out_dir, status, FAILED, str(error) if error is not exc else f"{type(exc).__name__}: {exc}")
        raise error from None
    except KeyboardInterrupt:
        finish(out_dir, status, INTERRUPTED, "interrupted (Ctrl-C)")
        raise
    except Interrupted as exc:
        finish(out_dir, status, INTERRUPTED, str(exc))
        raise
    except ActorUnplaced as exc:
        unplaced = _way_back(exc, out_dir)
        finish(out_dir, status, FAILED, str(unplaced))
        raise unplaced from None
    except BaseException as exc:
        finish(out_dir, status, FAILED, f"{type(exc).__name__}: {exc}")
        raise
    if scenario.population.num_clients >= COLLECT_AFTER_CLIENTS:
        gc.collect()
    finish(out_dir, status, FINISHED, summary.stop_reason)
    return summary


COLLECT_AFTER_CLIENTS = 100_000
"""A run of at least this many clients ends with a full garbage collection: its clock, session
and writer refer to each other, so their per-client arrays (about 150 bytes a client) would
otherwise wait for Python's next full collection, and the next run of the same process (a
suite's, a grid worker's) would hold two runs' worth at its peak (``benchmarks/RESULTS.md``,
"Idle clients, third pass"). A full collection takes 0.2-0.7 s with PyTorch loaded: nothing
next to a run of that size, but not paid by small runs."""


class OutputError(Exception):
    """The results folder cannot be written (disk full, read-only, no permission); one line
    naming the file and the way back."""


_OUTPUT_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "operation not permitted"}


def _output_error(exc: OSError, out_dir: Path, resumable: bool) -> OSError | OutputError:
    """An :class:`OutputError` for an ``OSError`` that says the folder cannot be written
    (``exc`` itself for any other). Arrow's errors carry no errno: their text is matched."""
    code = exc.errno if exc.errno in _OUTPUT_ERRNOS else next(
        (c for c in _OUTPUT_ERRNOS if os.strerror(c) in str(exc)), None)
    if code is None:
        return exc
    cause: BaseException | None = exc  # SimPy raises a copy of a process's exception, the original as its cause
    while cause is not None and not getattr(cause, "filename", None):
        cause = cause.__cause__
    where = getattr(cause, "filename", None) or f"in {out_dir} ({' '.join(str(exc).split())[:200]})"
    back = (f"free space (or make it writable) and go on with fedclock run --resume {out_dir}" if resumable else
            "free space (or make it writable) and run again with --overwrite (no checkpoint to resume from yet: "
            "output.checkpoint_every: N writes them)")
    return OutputError(f"cannot write {where}: {_OUTPUT_ERRNOS[code]}; the files already written are intact; {back}")


def _way_back(exc: ActorUnplaced, out_dir: Path) -> ActorUnplaced:
    """``exc`` (a lost actor that could not be replaced) with what the user does next."""
    if any(p.name.isdigit() for p in checkpoint_dir(out_dir).glob("*")):
        back = (f"the run stopped with its checkpoints: go on with fedclock run --resume {out_dir} (on the cluster "
                f"as it is now it takes the executors that fit; --backend inline runs it on this machine)")
    else:
        back = ("no checkpoint to go on from (output.checkpoint_every: N writes them): run it again with --overwrite "
                "on a cluster with room for its executors")
    return ActorUnplaced(f"{exc}; {back}")


class Interrupted(BaseException):
    """The process was told to stop (SIGTERM); the message names the signal."""


def _run_scenario(scenario: Scenario, runtime: Runtime, out_dir: Path,
                  on_progress: Callable[[float, int, int, float | None], None] | None,
                  federation: Federation | None, resume: bool, on_note: Callable[[str], None] | None,
                  run_id: str, costs: CountedCosts) -> RunSummary:
    """:func:`run_scenario` in a folder already taken by the run ``run_id``."""
    started = time.perf_counter()
    seed = scenario.seed
    if federation is None:
        with startup_profile.phase("data"):
            federation = build_federation(scenario.dataset, scenario.population.num_clients, seed,
                                          scenario.plugin_dir)
    with startup_profile.phase("model"):
        algorithm = make_algorithm(scenario, federation)
    mark = fingerprint(resolved_dict(scenario))
    checkpoint = None
    if resume:
        checkpoint = _usable_checkpoint(out_dir, mark, on_note)
        if checkpoint is None:
            raise CheckpointError(f"--resume {out_dir}: no checkpoint in {checkpoint_dir(out_dir)} (a run writes them "
                                  f"with output.checkpoint_every: N); a run stopped before its first checkpoint has "
                                  f"nothing to go on from: run it again with --overwrite")
    for attempt in range(MAX_SERVER_RESTARTS + 1):
        try:  # the clock, then what still reads the server's state after it
            session, clock, writer, devices, reason = _run_clock(scenario, runtime, out_dir, on_progress, federation,
                                                                 algorithm, checkpoint, mark, costs, run_id)
            run_analysis(scenario, algorithm, federation, session, out_dir, writer.last_round)
            finals = session.final_states() if supports_linear_eval(algorithm) or has_diagnostics(algorithm) or \
                isinstance(algorithm, PrivateUploads) else None
            break
        except ServerLost:
            if scenario.output.checkpoint_every is None or attempt == MAX_SERVER_RESTARTS:
                raise
            checkpoint = _usable_checkpoint(out_dir, mark, on_note)  # None: start over
    table = _client_table(scenario, federation, devices, writer, clock.cohorts.feasible)
    if isinstance(clock.script, Timeline):
        table["retired_at"] = clock.script.retired_at
    if finals is not None and isinstance(algorithm, PrivateUploads):  # per-client epsilon (privacy:)
        table.update(algorithm.client_privacy(finals[0]))
        (out_dir / PRIVACY_FILE).write_text(json.dumps(algorithm.accounting.record(algorithm.privacy.delta)))
    writer.write_clients(table)
    linear = (float("nan"), float("nan"))
    if finals is not None and has_diagnostics(algorithm):
        write_diagnostics(algorithm, finals[0], out_dir)
    if finals is not None and supports_linear_eval(algorithm):
        server_state, client_states = finals
        device = "cuda" if scenario.runtime.device == "cuda" and torch.cuda.is_available() else "cpu"
        rows = linear_evaluation(algorithm, server_state, client_states, federation, scenario.evaluation.linear,
                                 seed, device)
        write_linear_eval(rows, out_dir)
        linear = averages(rows)
    writer.close()
    totals = writer.totals
    last = writer.last_metrics
    return RunSummary(
        name=scenario.name, algorithm=scenario.algorithm.name, mode=scenario.mode.type,
        global_accuracy=last.get("global_accuracy", float("nan")),
        personal_accuracy_mean=last.get("personal_accuracy_mean", float("nan")),
        personal_accuracy_p10=last.get("personal_accuracy_p10", float("nan")),
        virtual_time=clock.env.now, wall_time=time.perf_counter() - started, versions=clock.version,
        rounds=clock.round if not isinstance(scenario.mode, AsyncMode) else clock.version,
        bytes_moved=totals.bytes_total, tasks_applied=totals.applied,
        stragglers_dropped=totals.dropped + totals.timed_out,
        mean_staleness=totals.staleness_sum / totals.applied if totals.applied else 0.0,
        stop_reason=reason, out_dir=out_dir, tasks_lost=totals.lost, linear_generalization=linear[0],
        linear_personalization=linear[1], seed=seed, privacy_epsilon=last.get("dp_epsilon", float("nan")),
        clients_infeasible=int(np.count_nonzero(~clock.cohorts.feasible)),
        privacy_delta=last.get("dp_delta", float("nan")))


def _usable_checkpoint(out_dir: Path, mark: str, on_note: Callable[[str], None] | None) -> Checkpoint | None:
    """The newest checkpoint of ``out_dir`` that is intact and consistent with the tables on
    disk; each one skipped is reported to ``on_note``, with the one taken instead."""
    disk = TablesOnDisk(out_dir)
    checkpoint, skipped = usable_checkpoint(out_dir, mark, disk.rows(), disk.problem)
    if skipped and checkpoint is None:
        raise CheckpointError(f"--resume {out_dir}: no usable checkpoint ({skipped[-1]})")
    for line in skipped:
        if on_note is not None:
            on_note(line)
    if skipped and checkpoint is not None and on_note is not None:
        on_note(f"resuming {out_dir} from checkpoint {checkpoint.version}, the newest usable one")
    return checkpoint


def _save_checkpoint(writer: ResultsWriter, out_dir: Path, ckpt: Checkpoint, mark: str, run_id: str) -> None:
    """Make the rows ``ckpt`` counts durable, then write it (see :mod:`fedclock.scenarios.checkpoints`)."""
    writer.make_durable()
    write_checkpoint(out_dir, replace(ckpt, wall_time=writer.wall_time, row_hashes=writer.row_digests(ckpt.rows)),
                     mark, run_id)


def _run_clock(scenario: Scenario, runtime: Runtime, out_dir: Path,
               on_progress: Callable[[float, int, int, float | None], None] | None, federation: Federation,
               algorithm: Algorithm, checkpoint: Checkpoint | None,
               mark: str, counted: CountedCosts,
               run_id: str = "") -> tuple[Session, Clock, ResultsWriter, Devices, str]:
    """Build the run's session, recorder and clock (replaying up to ``checkpoint`` if given)
    and run the clock to its end."""
    seed = scenario.seed
    devices = Devices.draw(scenario.population, seed)
    availability = population_availability(scenario.population, seed)
    # counted before the actors are set up: on Ray this runs while their processes start (the
    # counts are lazy: task_costs and feasible_clients make the first ones, which import
    # torch._dynamo, 1-2 CPU s; benchmarks/RESULTS.md, "Ray start-up, third pass")
    with startup_profile.phase("FLOP count"):
        task_cost = counted.task(algorithm, federation.x.dtype)
        server_cost = counted.server(algorithm, federation.x.dtype)
        costs = task_costs(algorithm, task_cost, scenario.population.compute_unit)
        feasible = feasible_clients(task_cost, federation.client_sizes(), devices.memory_gb)
    if isinstance(algorithm, PrivateUploads):  # before the algorithm travels to the actors
        algorithm.accounting = feasible_accounting(algorithm.accounting, feasible)
    with startup_profile.phase("actors"):
        session = runtime.session(scenario.runtime, federation, algorithm, seed,
                                  scenario.evaluation.batch_size, scenario.evaluation.personalized,
                                  scenario.evaluation.adapted, fit=checkpoint is not None)
    startup_profile.watch_first_task(session)
    writer = ResultsWriter(out_dir, scenario, scenario.output.flush_every_s, on_progress, resume=checkpoint is not None)
    session.clients_evaluated = writer.clients_evaluated
    session.clients_adapted = writer.clients_adapted
    writer.participation = Participation(federation.client_sizes())
    selector = build_selector(scenario.selection, seed, scenario.plugin_dir)
    cka_at = scenario.analysis.at_rounds if scenario.analysis is not None else None
    if cka_at is not None:
        session.after_evaluation = CKAAtVersions(scenario, algorithm, federation, session, out_dir,
                                               lambda: clock.round, None if checkpoint is None else checkpoint.version)
    limits = upload_limits(scenario)
    timeline = Timeline(scenario.timeline, scenario.population, seed, devices, availability, writer.timeline_event,
                        retires=limits is not None)
    work_and_links = _work_and_links(scenario, federation, timeline.devices, costs)
    backend: Backend = session
    replay = None
    if scenario.output.checkpoint_every is not None or checkpoint is not None:
        def switched(ckpt: Checkpoint) -> None:
            try:
                writer.resume_rows(ckpt.rows)
            except ValueError as exc:
                raise CheckpointError(f"cannot resume in {out_dir}: {exc}") from None
            writer.started = time.perf_counter() - ckpt.wall_time  # wall_time goes on from the checkpoint's
            discard_after(out_dir, ckpt.version)

        replay = CheckpointingBackend(session, every=scenario.output.checkpoint_every,
                                      save=lambda ckpt: _save_checkpoint(writer, out_dir, ckpt, mark, run_id),
                                      rows=writer.row_counts,
                                      resume=checkpoint, on_switch=switched,
                                      log_losses=selector is not None and selector.reads_loss)
        backend = replay
    followed = FollowedServer(server_cost)
    server_seconds = scenario.server.step_seconds(followed.flops)
    clock = Clock(devices=timeline.devices, availability=timeline.availability, client_sizes=federation.client_sizes(),
                  costs=costs, mode=scenario.mode, stop=scenario.stop, eval_every=scenario.evaluation.every,
                  backend=backend, recorder=writer, seed=seed, work_and_links=work_and_links, script=timeline,
                  eval_at=set(scenario.evaluation.at_rounds) | set(cka_at or ()),
                  stateless_clients=algorithm.stateless_clients, selector=selector,
                  disclose=scenario.selection.disclose, feasible=feasible,
                  server_seconds=server_seconds, upload_kind=None if server_seconds is None else followed.upload_kind,
                  upload_limit=limits, limit_reason=RETIRE_REASON)
    if scenario.population.num_clients >= COLLECT_AFTER_CLIENTS:  # the set-up's freed temporaries, before the rounds
        return_free_memory()
    reason = clock.run()
    if replay is not None:
        replay.finished()
    return session, clock, writer, devices, reason


def task_costs(algorithm: Algorithm, cost: TaskCost, unit: str) -> TaskCosts:
    """What the clock charges per task: bytes each way and work, in GFLOP (``unit`` ``gflops``)
    or in plain training samples of the model (``samples_per_s``: the counted FLOPs over one
    sample's forward and backward, so a FedAvg task of s steps of B samples is s x B)."""
    with startup_profile.phase("FLOP count"):
        scale = Fraction(10**9) if unit == "gflops" else Fraction(cost.sample_flops())

    def work(num_samples: int) -> float:
        with startup_profile.phase("FLOP count"):  # the counts are made on first use
            return float(cost.flops(num_samples) / scale)

    def work_for_steps(num_samples: int, steps: int) -> float:
        with startup_profile.phase("FLOP count"):
            return float(cost.flops(num_samples, steps) / scale)

    return TaskCosts(algorithm.download_bytes(), algorithm.upload_bytes(), work, local_steps=algorithm.local_steps,
                     work_for_steps=work_for_steps)


def feasible_clients(cost: TaskCost, sizes: np.ndarray, memory_gb: np.ndarray) -> np.ndarray | None:
    """Per client, whether its device's memory fits its task's peak training memory (None
    when no device declares memory: every client fits, nothing is traced)."""
    if not np.isfinite(memory_gb).any():
        return None
    return np.array([not np.isfinite(limit) or cost.memory_bytes(int(n)) <= limit * 1e9
                     for n, limit in zip(sizes.tolist(), memory_gb.tolist())], dtype=bool)


def _work_and_links(scenario: Scenario, federation: Federation, devices: Devices, costs: TaskCosts) -> WorkAndLinks:
    """Completeness and connectivity of the population; a timeout no task could meet is a
    user's mistake (:class:`~fedclock.scenarios.loader.ScenarioError`)."""
    from fedclock.scenarios.loader import ScenarioError

    wl = WorkAndLinks(scenario.population, scenario.mode, scenario.seed)
    sizes = federation.client_sizes()
    local_steps, work_for_steps = costs.local_steps, costs.work_for_steps
    assert local_steps is not None and work_for_steps is not None

    def duration(client: int, steps: int) -> float:
        work = work_for_steps(int(sizes[client]), steps)
        return task_timing(devices[client], costs.bytes_down, costs.bytes_up, work).total_s

    try:
        wl.check_timeout(federation.num_clients, lambda c: local_steps(int(sizes[c])), duration)
    except TimeoutTooShort as exc:
        raise ScenarioError(f"{scenario.name}: {exc}") from None
    deadline = scenario.mode.round_deadline_s
    if scenario.mode.drops_late and deadline is not None:
        fastest = min(duration(c, wl.fewest_steps(c, local_steps(int(sizes[c]))))
                      for c in range(federation.num_clients))
        if fastest > deadline:
            raise ScenarioError(f"{scenario.name}: mode.deadline_s: {deadline:g} s is shorter than the fastest "
                                f"possible task ({fastest:.4g} s), so every round would drop every result; raise it "
                                f"(or set mode.late_results: include)")
    return wl


def _tags_column(population: PopulationConfig) -> list[list[str]] | RowsColumn:
    """Each client's sorted tags; without any tagged group, one shared empty list for every
    client a block at a time (not a set and a list per client: ~270 bytes each at a million
    clients; nor a list of every client's: 8 bytes each)."""
    if not any(group.tags for group in population.clients):
        return RowsColumn(population.num_clients, lambda start, stop: [[]] * (stop - start))
    return [sorted(t) for t in client_tags(population)]


def _client_table(scenario: Scenario, federation: Federation, devices: Devices,
                  writer: ResultsWriter, feasible: np.ndarray) -> dict[str, np.ndarray | list | RowsColumn]:
    n = federation.num_clients
    ev = writer.client_columns()
    client, status = ev["client"], ev["status"]
    train, test = ClientIndex.of(federation.client_train).offsets, ClientIndex.of(federation.client_test).offsets

    events = ClientEvents(client, n)

    def as_int(column: RowsColumn) -> RowsColumn:
        return RowsColumn(n, lambda start, stop: np.asarray(column[start:stop]).astype(np.int64))

    none = RowsColumn(n, lambda start, stop: [None] * (stop - start))
    # the per-client counts, ids and labels are computed a block of clients at a time as the table is written
    # (a list of every client's label costs 8 bytes a client: ~50 MiB a column at 10^7 clients)
    return {
        "client": RowsColumn(n, lambda start, stop: np.arange(start, stop)),
        "num_train": RowsColumn(n, lambda start, stop: np.diff(train[start:stop + 1])),
        "num_test": RowsColumn(n, lambda start, stop: np.diff(test[start:stop + 1])),
        "compute": devices.compute, "down_mbps": devices.down_mbps, "up_mbps": devices.up_mbps,
        "latency_s": devices.latency_s, "availability": describe_availability(scenario),
        "device_class": RowsColumn(n, client_class_rows(scenario.population)),
        "tags": _tags_column(scenario.population),
        "tasks": events.counts(), "tasks_applied": events.counts(status == APPLIED),
        "tasks_dropped": events.counts(status == DROPPED),
        "busy_s": events.counts(weights=ev["busy"]),
        "bytes_down": as_int(events.counts(weights=ev["bytes_down"])),
        "bytes_up": as_int(events.counts(weights=ev["bytes_up"])),
        "tasks_lost": events.counts(status == LOST), "tasks_timed_out": events.counts(status == TIMED_OUT),
        "tasks_cancelled": events.counts(status == CANCELLED),
        "memory_gb": devices.memory_gb, "feasible": feasible,
        "dp_releases": none, "dp_epsilon": none,
        "retired_at": RowsColumn(n, lambda start, stop: np.full(stop - start, np.nan)),  # or the timeline's
    }
