"""The runtime: starts Ray (or runs inline), owns the actors, and serves the clock.

``Runtime`` owns a server actor and a pool of client executors and is reused across the
runs of a suite. ``Session`` is one run's view: it implements the clock's
:class:`~fedclock.scheduling.clock.Backend` — start a task on an executor now, hand arrivals
to the server, evaluate — and keeps each client's persistent state as an object-store
reference between tasks (actors hold resources, not truth).

The ``inline`` backend runs the same executor and server classes in this process, with the
same seeds and thread counts, so it gives the same numbers; it is meant for tests and
debugging.
"""
from __future__ import annotations

import os
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from fedclock.actors.executor import ClientExecutor
from fedclock.actors.server import Server
from fedclock.algorithms.base import Algorithm, EvalResult, Tensors
from fedclock.scenarios.federation import Federation
from fedclock.scenarios.schema import RuntimeConfig
from fedclock.scheduling.clock import Task


class Transport(Protocol):
    """How calls reach actors."""

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any: ...

    def get(self, handle: Any) -> Any: ...

    def put(self, value: Any) -> Any: ...


class InlineTransport:
    """Calls run at once in this process; handles are the values themselves."""

    def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
        return getattr(actor, method)(*args)

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

    def get(self, handle: Any) -> Any:
        return self._ray.get(handle)

    def put(self, value: Any) -> Any:
        return self._ray.put(value)


def _resolve(values: list[Any]) -> list[Any]:
    """Fetch the object references in a list (each distinct one once)."""
    import ray

    refs = {v for v in values if isinstance(v, ray.ObjectRef)}
    if not refs:
        return values
    order = list(refs)
    fetched = dict(zip(order, ray.get(order)))
    return [fetched[v] if isinstance(v, ray.ObjectRef) else v for v in values]


class RayClientExecutor(ClientExecutor):
    """The executor as a Ray actor: nested object references in evaluation lists are fetched."""

    def evaluate(self, clients: list[int], payloads: list[Tensors], states: list[Tensors | None],
                 batch_size: int) -> list[EvalResult]:
        return super().evaluate(clients, _resolve(payloads), _resolve(states), batch_size)


class ResourceError(Exception):
    """The runtime settings ask for more than the cluster has (a user's mistake, one line)."""


