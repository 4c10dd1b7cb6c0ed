"""A file's whole grid side by side: every (run, seed) job of a suite in a pool of worker processes.

``fedclock run FILE --jobs N`` (and ``run(..., jobs=N)`` of :mod:`fedclock.scenarios.api`)
hands the jobs of a file (each run of ``runs:`` times each seed of ``seeds:``) to ``N``
worker processes; each worker takes the next job as it finishes one. A job is a whole run,
exactly as :func:`fedclock.scenarios.api.execute` runs it one after another: its own folder,
checkpoints and random draws (every draw derives from the run's seed, see
:mod:`fedclock.scenarios.loader`), so its tables are the ones it writes alone.

Processes, not threads: the clock and the result writers run in Python in the process that
runs the run. A worker is started once and keeps one :class:`~fedclock.actors.runtime.Runtime`
and one :class:`~fedclock.scenarios.run_costs.CountedCosts` for all its jobs, so on the Ray
backend its actors serve its next run too, and the FLOPs of a run's tasks are counted once per
worker, not once per job (as one after another, :func:`fedclock.scenarios.api.execute`).

Set-up paid once, not once per worker: on Linux the workers are forked from one server
process that imported PyTorch, pandas and fedclock once and ran no PyTorch operation;
elsewhere they are spawned (:mod:`fedclock.scenarios.grid_workers`, with the measurements).

Each worker keeps its BLAS and OpenMP thread pools to its share of the CPUs
(:func:`thread_share`, through threadpoolctl, the maintained library for it) unless the
environment sets ``OMP_NUM_THREADS``; a run sets PyTorch's own threads
(``runtime.threads_per_actor``), so N workers never start N times the machine's threads.

On the Ray backend the pool shares one Ray: the calling process starts a local Ray once
(:func:`fedclock.actors.ray_start.start_ray`; with ``--address``, the cluster's) while the
workers import, and every worker joins it. A run that leaves ``runtime.num_actors`` unset
takes the CPUs one worker's share allows (cluster CPUs / workers), so that the runs side by
side never wait on each other's actors; the actor count never changes a number
(``runtime`` section of the scenario docs), and the run's resolved file keeps its own setting.

The default number of workers (:func:`default_jobs`) is as many runs as the CPUs hold without
slowing each: half the machine's physical cores (:func:`unslowed_cores`; a cluster's CPUs) over
the CPUs one run uses (``runtime.threads_per_actor`` inline; an executor's ``runtime.num_cpus``
times the executors it asks for on Ray, at least one), never more than there are jobs. Physical
cores, not logical CPUs: two runs on the two hardware threads of one core share its arithmetic
units, so each runs slower than alone. Half of them, from two measurements
(``benchmarks/RESULTS.md``, "Grid side by side, third pass"): on 16 cores of one thread, 8
workers ran the 16-run grid in 19.2 s with each run at the CPU it costs alone (1.00x; a worker's
first job 0.46 s more), 16 workers in 18.4 s with each run at 1.35x (contention for what busy
cores share); the 32-run grid took 17.9 s (0.95x per run) and 16.7 s (1.25x); on 2 cores, 2 workers
lost to one after another outright (a worker's start-up with no idle core to spend it on).

Each outcome carries its run's own wall and CPU seconds (``cpu_s``: the process time of the
worker while it ran the job, so the run's own threads; on Ray the actors' CPU is not in it):
a run slower side by side with the same CPU seconds as alone waited for a CPU
(oversubscription); one with more CPU seconds did more work or ran slower on a shared core,
cache or memory bus (``benchmarks/grid.py`` reports both).

A job that fails does not stop the others: each outcome carries its one-line error, and the
caller names the failed jobs at the end. The workers end with the grid: an exception in the
calling process (Ctrl-C, SIGTERM) sends every worker SIGTERM at once, then waits for them
together (:data:`STOP_GRACE_S`); a worker's SIGTERM ends its run as interrupted
(:func:`_stop_worker`), and a worker whose grid's process died (SIGKILL, the OOM killer) sends
it to itself (:class:`~fedclock.scenarios.grid_workers.ParentWatch`). With ``unfinished`` a job whose folder says
``finished`` (:mod:`fedclock.scenarios.runstatus`) is not run again; one that holds a
checkpoint goes on from it; any other starts over in its folder.
"""
from __future__ import annotations

import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from fedclock.scenarios.checkpoints import checkpoint_dir
from fedclock.scenarios.grid_workers import ParentWatch, worker_context
from fedclock.scenarios.runstatus import FINISHED, read_status

