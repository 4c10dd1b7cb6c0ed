"""How a run starts Ray, or joins a cluster: no dashboard, and a local run on loopback only.

A local run (no ``--address``) starts its own Ray, and Ray's servers (the GCS, the raylet,
the object manager, every worker's RPC server, the runtime-env agent) listen on the node's
address. On Linux Ray takes the machine's outward address as the node address, so those
ports would be open to the network, and whoever reaches them can run code in the run's
processes. On macOS and Windows Ray instead takes 127.0.0.1, and then every one of those
servers listens on loopback only; the environment variable
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's ``ray_constants.ENABLE_RAY_CLUSTER``) selects
that behaviour on any platform. Ray reads it once, when it is first imported, and passes the
environment on to the processes it starts, so :func:`start_ray` sets it while Ray is imported
and started (and, when this process imported Ray earlier, sets the value Ray read from it),
then puts both back. After the start it checks the node address Ray chose and refuses to go
on with anything but loopback.
tests/actors/test_ray_init.py runs a local run in a child process and checks every socket its
processes listen on.

With ``address`` the run joins an existing cluster, whose nodes listen where they were
started; README.md ("Faults and clusters") says how to keep such a cluster private.
"""
from __future__ import annotations

import ipaddress
import os
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from fedclock.actors.ray_processes import children, end, end_leftovers, forget, remember, with_descendants

if TYPE_CHECKING:  # imported for annotations only: this module stays light (see RayStart)
    from fedclock.actors.runtime_config import RuntimeConfig

LOCAL_ONLY_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch between a cluster-ready node address ("1") and loopback ("0")."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address, possibly IPv4-mapped IPv6) is a loopback address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def start_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Start a local Ray on loopback (``address`` None; ``num_cpus`` default all of the
    machine's) or connect to the cluster at ``address``; nothing when Ray is already
    initialized in this process. Returns whether this call started or connected Ray (then
    the caller shuts it down)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # no dashboard, and were one enabled it would listen on loopback only (Ray's default, made explicit)
    kwargs: dict[str, Any] = {"include_dashboard": False, "dashboard_host": "127.0.0.1",
                              "logging_level": "ERROR", "configure_logging": True}
    if address is not None:
        import ray

        if ray.is_initialized():
            return False
        ray.init(address=address, **kwargs)
        return True
    with _loopback_node():
        import ray

        if ray.is_initialized():
            return False
        with _without_idle_daemons():
            ray.init(num_cpus=num_cpus, **kwargs)
    node = ray.util.get_node_ip_address()
    if not is_loopback(node):
        ray.shutdown()
        raise RuntimeError(f"runtime: the local Ray took node address {node}, not loopback; set "
                           f"{LOCAL_ONLY_VARIABLE}=0 before Python imports ray, or run on a cluster with --address")
    return True