def default_num_actors(cfg: RuntimeConfig, num_clients: int, cpus: float) -> int:
    """Dedicated: one per client; otherwise as many as the CPUs fit (at least one)."""
    if cfg.placement == "dedicated":
        return num_clients
    if cfg.num_actors is not None:
        return min(cfg.num_actors, num_clients)
    return max(1, min(num_clients, int(cpus // cfg.num_cpus)))


class Runtime:
    """Starts Ray when needed and keeps the actors of one resource shape across runs."""

    def __init__(self, backend: str = "ray", address: str | None = None) -> None:
        self.backend = backend
        self.address = address
        self._started_ray = False
        self._pool: list[Any] = []
        self._pool_shape: tuple[float, float, int] | None = None
        self._server: Any = None
        if backend == "ray":
            self._init_ray()
            self.transport: Transport = RayTransport()
        else:
            self.transport = InlineTransport()

    def _init_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        # no dashboard, and were one enabled it would listen on loopback only (Ray's default, made explicit)
        kwargs: dict[str, Any] = {"include_dashboard": False, "dashboard_host": "127.0.0.1",
                                  "logging_level": "ERROR", "configure_logging": True}
        if self.address is not None:
            ray.init(address=self.address, **kwargs)
        else:
            ray.init(**kwargs)
        self._started_ray = True

    @property
    def cpus(self) -> float:
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
        import ray

        remote = ray.remote(RayClientExecutor).options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus)
        while len(self._pool) < count:
            self._pool.append(remote.remote(cfg.threads_per_actor))
        return self._pool[:count]

    def _server_actor(self, cfg: RuntimeConfig) -> Any:
        if self._server is None:
            if self.backend == "inline":
                self._server = Server(cfg.threads_per_actor)
            else:
                import ray

                self._server = ray.remote(Server).options(num_cpus=0).remote(cfg.threads_per_actor)
        return self._server

    def session(self, cfg: RuntimeConfig, federation: Federation, algorithm: Algorithm, seed: int,
                evaluation_batch: int, personalized: bool) -> "Session":
        """Prepare the actors for one run and return its backend."""
        count = default_num_actors(cfg, federation.num_clients, self.cpus)
        if self.backend == "ray" and count * cfg.num_cpus > self.cpus + 1e-9:
            raise ResourceError(
                f"runtime.num_cpus: {count} client actors x {cfg.num_cpus:g} CPUs need {count * cfg.num_cpus:g} CPUs, "
                f"the Ray cluster has {self.cpus:g}; lower runtime.num_cpus, runtime.num_actors, or use pooled placement")
        executors = self._executors(cfg, count)
        server = self._server_actor(cfg)
        t = self.transport
        fed_h, alg_h = t.put(federation), t.put(algorithm)
        unique = list({id(e): e for e in executors}.values())
        t.get([t.call(e, "setup", fed_h, alg_h, seed, cfg.device) for e in unique])
        t.get(t.call(server, "setup", alg_h, federation.x_test, federation.y_test, seed))
        placement = cfg.placement or ("dedicated" if count == federation.num_clients else "pooled")
        return Session(t, server, executors, placement, federation.num_clients,
                       federation.client_sizes(), algorithm.payload_is_shared, evaluation_batch, personalized)

    def _kill(self, actors: Sequence[Any]) -> None:
        if self.backend == "ray":
            import ray

            for a in actors:
                ray.kill(a)

    def close(self) -> None:
        """Stop the actors, and Ray if this runtime started it."""
        self._kill(self._pool + ([self._server] if self._server is not None else []))
        self._pool, self._server, self._pool_shape = [], None, None
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    @property
    def num_live_actors(self) -> int:
        return len(self._pool) + (self._server is not None)


class Session:
    """One run's backend for the clock."""

    def __init__(self, transport: Transport, server: Any, executors: list[Any], placement: str, num_clients: int,
                 client_sizes: np.ndarray, shared_payload: bool, evaluation_batch: int, personalized: bool) -> None:
        self.t = transport
        self.server = server
        self.executors = executors
        self.placement = placement
        self.num_clients = num_clients
        self.client_sizes = client_sizes
        self.shared_payload = shared_payload
        self.evaluation_batch = evaluation_batch
        self.personalized = personalized
        self.version = 0
        self.client_state: dict[int, Any] = {}
        self._load = [0] * len(executors)
        self._payload: tuple[int, Any] | None = None

    # ------------------------------------------------------------------ Backend
    def start(self, task: Task) -> None:
        slot = task.client if self.placement == "dedicated" else min(range(len(self.executors)),
                                                                      key=self._load.__getitem__)
        self._load[slot] += 1
        payload = self._payload_for(task.client)
        state = self.client_state.get(task.client)
        upload, new_state, metrics = self.t.call(self.executors[slot], "train", task.client, task.client_task,
                                                 payload, state, task.steps, num_returns=3)
        task.handle = (slot, upload, new_state, metrics)

    def apply(self, tasks: Sequence[Task]) -> int:
        metrics = self.t.get([t.handle[3] for t in tasks])
        meta = [(t.client, t.num_samples, t.version, int(t.staleness or 0), int(m["steps"]))
                for t, m in zip(tasks, metrics)]
        version = self.t.get(self.t.call(self.server, "receive", meta, *[t.handle[1] for t in tasks]))
        for t, m in zip(tasks, metrics):
            self._finish(t, keep_state=True)
            t.metrics = dict(m)
        self.version = int(version)
        return self.version

    def release(self, task: Task, keep_state: bool) -> None:
        if keep_state:
            task.metrics = dict(self.t.get(task.handle[3]))
        self._finish(task, keep_state)

    def evaluate(self) -> dict[str, float]:
        g: EvalResult = self.t.get(self.t.call(self.server, "evaluate", self.evaluation_batch))
        out = {"global_accuracy": g.accuracy, "global_loss": g.loss}
        if self.personalized:
            accs = self._personalized()
            out.update(personal_accuracy_mean=float(np.mean(accs)), personal_accuracy_p10=float(np.quantile(accs, 0.1)),
                       personal_accuracy_p90=float(np.quantile(accs, 0.9)))
        return out

    def final_states(self) -> tuple[Any, dict[int, Any]]:
        """The server's global state and every client's kept state (fetched), after a run."""
        server_state = self.t.get(self.t.call(self.server, "current_state"))
        clients = sorted(self.client_state)
        values = self.t.get([self.client_state[c] for c in clients]) if clients else []
        return server_state, dict(zip(clients, values))

    # ------------------------------------------------------------------ helpers
    def _finish(self, task: Task, keep_state: bool) -> None:
        slot = task.handle[0]
        self._load[slot] -= 1
        if keep_state:
            self.client_state[task.client] = task.handle[2]
        task.handle = None

    def _payload_for(self, client: int) -> Any:
        if not self.shared_payload:
            return self.t.call(self.server, "payload_for", client)
        if self._payload is None or self._payload[0] != self.version:
            self._payload = (self.version, self.t.call(self.server, "payload_for", client))
        return self._payload[1]

    def _personalized(self) -> np.ndarray:
        clients = list(range(self.num_clients))
        payloads = [self._payload_for(c) for c in clients]
        states = [self.client_state.get(c) for c in clients]
        unique = list({id(e): e for e in self.executors}.values())
        chunks = np.array_split(np.arange(self.num_clients), len(unique))
        handles = [self.t.call(e, "evaluate", [clients[i] for i in chunk], [payloads[i] for i in chunk],
                               [states[i] for i in chunk], self.evaluation_batch)
                   for e, chunk in zip(unique, chunks) if len(chunk)]
        results: list[EvalResult] = [r for part in self.t.get(handles) for r in part]
        return np.array([r.accuracy for r in results if r.count > 0])
