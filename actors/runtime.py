"""The runtime: starts Ray (or runs inline), owns the actors, and serves the clock.

``Runtime`` owns a server actor and a pool of client executors and is reused across the
runs of a suite. ``Session`` is one run's view: it implements the clock's
:class:`~fedclock.scheduling.clock.Backend` — start a task on an executor now, hand arrivals
to the server, evaluate — and keeps each client's persistent state as an object-store
reference between tasks (actors hold resources, not truth). For checkpoints it also hands
out the server's state and a running task's inputs, and puts them back
(:mod:`fedclock.actors.replay`).

The ``inline`` backend runs the same executor and server classes in this process, with the
same seeds and thread counts, so it gives the same numbers. It pays no Ray start-up (5-7 s
on a 2-core machine) and no per-call cost, so on one small machine it is also the fastest
way to run a scenario (``benchmarks/RESULTS.md``, "End to end"); Ray runs the executors in
parallel processes and across a cluster.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import numpy as np
import torch

from fedclock.actors.executor import RESULTS_PER_TASK, STATE_KEPT, TRAIN_ARGS, ClientExecutor
from fedclock.actors.federation import Federation
from fedclock.actors.grouping import InstantGroups
from fedclock.actors.ray_start import start_ray
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.actors.server import Server
from fedclock.actors.wire import to_wire
from fedclock.algorithms.base import Algorithm, EvalResult, ServerState, Tensors
from fedclock.scheduling.clock import Task


class Transport(Protocol):
    """How calls reach actors."""

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any: ...

    def by_reference(self, handle: Any) -> Any:
        """``handle`` as a call argument that the callee resolves itself (see
        :class:`ByReference`), instead of having it resolved before the call."""
        ...

    def get(self, handle: Any) -> Any: ...

    def put(self, value: Any) -> Any: ...

    def lost_actor(self, exc: BaseException) -> str | None:
        """The id of the actor whose death ``exc`` reports ("" when unknown), or None when
        ``exc`` is not an actor's death."""
        ...


class InlineTransport:
    """Calls run at once in this process; handles are the values themselves."""

    def lost_actor(self, exc: BaseException) -> str | None:
        return None

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
        return getattr(actor, method)(*args)

    def by_reference(self, handle: Any) -> Any:
        return handle

    def get(self, handle: Any) -> Any:
        return handle

    def put(self, value: Any) -> Any:
        return value


class RayTransport:
    """Calls are Ray actor tasks; handles are object references."""

    def __init__(self) -> None:
        import ray

        self._ray = ray

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
        return getattr(actor, method).options(num_returns=num_returns).remote(*args)

    def by_reference(self, handle: Any) -> Any:
        return ByReference(handle) if isinstance(handle, self._ray.ObjectRef) else handle

    def get(self, handle: Any) -> Any:
        return self._ray.get(handle)

    def put(self, value: Any) -> Any:
        return self._ray.put(value)

    def lost_actor(self, exc: BaseException) -> str | None:
        if isinstance(exc, self._ray.exceptions.RayActorError):
            return exc.actor_id or ""
        return None


def actor_id(actor: Any) -> str:
    """A Ray actor handle's id in hex ("" for in-process objects)."""
    ident = getattr(actor, "_actor_id", None)
    return ident.hex() if ident is not None else ""


def _resolve(values: list[Any]) -> list[Any]:
    """Fetch the object references in a list (each distinct one once)."""
    import ray

    refs = {v for v in values if isinstance(v, ray.ObjectRef)}
    if not refs:
        return values
    order = list(refs)
    fetched = dict(zip(order, ray.get(order)))
    return [fetched[v] if isinstance(v, ray.ObjectRef) else v for v in values]


class ByReference(NamedTuple):
    """An object reference passed to an actor inside a tuple, so that Ray does not fetch and
    unpickle it before the call; the executor resolves it through a one-entry cache
    (:meth:`RayClientExecutor._shared`). The runtime passes every task's payload this way:
    in sync mode all tasks of a round share one payload reference, so an executor unpickles
    the global model once per round instead of once per task (Ray's timeline of the MLP
    workload of ``benchmarks/e2e.py`` on a loaded machine: argument unpickling went from
    3.5 to 2.4 ms per task, beside 6 ms of training)."""

    ref: Any