from fedclock.actors.runtime import Runtime
from fedclock.actors.session import Session
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.algorithms.adapted import AdaptedEvaluation
from fedclock.algorithms.base import Algorithm
from fedclock.scenarios.data.federation import Federation

from fedclock.scenarios.experiment import Interrupted, RunSummary, run_scenario
from fedclock.scenarios.run_costs import CountedCosts

if TYPE_CHECKING:
    from fedclock.scenarios.loader import Suite

PROGRESS_EVERY_S = 0.25
"""How often a worker reports a run's progress to the calling process (at most)."""
STOP_GRACE_S = 3.0
"""How long a worker told to stop (SIGTERM, its parent's death) may take to record its run as
interrupted before it ends itself; and how long the grid's process waits for its workers
after it stopped them."""

@dataclass(frozen=True)
class Job:
    """One (run, seed) of a suite: its index in ``suite.runs`` and where it writes."""

    index: int
    label: str
    out_dir: Path
    resume: bool = False
    """Go on from the folder's newest checkpoint (``unfinished``)."""
    overwrite: bool = False


@dataclass
class Outcome:
    """How a job ended: its summary, or the one-line error that stopped it."""

    job: Job
    summary: RunSummary | None = None
    error: str | None = None
    skipped: bool = False
    """Finished in an earlier invocation (``unfinished``): not run again."""
    wall_s: float = float("nan")
    """Wall seconds of the job in its worker (``run_scenario``, from the call to its return)."""
    cpu_s: float = float("nan")
    """CPU seconds (user + system) of the worker process while it ran the job: the run's own
    threads (on Ray the driver's part only)."""
    worker: int | None = None
    """The process id of the worker that ran the job (a worker takes jobs in ``plan``'s order,
    so its first job is its lowest index: the one that pays its first-run set-up)."""


def machine_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def physical_cores(allowed: Iterable[int] | None = None, root: Path = Path("/sys/devices/system/cpu")) -> int:
    """The physical cores among the CPUs this process may run on (``allowed``, default its
    affinity): the hardware threads of one core (Linux's sysfs topology, ``core_cpus_list``)
    count once. Two runs on the two threads of one core share its arithmetic units and
    caches, so each runs slower than alone. Where the topology cannot be read, every CPU counts."""
    try:
        cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    except AttributeError:  # not Linux
        return machine_cpus()
    cores = set()
    for cpu in cpus:
        topology = root / f"cpu{cpu}" / "topology"
        try:
            cores.add((topology / "core_cpus_list").read_text(encoding="ascii").strip())
        except OSError:
            try:
                cores.add((topology / "thread_siblings_list").read_text(encoding="ascii").strip())
            except OSError:
                return len(cpus)
    return max(1, len(cores))


