"""The runtime: starts Ray (or runs inline) and owns the actors across the runs of a suite.

``Runtime`` owns a server actor and a pool of client executors and is reused across the
runs of a suite; :meth:`Runtime.session` sets them up for one run and hands out its
:class:`~fedclock.actors.session.Session`, the clock's backend.

The ``inline`` backend runs the same executor and server classes in this process, with the
same seeds and thread counts, so it gives the same numbers. It pays no Ray start-up (5-7 s
on a 2-core machine) and no per-call cost, so on one small machine it is also the fastest
way to run a scenario (``benchmarks/RESULTS.md``, "End to end"); Ray runs the executors in
parallel processes and across a cluster.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Sequence

import torch

from fedclock.actors.calls import ActorCalls
from fedclock.actors.client_states import ClientStates
from fedclock.actors.evaluation import Evaluation
from fedclock.actors.executor import ClientExecutor
from fedclock.actors.federation import Federation
from fedclock.actors.held_object import HeldObject
from fedclock.actors.launcher import make_launcher
from fedclock.actors.payloads import PayloadCache
from fedclock.actors.ray_actors import RayClientExecutor, RayServer
from fedclock.actors.ray_start import RayStart, default_num_actors, uploaded_py_modules
from fedclock.actors.runtime_config import RuntimeConfig
from fedclock.actors.server import Server
from fedclock.actors.session import AlgorithmTraits, Session
from fedclock.actors.respawn import fitted_count, wait_started
from fedclock.actors.transport import InlineTransport, RayTransport, Transport
from fedclock.algorithms.adapted import AdaptedEvaluation
from fedclock.algorithms.base import Algorithm


class ResourceError(Exception):
    """The runtime settings ask for more than the cluster has (a user's mistake, one line)."""


class Runtime:
    """Starts Ray when needed and keeps the actors of one resource shape across runs.

    Ray starts in a background thread (:class:`~fedclock.actors.ray_start.RayStart`, or the
    one given as ``ray_start``, started earlier by the caller), so that the caller can load
    the first run's data meanwhile; with ``prestart`` (the first run's runtime settings and
    number of clients) a second thread then creates that run's executors and server actor,
    whose processes boot (import PyTorch, ...) while the data still load. Every method that
    needs Ray waits for that thread first and raises what it raised."""

    def __init__(self, backend: str = "ray", address: str | None = None,
                 prestart: tuple[RuntimeConfig, int] | None = None, py_modules: Sequence[str] = (),
                 ray_start: RayStart | None = None) -> None:
        self.backend = backend
        self.address = address
        self.py_modules = sorted(set(py_modules))
        """A user's own modules (files or package folders) that Ray ships to every node, so
        the classes in them unpickle there (:mod:`fedclock.scenarios.plugins`)."""
        self.runtime_env: dict[str, Any] = {}
        """Ray's ``runtime_env`` of every actor this runtime starts: the user's modules,
        uploaded once to the cluster (whoever started Ray)."""
        self._pool: list[Any] = []
        self._pool_shape: tuple[float, float, int] | None = None
        self._server: Any = None
        self._ray: RayStart | None = None
        """Ray starting or started (and shut down by :meth:`close` if it started it)."""
        self._starting: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        if ray_start is not None and (backend != "ray" or ray_start.address != address):
            ray_start.close()  # started for another backend or cluster: not this runtime's
            ray_start = None
        if backend == "ray":
            self.transport: Transport = RayTransport()
            if threading.current_thread() is threading.main_thread() and \
                    signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                # what ray.init does when called from the main thread: SIGTERM exits (so Ray shuts down)
                signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
            self._ray = ray_start if ray_start is not None else RayStart(address)
            self._starting = threading.Thread(target=self._start, args=(prestart,), name="fedclock-ray-actors",
                                              daemon=True)
            self._starting.start()
        else:
            self.transport = InlineTransport()
        self._federation = HeldObject(self.transport)
        self.on_note: Callable[[str], None] | None = None  # told what Ray's start ended of a killed run's

    def _start(self, prestart: tuple[RuntimeConfig, int] | None) -> None:
        """The background thread: wait for Ray, then start the first run's actors (if
        ``prestart`` is given and they fit the cluster; otherwise :meth:`session` says why not)."""
        try:
            assert self._ray is not None
            self._ray.wait()
            if self.py_modules:
                self.runtime_env = {"py_modules": uploaded_py_modules(self.py_modules)}
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

    def _ready(self) -> None:
        """Wait until Ray (and the prestarted actors) are started; raise what starting raised."""
        if self._starting is None:
            return
        self._started.wait()
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error

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

        return ray.remote(RayClientExecutor).options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus,
                                                     runtime_env=self.runtime_env or None).remote(cfg.threads_per_actor)

    def _respawn(self, cfg: RuntimeConfig, slot: int, setup: tuple[Any, ...], count: int) -> Any:
        """Replace the dead executor at ``slot`` of the pool by a fresh one, set up for the run
        (:class:`~fedclock.actors.calls.ActorUnplaced` if it cannot start: ``wait_started``)."""
        self._kill([self._pool[slot]])
        fresh = self._new_executor(cfg)
        try:
            wait_started(self.transport, self.transport.call(fresh, "setup", *setup), cfg, f"client executor {slot}",
                         count)
        except BaseException:
            self._kill([fresh])  # not left pending on the cluster
            raise
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
                evaluation_batch: int, personalized: bool, adapted: AdaptedEvaluation | None = None,
                fit: bool = False) -> "Session":
        """Prepare the actors for one run and return its backend (``adapted``: ``evaluation.adapted``;
        ``fit``: a run from a checkpoint, which takes as many executors as the cluster fits)."""
        self._ready()
        count = default_num_actors(cfg, federation.num_clients, self.cpus)
        if fit and self.backend == "ray" and (fitted := fitted_count(cfg, count, self.cpus, self.on_note)) != count:
            count, cfg = fitted, cfg.model_copy(update={"placement": "pooled", "num_actors": fitted})
            self._kill(self._pool[count:])  # alive or dead, they hold the room a replacement may need
            del self._pool[count:]
        if self.backend == "ray" and count * cfg.num_cpus > self.cpus + 1e-9:
            raise ResourceError(
                f"runtime.num_cpus: {count} client actors x {cfg.num_cpus:g} CPUs need "
                f"{count * cfg.num_cpus:g} CPUs, the Ray cluster has {self.cpus:g}; lower runtime.num_cpus, "
                f"runtime.num_actors, or use pooled placement")
        executors = self._executors(cfg, count)
        t = self.transport
        fed_h, alg_h = self._federation.handle(federation), t.put(algorithm)
        federation.read_from(t.get(fed_h))  # on Ray the object store's copy, mapped (inline: itself)
        setup = (fed_h, alg_h, seed, cfg.device, cfg.vectorize, cfg.task_wall_timeout_s)
        unique = list({id(e): e for e in executors}.values())
        for e, handle in [(e, t.call(e, "setup", *setup)) for e in unique]:
            try:
                t.get(handle)
            except Exception as exc:  # an actor that died since the last run is replaced
                if t.lost_actor(exc) is None:
                    raise
                slot = executors.index(e)
                executors[slot] = self._respawn(cfg, slot, setup, count)
        server = self._server_actor(cfg)
        try:
            t.get(t.call(server, "setup", alg_h, seed))
        except Exception as exc:  # a server that died in an earlier run: this run starts a fresh one
            if t.lost_actor(exc) is None:
                raise
            self._server = None
            server = self._server_actor(cfg)
            wait_started(t, t.call(server, "setup", alg_h, seed), cfg, "the server actor", count)
        placement = cfg.placement or ("dedicated" if count == federation.num_clients and cfg.vectorize == 1
                                      else "pooled")
        if self._ray is not None:  # list the actors' processes (ray_processes.remember); a note once
            self._ray.remember(self.on_note)
        calls = ActorCalls(t, server, executors, respawn=lambda slot: self._respawn(cfg, slot, setup, count))
        launcher = make_launcher(calls, cfg, placement, federation.num_clients)
        return Session(calls, launcher, ClientStates(launcher.run_now),
                       PayloadCache(t, server, algorithm.payload_is_shared),
                       Evaluation(calls, federation.num_clients, len(federation.y_test), evaluation_batch, adapted),
                       AlgorithmTraits(type(algorithm).name, algorithm.stateless_clients, algorithm.hears_failures,
                                       personalized))

    def _kill(self, actors: Sequence[Any]) -> None:
        if self.backend == "ray":
            import ray

            for a in actors:
                with contextlib.suppress(ValueError):  # already gone
                    ray.kill(a)

    def close(self) -> None:
        """Stop the actors, and Ray if this runtime started it."""
        with contextlib.suppress(Exception):  # Ray did not start: nothing to stop but what did
            self._ready()
        self._kill(self._pool + ([self._server] if self._server is not None else []))
        self._pool, self._server, self._pool_shape = [], None, None
        self._federation.release()
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._ray is not None:
            self._ray.close()
            self._ray = None