class RayClientExecutor(ClientExecutor):
    """The executor as a Ray actor: payloads come :class:`ByReference`; nested object
    references in evaluation lists are fetched; uploads and states leave as
    :func:`~fedclock.actors.wire.to_wire` (one copy each way).

    A cached payload is handed to every task that names the same reference, as the inline
    backend hands one payload object to every task: algorithms never modify a payload
    (their purity contract, and the inline/Ray equality tests check it)."""

    def __init__(self, threads: int = 1) -> None:
        super().__init__(threads)
        self._cached: tuple[Any, Any] | None = None

    def _shared(self, value: Any) -> Any:
        """A :class:`ByReference`'s value (fetched once per distinct reference); other
        values as they are."""
        if not isinstance(value, ByReference):
            return value
        if self._cached is None or self._cached[0] != value.ref:
            import ray

            self._cached = (value.ref, ray.get(value.ref))
        return self._cached[1]

    def train(self, client: int, client_task: int, payload: Tensors, client_state: Tensors | None,
              steps: int | None = None) -> tuple[Tensors, Tensors | None, dict[str, float]]:
        upload, state, metrics = super().train(client, client_task, self._shared(payload), client_state, steps)
        return to_wire(upload), to_wire(state), metrics

    def train_many(self, *inputs: object) -> tuple[object, ...]:
        args = [self._shared(v) if k % TRAIN_ARGS == 2 else v for k, v in enumerate(inputs)]
        results = super().train_many(*args)
        out: list[object] = []
        for k in range(0, len(results), RESULTS_PER_TASK):
            upload, state, metrics = results[k:k + RESULTS_PER_TASK]
            out += [to_wire(upload), to_wire(state), metrics]
        return tuple(out)

    def evaluate(self, clients: list[int], payloads: list[Tensors], states: list[Tensors | None],
                 batch_size: int) -> list[EvalResult]:
        return super().evaluate(clients, _resolve(payloads), _resolve(states), batch_size)


class RayServer(Server):
    """The server as a Ray actor: payloads and the global state leave as
    :func:`~fedclock.actors.wire.to_wire` (one copy each way)."""

    def payload_for(self, client: int) -> Tensors:
        return to_wire(super().payload_for(client))

    def current_state(self) -> ServerState:
        return to_wire(super().current_state())


class ResourceError(Exception):
    """The runtime settings ask for more than the cluster has (a user's mistake, one line)."""


class ActorLost(Exception):
    """An actor died and the run cannot go on (one line): the server actor in a run without
    checkpoints (:class:`ServerLost`), or a client executor that kept dying on the same task."""


class ServerLost(ActorLost):
    """The server actor died. With ``output.checkpoint_every`` the run restarts from its last
    checkpoint on a fresh server actor (:func:`fedclock.scenarios.experiment.run_scenario`);
    without, this ends the run."""


MAX_TASK_RETRIES = 3
"""How many times one client task is re-run on a fresh executor before the run gives up."""

DEFER_VERSIONS = 16
"""How many server versions a deferred task may wait: at each version, the clients whose
oldest deferred task was dispatched more than this many versions ago have their deferred
tasks run. Each deferred task holds the payload it was dispatched with, so this bounds the
payloads kept alive for deferred work to about this many versions."""

GLOBAL_EVAL_CHUNK = 512
"""Global-test-set samples per evaluation chunk (a constant, so the summed results do not
depend on how many executors share the chunks)."""