def unslowed_cores(physical: int) -> int:
    """The cores of a machine with ``physical`` physical cores that a local grid fills by
    default: half of them, at least one (the measurements in the module docstring)."""
    return max(1, physical // 2)


def cluster_cpus(address: str | None) -> float:
    """The CPUs of the Ray cluster at ``address`` (this machine's for a local Ray, which
    takes them all)."""
    if address is None:
        return float(machine_cpus())
    from fedclock.actors.ray_start import start_ray

    import ray

    started = start_ray(address)
    try:
        return float(ray.cluster_resources().get("CPU", 1.0))
    finally:
        if started:
            ray.shutdown()


def run_cpus(cfg: RuntimeConfig, num_clients: int) -> float:
    """The CPUs one run asks for: its threads inline; on Ray its executors' CPUs (the
    executors it names, one per client when dedicated, else at least one)."""
    if cfg.backend == "inline":
        return float(cfg.threads_per_actor)
    actors = num_clients if cfg.placement == "dedicated" else (cfg.num_actors or 1)
    return cfg.num_cpus * min(actors, num_clients)


def thread_share(cpus: float, workers: int) -> int:
    """The threads each of ``workers`` side by side may use of ``cpus``: its whole share, at least one."""
    return max(1, int(cpus // max(1, workers)))


def default_jobs(suite: Suite, cpus: float, count: int) -> int:
    """How many of ``count`` jobs of ``suite`` run at once by default: the CPUs over what
    the hungriest run asks for (:func:`run_cpus`), at least one, at most ``count``."""
    need = max(run_cpus(s.runtime, s.population.num_clients) for s in suite.runs)
    return max(1, min(count, int(cpus // need)))


def plan_jobs(suite: Suite, out_dirs: Sequence[Path], overwrite: bool, unfinished: bool) -> list[Outcome]:
    """A pending outcome per job of ``suite``; with ``unfinished``, jobs whose folder says
    finished are marked skipped and the others resume from a checkpoint where there is one."""
    plan = []
    for i, (scenario, out_dir) in enumerate(zip(suite.runs, out_dirs)):
        label = scenario.name if suite.seeds is None else f"{scenario.name} seed {scenario.seed}"
        if unfinished:
            status = read_status(out_dir)
            if status is not None and status.status == FINISHED:
                plan.append(Outcome(Job(i, label, out_dir), skipped=True))
                continue
            has_checkpoint = any(p.name.isdigit() for p in checkpoint_dir(out_dir).glob("*"))
            plan.append(Outcome(Job(i, label, out_dir, resume=has_checkpoint, overwrite=not has_checkpoint)))
        else:
            plan.append(Outcome(Job(i, label, out_dir, overwrite=overwrite)))
    return plan


class GridListener:
    """What the calling process hears from the workers (every method may be left as is)."""

    def started(self, job: Job) -> None:
        """``job`` started in a worker."""

    def progress(self, job: Job, now: float, version: int, in_flight: int, accuracy: float | None) -> None:
        """``job``'s run reached virtual time ``now`` and server ``version``."""

    def ended(self, outcome: Outcome) -> None:
        """``outcome.job`` finished (``summary``) or failed (``error``)."""

    def failure_detail(self, job: Job, text: str) -> None:
        """The traceback of an error that is not a user's mistake (printed as it happens)."""


def run_jobs(suite: Suite, plan: Sequence[Outcome], jobs: int, listener: GridListener | None = None,
             py_modules: Sequence[str] = ()) -> list[Outcome]:
    """Run the pending jobs of ``plan`` in ``jobs`` worker processes (see the module
    docstring; ``py_modules``: the user's modules that Ray ships, as
    :class:`~fedclock.actors.runtime.Runtime` takes them); returns ``plan`` with every
    outcome filled in, in ``plan``'s order."""
    listener = listener or GridListener()
    pending = [o for o in plan if not o.skipped]
    if not pending:
        return list(plan)
    workers = max(1, min(jobs, len(pending)))
    if workers == 1:
        _run_here(suite, pending, listener, py_modules)
        return list(plan)
    context = worker_context()
    tasks: Any = context.Queue()
    events: Any = context.Queue()
    first = suite.runs[0].runtime
    procs: list[Any] = []
    ray_started = False
    try:
        address = first.address
        cpus: float = machine_cpus()
        if first.backend == "ray":  # before the workers: Ray's node start times out on CPUs busy importing PyTorch
            from fedclock.actors.ray_start import start_ray

            import ray

            ray_started = start_ray(first.address)
            address = ray.get_runtime_context().gcs_address
            cpus = float(ray.cluster_resources().get("CPU", cpus))
        share = max(1.0, cpus // workers)
        threads = thread_share(cpus, workers)
        env = dict(os.environ)  # as it is now, after Ray's start (worker_loop)
        procs = [context.Process(target=worker_loop, args=(suite, tasks, events, list(py_modules), threads, env,
                                                           os.getpid()),
                                 name=f"fedclock-job-{w}", daemon=True) for w in range(workers)]
        for p in procs:
            p.start()
        for o in pending:
            tasks.put((o.job, address, share))
        for _ in procs:
            tasks.put(None)
        _collect(pending, procs, events, listener)
    except BaseException:  # Ctrl-C, SIGTERM, an error: every worker is told at once, then waited for
        for p in procs:
            if p.is_alive():
                p.terminate()
        _join(procs, STOP_GRACE_S + 2.0)
        raise
    finally:
        _join(procs, 10.0)
        if ray_started:
            import ray

            ray.shutdown()
    return list(plan)


def _join(procs: Sequence[Any], within_s: float) -> None:
    """Wait for ``procs`` together up to ``within_s`` seconds; kill those still there."""
    deadline = time.monotonic() + within_s
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def _run_here(suite: Suite, pending: Sequence[Outcome], listener: GridListener, py_modules: Sequence[str]) -> None:
    """One worker: the jobs one after another in this process, on one runtime (no process to start)."""
    first = suite.runs[pending[0].job.index]
    runtime = Runtime(first.runtime.backend, first.runtime.address,
                      prestart=(first.runtime, first.population.num_clients), py_modules=py_modules)
    costs = CountedCosts()
    try:
        for outcome in pending:
            listener.started(outcome.job)
            outcome.worker = os.getpid()
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                outcome.summary = run_scenario(suite.runs[outcome.job.index], runtime, outcome.job.out_dir,
                                               resume=outcome.job.resume, overwrite=outcome.job.overwrite,
                                               on_progress=partial(listener.progress, outcome.job), costs=costs)
                outcome.wall_s, outcome.cpu_s = time.perf_counter() - wall, time.process_time() - cpu
            except Exception as exc:  # reported; the next job runs (Ctrl-C stops them all)
                outcome.error, detail = describe_failure(exc)
                if detail:
                    listener.failure_detail(outcome.job, detail)
            listener.ended(outcome)
    finally:
        runtime.close()


def _collect(pending: Sequence[Outcome], procs: Sequence[Any], events: Any, listener: GridListener) -> None:
    """Hear the workers until every pending job has an outcome (a worker that dies fails its job)."""
    by_index = {o.job.index: o for o in pending}
    held: dict[int, int] = {}  # worker pid -> the job index it runs
    left = set(by_index)
    while left:
        try:
            event = events.get(timeout=1.0)
        except queue.Empty:
            for p in procs:
                if not p.is_alive() and p.pid in held:
                    index = held.pop(p.pid)
                    outcome = by_index[index]
                    outcome.error = f"the worker process ended without a result (exit status {p.exitcode})"
                    left.discard(index)
                    listener.ended(outcome)
            if left and not any(p.is_alive() for p in procs):
                for index in sorted(left):
                    by_index[index].error = "not run: every worker process ended"
                    listener.ended(by_index[index])
                return
            continue
        kind, pid, index, *rest = event
        outcome = by_index[index]
        if kind == "start":
            held[pid] = index
            outcome.worker = pid
            listener.started(outcome.job)
        elif kind == "progress":
            listener.progress(outcome.job, *rest)
        else:
            held.pop(pid, None)
            left.discard(index)
            if kind == "done":
                outcome.summary, outcome.wall_s, outcome.cpu_s = rest
            else:
                outcome.error, detail = rest
                if detail:
                    listener.failure_detail(outcome.job, detail)
            listener.ended(outcome)


def worker_loop(suite: Suite, tasks: Any, events: Any, py_modules: Sequence[str], threads: int = 1,
                env: dict[str, str] | None = None, grid_pid: int | None = None) -> None:
    """A worker process: run jobs from ``tasks`` until ``None``, reporting to ``events``
    (``start``, ``progress``, then ``done`` with the summary, wall and CPU seconds, or
    ``failed`` with the error). ``threads``: its share of the CPUs (:func:`thread_share`).
    ``env``: the calling process's environment when it started the workers, which a worker
    forked from a forkserver (started earlier) takes on, as a spawned one would have it: a
    local Ray sets its authentication mode there as it starts, and a worker joins with it.
    ``grid_pid``: the grid's process; the worker stops its run and ends when that process ends
    (:class:`~fedclock.scenarios.grid_workers.ParentWatch`, :func:`_stop_worker`)."""
    if env is not None:
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update(env)
    import torch

    torch.set_num_threads(1)  # each run sets its own (runtime.threads_per_actor)
    if "OMP_NUM_THREADS" not in os.environ:  # the user's setting wins
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)  # the BLAS and OpenMP pools loaded (with PyTorch and NumPy): the worker's share
    if suite.runs[0].runtime.backend == "ray" and suite.runs[0].runtime.address is None:
        # the calling process's local Ray listens on loopback only: join it there (actors/ray_start.py)
        from fedclock.actors.ray_start import LOCAL_ONLY_VARIABLE

        os.environ[LOCAL_ONLY_VARIABLE] = "0"
    pid = os.getpid()
    signal.signal(signal.SIGTERM, _stop_worker)
    watch = ParentWatch(grid_pid)
    runtime: SharedRuntime | None = None
    costs = CountedCosts()  # counted once per worker, shared by its jobs (fedclock.scenarios.run_costs)
    try:
        while True:
            if watch.gone():
                events.cancel_join_thread()  # nobody reads them: exit without waiting on the pipe
                return
            try:
                item = tasks.get(timeout=1.0)
            except queue.Empty:
                continue
            if item is None:
                return
            job, address, share = item
            if runtime is None:
                first = suite.runs[0].runtime
                runtime = SharedRuntime(first.backend, address, share, py_modules)
            events.put(("start", pid, job.index))
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                summary = _run_job(suite, job, runtime, events, pid, costs, watch)
            except (KeyboardInterrupt, Interrupted) as exc:
                events.put(("failed", pid, job.index, str(exc) or "interrupted", ""))
                if watch.gone():
                    events.cancel_join_thread()
                return
            except BaseException as exc:  # reported, and the worker takes the next job
                events.put(("failed", pid, job.index, *describe_failure(exc)))
            else:
                events.put(("done", pid, job.index, summary, time.perf_counter() - wall, time.process_time() - cpu))
    except (KeyboardInterrupt, Interrupted):  # told to stop between jobs
        events.cancel_join_thread()
    finally:
        if runtime is not None:
            runtime.close()


def _stop_worker(signum: int, frame: Any) -> None:
    """A worker's SIGTERM (the grid's process stopping it, or its death): the run in progress
    ends as interrupted (its folder says so; ``--unfinished`` goes on from its checkpoint), and
    a worker still there :data:`STOP_GRACE_S` later ends itself. Once: a second signal during
    that cleanup is ignored."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    timer = threading.Timer(STOP_GRACE_S, os._exit, (128 + signum,))
    timer.daemon = True
    timer.start()
    raise Interrupted(f"interrupted ({signal.Signals(signum).name})")


def _run_job(suite: Suite, job: Job, runtime: Runtime, events: Any, pid: int, costs: CountedCosts,
             watch: ParentWatch | None = None) -> RunSummary:
    last = [0.0]

    def progress(now: float, version: int, in_flight: int, accuracy: float | None) -> None:
        if watch is not None and watch.gone():  # after each event: where no parent-death signal exists
            raise Interrupted("interrupted (the grid's process ended)")
        if time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            events.put(("progress", pid, job.index, now, version, in_flight, accuracy))

    return run_scenario(suite.runs[job.index], runtime, job.out_dir, on_progress=progress, resume=job.resume,
                        overwrite=job.overwrite, costs=costs)


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """A failed job's one-line error and, for an error that is not a user's mistake (a bug,
    a plugin's own exception), its traceback ("" for a mistake the message explains)."""
    from fedclock.actors.calls import ActorLost
    from fedclock.actors.runtime import ResourceError
    from fedclock.algorithms.registry import UnknownAlgorithm
    from fedclock.scenarios.checkpoints import CheckpointError
    from fedclock.scenarios.claims import ClaimError
    from fedclock.scenarios.data.datasets import DatasetError
    from fedclock.scenarios.experiment import Interrupted, OutputError
    from fedclock.scenarios.loader import ScenarioError, one_line
    from fedclock.scenarios.plugins import PluginError
    from fedclock.scenarios.runstatus import FolderInUse
    from fedclock.scheduling.selection import SelectorError

    explained = (ScenarioError, DatasetError, ResourceError, CheckpointError, PluginError, ClaimError, FolderInUse,
                 UnknownAlgorithm, ActorLost, OutputError, Interrupted, SelectorError)
    text = str(exc.args[0]) if isinstance(exc, UnknownAlgorithm) and exc.args else str(exc)
    line = one_line(text) if isinstance(exc, explained) else f"{type(exc).__name__}: {one_line(text)}"
    detail = "" if isinstance(exc, explained) else "".join(traceback.format_exception(exc))
    return line, detail


class SharedRuntime(Runtime):
    """A worker's runtime: on Ray, a run that leaves ``runtime.num_actors`` unset (pooled)
    takes at most the worker's ``share`` of the cluster's CPUs."""

    def __init__(self, backend: str, address: str | None, share: float, py_modules: Sequence[str]) -> None:
        super().__init__(backend, address, py_modules=py_modules)
        self.share = share

    def session(self, cfg: RuntimeConfig, federation: Federation, algorithm: Algorithm, seed: int,
                evaluation_batch: int, personalized: bool,
                adapted: AdaptedEvaluation | None = None, fit: bool = False) -> Session:
        if self.backend == "ray" and cfg.num_actors is None and cfg.placement != "dedicated":
            cfg = cfg.model_copy(update={"num_actors": max(1, int(self.share // cfg.num_cpus))})
        return super().session(cfg, federation, algorithm, seed, evaluation_batch, personalized, adapted, fit)