class RayStart:
    """:func:`start_ray` in a background thread, which then lives until :meth:`close`: Ray's
    daemons are started with a parent-death signal, which Linux sends when the *thread* that
    started them ends (a first version that let the thread end lost its GCS 60 s later).

    Starting Ray takes seconds, most of them spent waiting for Ray's own processes to come up
    (``benchmarks/RESULTS.md``, "Ray start-up"), so a caller starts it first and does its own
    work meanwhile: :class:`~fedclock.actors.runtime.Runtime` loads the first run's data, and
    the ``fedclock`` command (:mod:`fedclock.scenarios.entry`) starts it before it even imports
    PyTorch. This module imports neither PyTorch nor pydantic for that reason."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._started_ray = False
        self._daemons: list[Any] = []
        """The processes the local Ray start began (GCS, raylet, log monitor, ...)."""
        self.note: str | None = None
        """What the start ended of a killed run's Ray (:func:`fedclock.actors.ray_processes.end_leftovers`)."""
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._release = threading.Event()
        self._thread: threading.Thread | None = threading.Thread(target=self._run, name="fedclock-ray-start",
                                                                 daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self.address is None:
                self.note = end_leftovers()  # what a killed run's Ray left: it would compete with this one
            before = {p.pid for p in children()} if self.address is None else set()
            self._started_ray = start_ray(self.address)
            if self._started_ray and self.address is None:  # the daemons this start began: ended by close()
                self._daemons = [p for p in children() if p.pid not in before]
                self.remember()
        except BaseException as exc:  # handed to the caller by wait()
            self._error = exc
        self._done.set()
        self._release.wait()

    def wait(self) -> None:
        """Wait until Ray runs; raise what starting it raised (once)."""
        self._done.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def remember(self, on_note: Callable[[str], None] | None = None) -> None:
        """List the local Ray's processes as they are now (:func:`fedclock.actors.ray_processes.remember`;
        called again once the actors run, whose processes the raylet started since), and hand
        ``on_note`` what the start ended of a killed run's Ray (once)."""
        if on_note is not None and self.note is not None:
            note, self.note = self.note, None
            on_note(note)
        if self._started_ray and self.address is None and self._done.is_set():
            try:
                remember(self._daemons)
            except OSError:  # no writable temporary folder: nothing to hand on
                pass

    def close(self) -> None:
        """Shut down the Ray this started (none when Ray ran already, or it failed to start)
        and end the thread; a second call does nothing. A local Ray's processes (those its
        start began, and their descendants: workers, agents) are gone when this returns
        (:func:`fedclock.actors.ray_processes.end`), so that a command that exits at once leaves none behind."""
        if self._thread is None:
            return
        self._done.wait()
        if self._started_ray:
            import ray

            started = with_descendants(self._daemons)
            ray.shutdown()
            end(started)
            forget()
            self._started_ray = False
        self._release.set()
        self._thread.join()
        self._thread = None


@contextmanager
def _loopback_node() -> Iterator[None]:
    """Ray's loopback switch on while Ray starts (its processes keep the environment they
    were started with); afterwards this process's environment and Ray's flag are as they
    would be without it."""
    before = os.environ.get(LOCAL_ONLY_VARIABLE)
    os.environ[LOCAL_ONLY_VARIABLE] = "0"
    constants: Any = sys.modules.get("ray._private.ray_constants")  # a module with attributes Ray reads at start
    if constants is not None:  # Ray was imported earlier and has read the variable already
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LOCAL_ONLY_VARIABLE, None)
        else:
            os.environ[LOCAL_ONLY_VARIABLE] = before
        constants = sys.modules.get("ray._private.ray_constants")
        if constants is not None:  # the value Ray reads from the environment as it is again
            constants.ENABLE_RAY_CLUSTER = constants.env_bool(LOCAL_ONLY_VARIABLE, not constants.IS_WINDOWS_OR_OSX)


IDLE_DAEMONS = ("start_monitor", "start_api_server")
"""The methods of Ray's ``ray._private.node.Node`` that start the head's daemons a local run
never uses: the autoscaler's monitor (nothing to scale on one machine) and the API server
(with ``include_dashboard=False`` Ray still starts it, with only its usage-statistics module,
and usage statistics are off). Together about 2 CPU s of a cold run on 2 cores, and
``ray.init`` waits for the API server to register before it starts the raylet
(``benchmarks/RESULTS.md``, "Ray start-up, third pass").

Ray offers no public switch for either (``ray start --no-monitor`` exists only on its command
line; the API server has none), so :func:`_without_idle_daemons` replaces these two methods of
a private class while ``ray.init`` runs: tested against the pinned Ray
(tests/actors/test_ray_init.py lists the processes of a local run); a Ray without them is
started in full, as before. The log monitor stays: it carries what the actors print (a
user's plugin) to the terminal."""


@contextmanager
def _without_idle_daemons() -> Iterator[None]:
    """Ray's head node started without :data:`IDLE_DAEMONS` (their methods do nothing while
    this lasts; put back afterwards)."""
    try:
        from ray._private.node import Node
    except ImportError:  # a Ray without this private module: started in full
        yield
        return
    saved = {name: Node.__dict__[name] for name in IDLE_DAEMONS if name in Node.__dict__}
    for name in saved:
        setattr(Node, name, _skipped)
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(Node, name, method)


def _skipped(self: Any, *args: Any, **kwargs: Any) -> None:
    """A daemon not started (see :data:`IDLE_DAEMONS`)."""


def default_num_actors(cfg: RuntimeConfig, num_clients: int, cpus: float) -> int:
    """Dedicated: one per client; otherwise as many as the CPUs fit (at least one)."""
    if cfg.placement == "dedicated":
        return num_clients
    if cfg.num_actors is not None:
        return min(cfg.num_actors, num_clients)
    return max(1, min(num_clients, int(cpus // cfg.num_cpus)))


def uploaded_py_modules(paths: Sequence[str]) -> list[str]:
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