def default_num_actors(cfg: RuntimeConfig, num_clients: int, cpus: float) -> int:
    """Dedicated: one per client; otherwise as many as the CPUs fit (at least one)."""
    if cfg.placement == "dedicated":
        return num_clients
    if cfg.num_actors is not None:
        return min(cfg.num_actors, num_clients)
    return max(1, min(num_clients, int(cpus // cfg.num_cpus)))


def _uploaded_py_modules(paths: Sequence[str]) -> list[str]:
    """``paths`` uploaded to the cluster's package store, as the URIs an actor's
    ``runtime_env`` accepts. Ray takes local paths only in ``ray.init``'s job-level
    ``runtime_env``, which cannot be set once Ray runs (a notebook's, the test session's, or a
    runtime reused across scenario files); this runs the uploader ``ray.init`` itself uses for
    that (a private Ray function: there is no public one)."""
    import ray
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    scratch = ray._private.worker.global_worker.node.get_runtime_env_dir_path()
    return list(upload_py_modules_if_needed({"py_modules": list(paths)}, include_gitignore=True,
                                            scratch_dir=scratch)["py_modules"])


class Runtime:
    """Starts Ray when needed and keeps the actors of one resource shape across runs.

    Ray starts in a background thread, so that the caller can load the first run's data
    meanwhile; with ``prestart`` (the first run's runtime settings and number of clients) the
    thread then creates that run's executors and server actor, whose processes boot (import
    PyTorch, ...) while the data are still loading. Every method that needs Ray waits for
    the thread first and raises what it raised."""

    def __init__(self, backend: str = "ray", address: str | None = None,
                 prestart: tuple[RuntimeConfig, int] | None = None, py_modules: Sequence[str] = ()) -> None:
        self.backend = backend
        self.address = address
        self.py_modules = sorted(set(py_modules))
        """A user's own modules (files or package folders) that Ray ships to every node, so
        the classes in them unpickle there (:mod:`fedclock.scenarios.plugins`)."""
        self.runtime_env: dict[str, Any] = {}
        """Ray's ``runtime_env`` of every actor this runtime starts: the user's modules,
        uploaded once to the cluster (whoever started Ray)."""
        self._started_ray = False
        self._pool: list[Any] = []
        self._pool_shape: tuple[float, float, int] | None = None
        self._server: Any = None
        self._starting: threading.Thread | None = None
        self._started = threading.Event()
        self._release = threading.Event()
        self._start_error: BaseException | None = None
        if backend == "ray":
            self.transport: Transport = RayTransport()
            if threading.current_thread() is threading.main_thread() and \
                    signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                # what ray.init does when called from the main thread: SIGTERM exits (so Ray shuts down)
                signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
            self._starting = threading.Thread(target=self._start, args=(prestart,), name="fedclock-ray-start",
                                              daemon=True)
            self._starting.start()
        else:
            self.transport = InlineTransport()

    def _start(self, prestart: tuple[RuntimeConfig, int] | None) -> None:
        """The background thread: ``ray.init``, then the first run's actors (if ``prestart``
        is given and they fit the cluster; otherwise :meth:`session` says why not). The
        thread then waits for :meth:`close`: Ray's daemons are started with a parent-death
        signal, which Linux sends when the *thread* that started them ends."""
        try:
            self._init_ray()
            if self.py_modules:
                self.runtime_env = {"py_modules": _uploaded_py_modules(self.py_modules)}
            if prestart is not None:
                cfg, num_clients = prestart
                cpus = self._cluster_cpus()
                count = default_num_actors(cfg, num_clients, cpus)
                if count * cfg.num_cpus <= cpus + 1e-9:
                    self._executors(cfg, count)
                    self._server_actor(cfg)
        except BaseException as exc:  # handed to the caller by _ready()
            self._start_error = exc
        self._started.set()
        self._release.wait()

    def _ready(self) -> None:
        """Wait until Ray (and the prestarted actors) are started; raise what starting raised."""
        if self._starting is None:
            return
        self._started.wait()
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error

    def _init_ray(self) -> None:
        self._started_ray = start_ray(self.address)

    @property
    def cpus(self) -> float:
        self._ready()
        return self._cluster_cpus()

    def _cluster_cpus(self) -> float:
        if self.backend == "ray":
            import ray

            return float(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
        return float(os.cpu_count() or 1)

    def _executors(self, cfg: RuntimeConfig, count: int) -> list[Any]:
        shape = (cfg.num_cpus, cfg.num_gpus, cfg.threads_per_actor)
        if shape != self._pool_shape:
            self._kill(self._pool)
            self._pool, self._pool_shape = [], shape
        if self.backend == "inline":
            torch.set_num_threads(cfg.threads_per_actor)
            if not self._pool:
                self._pool.append(ClientExecutor(cfg.threads_per_actor))
            return [self._pool[0]] * count if count else []
        while len(self._pool) < count:
            self._pool.append(self._new_executor(cfg))
        return self._pool[:count]

    def _new_executor(self, cfg: RuntimeConfig) -> Any:
        import ray

        remote = ray.remote(RayClientExecutor).options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus,
                                                       runtime_env=self.runtime_env or None)
        return remote.remote(cfg.threads_per_actor)

    def _respawn(self, cfg: RuntimeConfig, slot: int, setup: tuple[Any, ...]) -> Any:
        """Replace the dead executor at ``slot`` of the pool by a fresh one, set up for the run."""
        self._kill([self._pool[slot]])
        fresh = self._new_executor(cfg)
        self.transport.get(self.transport.call(fresh, "setup", *setup))
        self._pool[slot] = fresh
        return fresh

    def _server_actor(self, cfg: RuntimeConfig) -> Any:
        if self._server is None:
            if self.backend == "inline":
                self._server = Server(cfg.threads_per_actor)
            else:
                import ray

                self._server = ray.remote(RayServer).options(num_cpus=0, runtime_env=self.runtime_env or None).remote(
                    cfg.threads_per_actor)
        return self._server

    def session(self, cfg: RuntimeConfig, federation: Federation, algorithm: Algorithm, seed: int,
                evaluation_batch: int, personalized: bool) -> "Session":
        """Prepare the actors for one run and return its backend."""
        self._ready()
        count = default_num_actors(cfg, federation.num_clients, self.cpus)
        if self.backend == "ray" and count * cfg.num_cpus > self.cpus + 1e-9:
            raise ResourceError(
                f"runtime.num_cpus: {count} client actors x {cfg.num_cpus:g} CPUs need "
                f"{count * cfg.num_cpus:g} CPUs, the Ray cluster has {self.cpus:g}; lower runtime.num_cpus, "
                f"runtime.num_actors, or use pooled placement")
        executors = self._executors(cfg, count)
        t = self.transport
        fed_h, alg_h = t.put(federation), t.put(algorithm)
        setup = (fed_h, alg_h, seed, cfg.device, cfg.vectorize)
        unique = list({id(e): e for e in executors}.values())
        for e, handle in [(e, t.call(e, "setup", *setup)) for e in unique]:
            try:
                t.get(handle)
            except Exception as exc:  # an actor that died since the last run is replaced
                if t.lost_actor(exc) is None:
                    raise
                slot = executors.index(e)
                executors[slot] = self._respawn(cfg, slot, setup)
        server = self._server_actor(cfg)
        try:
            t.get(t.call(server, "setup", alg_h, seed))
        except Exception as exc:  # a server that died in an earlier run: this run starts a fresh one
            if t.lost_actor(exc) is None:
                raise
            self._server = None
            server = self._server_actor(cfg)
            t.get(t.call(server, "setup", alg_h, seed))
        placement = cfg.placement or ("dedicated" if count == federation.num_clients and cfg.vectorize == 1
                                      else "pooled")
        return Session(t, server, executors, placement, federation.num_clients,
                       federation.client_sizes(), algorithm.payload_is_shared, evaluation_batch, personalized,
                       respawn=lambda slot: self._respawn(cfg, slot, setup), num_test=int(federation.y_test.shape[0]),
                       vectorize=cfg.vectorize, stateless=algorithm.stateless_clients,
                       algorithm_name=type(algorithm).name, hears_failures=algorithm.hears_failures,
                       tasks_per_call=cfg.tasks_per_call)

    def _kill(self, actors: Sequence[Any]) -> None:
        if self.backend == "ray":
            import ray

            for a in actors:
                try:
                    ray.kill(a)
                except ValueError:  # already gone
                    pass

    def close(self) -> None:
        """Stop the actors, and Ray if this runtime started it."""
        try:
            self._ready()
        except Exception:  # Ray did not start: nothing to stop but what did
            pass
        self._kill(self._pool + ([self._server] if self._server is not None else []))
        self._pool, self._server, self._pool_shape = [], None, None
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False
        self._release.set()
        if self._starting is not None:
            self._starting.join()
            self._starting = None


class TaskInputs(NamedTuple):
    """What a client task is started with: :meth:`ClientExecutor.train`'s arguments, in its
    order (payload and state may be object references)."""

    client: int
    client_task: int
    payload: Any
    state: Any
    steps: int | None


class TaskResults(NamedTuple):
    """References to a task's three results, in the order the executor returns them."""

    upload: Any
    state: Any
    metrics: Any


@dataclass
class _Running:
    """A client task in flight: its inputs (held here, so a lost executor costs only a re-run)
    and the references to its results (None until it is sent to an executor)."""

    slot: int
    inputs: TaskInputs
    results: TaskResults | None = None
    tries: int = 0
    group: list["_Running"] | None = None
    """The tasks sent in one call with this one (a group, see :mod:`fedclock.actors.grouping`), itself included."""
    deferred: bool = False
    """Not run yet: its upload is discarded, and it runs when the client state it leaves is
    first needed (:meth:`Session._settled`)."""
    kept: Any = None
    """After a deferred task ran: the handle of the client state it left (None: none)."""


class Session:
    """One run's backend for the clock.

    An executor that dies (its results raise the transport's actor-death error) is replaced by
    a fresh one through ``respawn`` and every task it held is re-run there with the same
    inputs — payload, client state, task index and so the same seed — hence the same results.
    A task re-run more than :data:`MAX_TASK_RETRIES` times ends the run with :class:`ActorLost`;
    the server actor dying raises :class:`ServerLost`, after which a run with checkpoints goes
    on from its last one on a fresh server (a new session, replayed up to the checkpoint and
    restored through :meth:`restore` and :meth:`restart`, see :mod:`fedclock.actors.replay`).

    With pooled placement the tasks started at one virtual instant are held back and sent
    when the clock next calls ``apply``/``release``/``evaluate`` or starts a task at a later
    instant (:mod:`fedclock.actors.grouping`): with ``vectorize`` K > 1 in groups of at most K
    to ``train_many`` (vectorized clients), otherwise (Ray only) in one group per executor (or
    groups of at most ``tasks_per_call``; 1 sends each task at once) to ``train_each``, which
    runs them one by one as ``train`` would. A group whose executor died is re-run whole. Tasks
    restarted from a checkpoint are grouped among themselves, so a resumed vectorized run
    equals the uninterrupted one within float rounding (bit for bit without vectorizing).

    A task whose upload the clock knows at dispatch to be discarded (``task.upload_discarded``:
    the server gives up on it, or drops it as late) changes nothing but the client state it
    leaves. Its computation is deferred until that state is first needed: the client's next
    task, a personalized evaluation, the final states, a checkpoint, or :data:`DEFER_VERSIONS`
    server versions after its dispatch (which bounds the payloads held for it). A deferred
    task whose state is never needed (the run ends first, or its release keeps no state)
    never runs. When it does run, it runs with the inputs it was dispatched with (payload,
    state, task index and so seed), so the tables are those of running it at once, bit for
    bit; the deferred tasks of several clients needed at once run in parallel."""

    def __init__(self, transport: Transport, server: Any, executors: list[Any], placement: str, num_clients: int,
                 client_sizes: np.ndarray, shared_payload: bool, evaluation_batch: int, personalized: bool,
                 respawn: Callable[[int], Any] | None = None, num_test: int = 0, vectorize: int = 1,
                 stateless: bool = False, algorithm_name: str = "", hears_failures: bool = False,
                 tasks_per_call: int | None = None) -> None:
        self.t = transport
        self.stateless = stateless
        """The algorithm declares ``stateless_clients`` (checked on every kept result)."""
        self.algorithm_name = algorithm_name
        self.hears_failures = hears_failures
        """The algorithm has a failure hook (:meth:`Algorithm.server_task_failed`)."""
        self.num_test = num_test
        """Size of the global test set (evaluated in chunks on the executors)."""
        self.server = server
        self.executors = executors
        self.placement = placement
        self.num_clients = num_clients
        self.client_sizes = client_sizes
        self.shared_payload = shared_payload
        self.evaluation_batch = evaluation_batch
        self.personalized = personalized
        self.client_results: list[EvalResult] = []
        """Each client's personalized result (client id order) at the last evaluation."""
        self.version = 0
        self.client_state: dict[int, Any] = {}
        """Each client's kept state (a handle); a client in :attr:`_deferred` has a newer one,
        still to compute (:meth:`kept_state` settles it)."""
        self._deferred: dict[int, _Running] = {}
        """Clients whose latest kept state is that of a deferred task, not run yet."""
        self._deferred_since: dict[int, int] = {}
        """For each client in :attr:`_deferred`: the dispatch version of its oldest deferred task."""
        self.defer_versions = DEFER_VERSIONS
        self.respawns = 0
        self._respawn = respawn
        self._load = [0] * len(executors)
        self._payload: tuple[int, Any] | None = None
        self._groups: InstantGroups[_Running] | None = None
        self._group_method = "train_many" if vectorize > 1 else "train_each"
        if vectorize > 1:
            self._groups = InstantGroups(vectorize)
        elif placement == "pooled" and tasks_per_call != 1 and not isinstance(transport, InlineTransport):
            # remote calls only: an inline call costs nothing to save
            self._groups = InstantGroups(tasks_per_call or max(1, num_clients), spread=len(executors))

    # ------------------------------------------------------------------ Backend
    def start(self, task: Task) -> None:
        if task.upload_discarded:  # only its client state can matter: computed when first needed
            latest = self._deferred.get(task.client, self.client_state.get(task.client))
            inputs = TaskInputs(task.client, task.client_task, self._payload_for(task.client), latest, task.steps)
            task.handle = _Running(-1, inputs, deferred=True)
            return
        self._launch(task, self._payload_for(task.client), self.kept_state(task.client))

    def _launch(self, task: Task, payload: Any, state: Any) -> None:
        inputs = TaskInputs(task.client, task.client_task, payload, state, task.steps)
        if self._groups is not None:
            task.handle = _Running(-1, inputs)
            self._start_groups(self._groups.add(task.dispatched_at, task.handle))
            return
        slot = task.client if self.placement == "dedicated" else min(range(len(self.executors)),
                                                                      key=self._load.__getitem__)
        self._load[slot] += 1
        task.handle = _Running(slot, inputs, self._train(slot, inputs))

    def apply(self, tasks: Sequence[Task]) -> int:
        self._flush()
        try:  # one round trip for the cohort; a failure is sorted out task by task
            metrics = list(self.t.get([t.handle.results.metrics for t in tasks]))
        except Exception:
            metrics = [self._metrics(t.handle) for t in tasks]
        meta = [(t.client, t.num_samples, t.version, int(t.staleness or 0), int(m["steps"]))
                for t, m in zip(tasks, metrics)]
        version = self._server_get(self.t.call(self.server, "receive", meta, *[t.handle.results.upload for t in tasks]))
        for t, m in zip(tasks, metrics):
            self._finish(t, keep_state=True, metrics=m)
        self.version = int(version)
        horizon = self.version - self.defer_versions  # bounds the payloads held for deferred work
        self._settle_clients(sorted(c for c, since in self._deferred_since.items() if since < horizon))
        return self.version

    def release(self, task: Task, keep_state: bool) -> None:
        running: _Running = task.handle
        if running.deferred:
            if keep_state:
                chained = task.client in self._deferred  # its state starts from a deferred one
                self._deferred_since[task.client] = self._deferred_since[task.client] if chained else task.version
                self._deferred[task.client] = running
            task.handle = None
            return
        self._flush()
        self._finish(task, keep_state, metrics=self._metrics(task.handle) if keep_state else None)

    def failed(self, task: Task) -> None:
        if self.hears_failures:
            reason = "lost" if task.lost else "timed_out"
            self._server_get(self.t.call(self.server, "task_failed", task.client, task.version, reason))

    def evaluate(self) -> dict[str, float]:
        self._flush()
        g = self._global()
        out = {"global_accuracy": g.accuracy, "global_loss": g.loss,
               **self._server_get(self.t.call(self.server, "metrics"))}
        if self.personalized:
            self.settle_all()
            self.client_results = self._personalized()
            accs = np.array([r.accuracy for r in self.client_results if r.count > 0])
            out.update(personal_accuracy_mean=float(np.mean(accs)), personal_accuracy_p10=float(np.quantile(accs, 0.1)),
                       personal_accuracy_p90=float(np.quantile(accs, 0.9)))
        return out

    def final_states(self) -> tuple[Any, dict[int, Any]]:
        """The server's global state and every client's kept state (fetched), after a run."""
        self._flush()
        self.settle_all()
        server_state = self._server_get(self.t.call(self.server, "current_state"))
        clients = sorted(self.client_state)
        values = self.t.get([self.client_state[c] for c in clients]) if clients else []
        return server_state, dict(zip(clients, values))

    def payload(self, client: int) -> Tensors:
        """The server's current payload for ``client`` (fetched; for post-run analyses)."""
        return self._server_get(self.t.call(self.server, "payload_for", client))

    # ------------------------------------------------------------------ checkpoints (fedclock.actors.replay)
    def task_inputs(self, task: Task) -> tuple[Any, Any]:
        """A running task's payload and client state as handed to it at its start (handles)."""
        inputs: TaskInputs = task.handle.inputs
        state = self._settled(inputs.state) if isinstance(inputs.state, _Running) else inputs.state
        return inputs.payload, state

    def server_snapshot(self) -> tuple[ServerState, int]:
        """The server's global state and receive count."""
        state, receives = self._server_get(self.t.call(self.server, "snapshot"))
        return state, int(receives)

    def restore(self, state: ServerState, receives: int, clients: dict[int, Tensors | None]) -> None:
        """Put the server and every client's kept state back to a checkpoint's."""
        self.version = int(self._server_get(self.t.call(self.server, "restore", state, receives)))
        self.client_state = {c: self.t.put(v) for c, v in clients.items()}
        self._deferred, self._deferred_since = {}, {}
        self._payload = None

    def restart(self, task: Task, payload: Any, state: Any) -> None:
        """Start ``task`` from saved inputs (handles from ``t.put``), as :meth:`start` did
        before a restore."""
        self._launch(task, payload, state)

    # ------------------------------------------------------------------ deferred tasks
    def kept_state(self, client: int) -> Any:
        """The handle of ``client``'s latest kept state (None: none), running its deferred
        tasks first if it has any."""
        self._settle_clients([client])
        return self.client_state.get(client)

    def settle_all(self) -> None:
        """Every client's latest state computed (before reading all of them)."""
        self._settle_clients(sorted(self._deferred))

    def _settle_clients(self, clients: list[int]) -> None:
        """Run the deferred tasks of ``clients`` and keep the states they leave."""
        pending = [(c, self._deferred.pop(c)) for c in clients if c in self._deferred]
        for c, _ in pending:
            self._deferred_since.pop(c, None)
        self._run_chains([self._chain(running) for _, running in pending])
        for c, running in pending:
            if running.kept is None:
                self.client_state.pop(c, None)
            else:
                self.client_state[c] = running.kept

    def _settled(self, running: _Running) -> Any:
        """Run the deferred task ``running`` (after the deferred tasks whose state it starts
        from) and return the handle of the state it leaves."""
        self._run_chains([self._chain(running)])
        return running.kept

    @staticmethod
    def _chain(running: _Running) -> tuple[list[_Running], Any]:
        """The deferred tasks not run yet that ``running``'s state depends on, oldest first,
        ending with ``running`` itself, and the handle of the state the oldest starts from."""
        chain: list[_Running] = []
        link: Any = running
        while isinstance(link, _Running) and link.deferred:
            chain.append(link)
            link = link.inputs.state
        return chain[::-1], (link.kept if isinstance(link, _Running) else link)

    def _run_chains(self, chains: list[tuple[list[_Running], Any]]) -> None:
        """Run several clients' chains of deferred tasks: the first tasks of every chain at
        once, spread over the executors, then the second ones, and so on; each task runs
        once, from the state its predecessor left (an executor that dies is replaced and the
        task re-run, as any task)."""
        states = [start for _, start in chains]
        for k in range(max((len(chain) for chain, _ in chains), default=0)):
            step = [(i, chain[k]) for i, (chain, _) in enumerate(chains) if k < len(chain)]
            for i, task in step:
                task.inputs = task.inputs._replace(state=states[i])
                task.slot = min(range(len(self.executors)), key=self._load.__getitem__)
                self._load[task.slot] += 1
                task.results = self._train(task.slot, task.inputs)
            for i, task in step:
                kept = self._metrics(task).get(STATE_KEPT, 1.0)
                self._load[task.slot] -= 1
                assert task.results is not None
                task.deferred = False
                task.kept = states[i] = task.results.state if kept else None

    # ------------------------------------------------------------------ faults
    def _train(self, slot: int, inputs: TaskInputs) -> TaskResults:
        return TaskResults(*self.t.call(self.executors[slot], "train", *self._sent(inputs),
                                        num_returns=RESULTS_PER_TASK))

    def _sent(self, inputs: TaskInputs) -> TaskInputs:
        """The inputs as sent: the payload by reference (the executor caches it)."""
        return inputs._replace(payload=self.t.by_reference(inputs.payload))

    def _flush(self) -> None:
        """Send every held-back task to the executors."""
        if self._groups is not None and len(self._groups):
            self._start_groups(self._groups.flush())

    def _start_groups(self, groups: list[list[_Running]]) -> None:
        """Each group to the least loaded executor."""
        for group in groups:
            slot = min(range(len(self.executors)), key=self._load.__getitem__)
            self._load[slot] += len(group)
            for running in group:
                running.slot, running.group = slot, group
            self._train_group(group)

    def _train_group(self, group: list[_Running]) -> None:
        refs = self.t.call(self.executors[group[0].slot], self._group_method,
                           *[value for running in group for value in self._sent(running.inputs)],
                           num_returns=RESULTS_PER_TASK * len(group))
        for j, running in enumerate(group):
            running.results = TaskResults(*refs[RESULTS_PER_TASK * j:RESULTS_PER_TASK * (j + 1)])

    def _metrics(self, running: _Running) -> dict[str, float]:
        """The task's metrics; a task whose executor died is re-run on a fresh one."""
        while True:
            try:
                assert running.results is not None
                return self.t.get(running.results.metrics)
            except Exception as exc:
                what = f"client {running.inputs.client} task {running.inputs.client_task}"
                running.tries += 1
                if running.tries > MAX_TASK_RETRIES and self.t.lost_actor(exc) not in (None, actor_id(self.server)):
                    raise ActorLost(f"{what}: its executor died {running.tries} times in a row (at most "
                                    f"{MAX_TASK_RETRIES} re-runs); see the Ray logs for why the actors die") from None
                self._replace(running.slot, exc, what)
                if running.group is not None:  # the whole group, so every member gets the same numbers as before
                    self._train_group(running.group)
                else:
                    running.results = self._train(running.slot, running.inputs)

    def _replace(self, slot: int, exc: Exception, what: str) -> None:
        """Re-raise ``exc`` unless it reports the death of the executor at ``slot``; then put a
        fresh executor there (once, however many of its tasks report the death)."""
        lost = self.t.lost_actor(exc)
        if lost is None:
            raise exc
        if lost == actor_id(self.server):
            raise self._server_lost() from None
        if self._respawn is None:
            raise ActorLost(f"{what}: its executor died and this runtime cannot replace it") from None
        if lost and lost != actor_id(self.executors[slot]):
            return  # this slot's executor was already replaced; just re-run there
        self.executors[slot] = self._respawn(slot)
        self.respawns += 1

    def _server_get(self, handle: Any) -> Any:
        try:
            return self.t.get(handle)
        except Exception as exc:
            if self.t.lost_actor(exc) is None:
                raise
            raise self._server_lost() from None

    def _server_lost(self) -> ServerLost:
        return ServerLost("the server actor died; the run cannot go on without a checkpoint to restart from (set "
                          "output.checkpoint_every: N to write one every N server versions; results so far are on "
                          "disk)")

    # ------------------------------------------------------------------ helpers
    def _finish(self, task: Task, keep_state: bool, metrics: dict[str, float] | None = None) -> None:
        """Free the task's executor slot; when ``keep_state``, record its ``metrics`` on the
        task and keep the client's returned state — or, when the executor reports it returned
        none (:data:`STATE_KEPT` 0: stateless algorithms), hold no reference for the client
        (a later task gets None, exactly as from a kept None)."""
        running: _Running = task.handle
        self._load[running.slot] -= 1
        if keep_state:
            metrics = dict(metrics or {})
            if metrics.pop(STATE_KEPT, 1.0):
                if self.stateless:
                    raise RuntimeError(f"algorithm {self.algorithm_name!r} declares stateless_clients but client "
                                       f"{task.client}'s task returned a client state; set stateless_clients = False "
                                       f"in its class")
                assert running.results is not None
                self.client_state[task.client] = running.results.state
            else:
                self.client_state.pop(task.client, None)
            task.metrics = metrics
        task.handle = None

    def _payload_for(self, client: int) -> Any:
        if not self.shared_payload:
            return self.t.call(self.server, "payload_for", client)
        if self._payload is None or self._payload[0] != self.version:
            self._payload = (self.version, self.t.call(self.server, "payload_for", client))
        return self._payload[1]

    def _global(self) -> EvalResult:
        """The global model on the global test set, in fixed chunks of
        :data:`GLOBAL_EVAL_CHUNK` samples spread over the executors (idle at an evaluation in
        sync mode) and added up in chunk order: the same sums whatever the number of
        executors, each chunk computed single-threaded as everywhere else."""
        state = self._server_get(self.t.call(self.server, "current_state"))
        state_ref = self.t.put(state)
        slots = list({id(e): i for i, e in enumerate(self.executors)}.values())
        starts = range(0, self.num_test, GLOBAL_EVAL_CHUNK)
        work = [(slots[k % len(slots)], (a, min(a + GLOBAL_EVAL_CHUNK, self.num_test))) for k, a in enumerate(starts)]
        parts: list[EvalResult] = self._on_executors(
            "global evaluation", work,
            lambda slot, span: self.t.call(self.executors[slot], "evaluate_global", state_ref, span[0], span[1],
                                           self.evaluation_batch))
        total = EvalResult(0.0, 0, 0.0)
        for part in parts:
            total = EvalResult(total.correct + part.correct, total.count + part.count, total.loss_sum + part.loss_sum)
        return total

    def _on_executors(self, what: str, work: list[tuple[int, Any]], call: Any) -> list[Any]:
        """Run ``call(slot, item)`` for every (slot, item) at once and return the results in
        order; an item whose executor died is re-run on a fresh one (bounded retries)."""
        handles = [call(slot, item) for slot, item in work]
        results: list[Any] = []
        for (slot, item), handle in zip(work, handles):
            for tries in range(MAX_TASK_RETRIES + 1):
                try:
                    results.append(self.t.get(handle))
                    break
                except Exception as exc:
                    if tries == MAX_TASK_RETRIES and self.t.lost_actor(exc) not in (None, actor_id(self.server)):
                        raise ActorLost(f"{what}: its executor died {tries + 1} times in a row "
                                        f"(at most {MAX_TASK_RETRIES} re-runs); see the Ray logs for why the actors "
                                        f"die") from None
                    self._replace(slot, exc, what)
                    handle = call(slot, item)
        return results

    def _personalized(self) -> list[EvalResult]:
        clients = list(range(self.num_clients))
        payloads = [self._payload_for(c) for c in clients]
        states = [self.client_state.get(c) for c in clients]
        slots = list({id(e): i for i, e in enumerate(self.executors)}.values())
        chunks = [c for c in np.array_split(np.arange(self.num_clients), len(slots)) if len(c)]
        parts = self._on_executors(
            "personalized evaluation", list(zip(slots, chunks)),
            lambda slot, chunk: self.t.call(self.executors[slot], "evaluate", [clients[i] for i in chunk],
                                            [payloads[i] for i in chunk], [states[i] for i in chunk],
                                            self.evaluation_batch))
        return [r for part in parts for r in part]
