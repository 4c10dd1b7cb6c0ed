"""Clusters: ``fedclock run FILE --address ADDR`` on a real two-node Ray cluster started on
this machine gives the same metrics and events as the local inline run.

Both tests read one ``fedclock run`` of one file holding both their runs (the module fixture
``cluster_runs``): one driver start, one connection and one set of actors (the runtime's pool
serves both runs), where each test had started its own (about 15 s each on two cores)."""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pytest
import yaml

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite
from tests.user_runs import fedasync_on_digits

SCENARIO = fedasync_on_digits("cluster", seed=3, num_clients=4, versions=8, every=4,
                              runtime="{num_actors: 2, placement: pooled, num_cpus: 1}", output="{progress: false}")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "personal_head"

# the CLI as a user runs it, plus a note of the nodes each run's client executors landed on
DRIVER = textwrap.dedent("""\
    import json, sys
    import ray
    from fedclock.actors import runtime
    from fedclock.scenarios import cli

    nodes = []
    make = runtime.Runtime.session

    def session(self, *args, **kwargs):
        s = make(self, *args, **kwargs)
        where = lambda actor: ray.get_runtime_context().get_node_id()
        nodes.append(ray.get([e.__ray_call__.remote(where) for e in s.executors]))
        return s

    runtime.Runtime.session = session
    code = cli.main(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump(nodes, f)
    sys.exit(code)
""")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _processes_under(marker: str) -> list[int]:
    """Pids of the processes whose command line names ``marker`` (the cluster's temp dir), and
    of their descendants (Ray's workers and agents rename themselves ``ray::…``)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except (OSError, ValueError, IndexError):
                continue
            if state != "Z":  # a zombie is already gone
                table[int(entry.name)] = (int(ppid), cmd)
    found = {pid for pid, (_, cmd) in table.items() if marker in cmd and pid != os.getpid()}
    while True:
        more = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
        if not more:
            return sorted(found)
        found |= more


def _stop(marker: str) -> None:
    """Stop exactly the cluster's processes, by pid (``ray stop`` would stop every Ray on the machine)."""
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        for pid in _processes_under(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline and _processes_under(marker):
            time.sleep(0.2)


def _ray_start(env: dict[str, str]) -> list[str]:
    """``ray start`` for a node of the test cluster (its temp dir holds the cluster's token)."""
    return [sys.executable, "-m", "ray.scripts.scripts", "start", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", "--num-cpus=1", f"--temp-dir={Path(env['RAY_AUTH_TOKEN_PATH']).parent}"]


def _join_worker(address: str, env: dict[str, str]) -> None:
    """A worker node (one CPU) joins the test cluster at ``address``."""
    (agent,) = _free_ports(1)
    subprocess.run(_ray_start(env) + [f"--address={address}", f"--dashboard-agent-listen-port={agent}"],
                   env=env, check=True, capture_output=True, timeout=120)


@dataclass
class LoopbackCluster:
    """The module's loopback cluster: its address, the environment that reaches it, and how
    many worker nodes (one CPU each, beside the head's one) are alive now. A test that loses a
    node says so (:meth:`lost_a_worker`); a test that needs two nodes asks for them
    (:meth:`two_nodes`), so no test depends on which ran before it."""

    address: str
    env: dict[str, str]
    workers: int = 0

    def two_nodes(self) -> tuple[str, dict[str, str]]:
        """The address and environment, with exactly one worker node beside the head."""
        assert self.workers <= 1, self.workers
        if self.workers == 0:
            _join_worker(self.address, self.env)
            self.workers = 1
        return self.address, self.env

    def lost_a_worker(self) -> None:
        self.workers -= 1


@pytest.fixture(scope="module")  # one cluster for every test: its start is ~11 s
def two_node_cluster() -> Iterator[LoopbackCluster]:
    temp = tempfile.mkdtemp(prefix="fcray")  # short: Ray's socket paths must stay under 108 characters
    token = Path(temp) / "token"  # the cluster's own token, whatever ~/.ray holds
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}  # a lost node seen in ~3 s
    ray_cli = _ray_start(env)
    gcs, client, dashboard, agent1 = _free_ports(4)
    try:
        subprocess.run(ray_cli + ["--head", f"--port={gcs}", "--include-dashboard=false",
                                  f"--ray-client-server-port={client}", f"--dashboard-port={dashboard}",
                                  f"--dashboard-agent-listen-port={agent1}"],
                       env=env, check=True, capture_output=True, timeout=120)
        cluster = LoopbackCluster(f"127.0.0.1:{gcs}", env)
        cluster.two_nodes()
        yield cluster
    finally:
        _stop(temp)
        shutil.rmtree(temp, ignore_errors=True)
        assert not _processes_under(temp), "the test cluster's processes outlived it"


@pytest.fixture(scope="module")
def cluster_runs(two_node_cluster: LoopbackCluster,
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    """One ``fedclock run FILE --address ADDR`` of a file with both tests' runs: ``fedasync``
    (:data:`SCENARIO`, built-in parts only) and ``personal_head`` (the personalized example's
    own algorithm, model and dataset, files beside the scenario, for 3 rounds). Returns the
    file's folder (results under ``cluster/RUN``) and the nodes of each run's executors."""
    address, env = two_node_cluster.two_nodes()
    folder = tmp_path_factory.mktemp("cluster")
    for name in ("personal_head.py", "tiny_models.py", "digit_clients.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    fedasync = {**yaml.safe_load(SCENARIO), "name": "fedasync"}
    example: dict[str, Any] = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text())
    example = {**example, "stop": {"rounds": 3}, "runtime": {**example["runtime"], "num_cpus": 1}}
    file = folder / "scenario.yaml"
    file.write_text(yaml.safe_dump({"name": "cluster", "runs": [fedasync, example]}, sort_keys=False))
    nodes_file = folder / "nodes.json"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(nodes_file), "run", str(file), "--address", address,
                           "--out", str(folder / "cluster"), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=folder.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    nodes = json.loads(nodes_file.read_text())
    assert len(nodes) == 2
    return folder, {"fedasync": nodes[0], "personal_head": nodes[1]}


def run_locally(folder: Path, name: str) -> Path:
    """The run ``name`` of the cluster file, run inline in this process; its results folder."""
    (run,) = [r for r in load_suite(folder / "scenario.yaml", ["runtime.backend=inline"]).runs if r.name == name]
    run_scenario(run, Runtime("inline"), folder / "local" / name)
    return folder / "local" / name


@pytest.mark.slow
def test_a_run_on_a_two_node_cluster_matches_the_local_run(cluster_runs: tuple[Path, dict[str, list[str]]]) -> None:
    folder, nodes = cluster_runs
    assert len(nodes["fedasync"]) == 2 and len(set(nodes["fedasync"])) == 2  # one executor on each node
    assert_same_tables(folder / "cluster" / "fedasync", run_locally(folder, "fedasync"))


@pytest.mark.slow
def test_a_users_own_modules_travel_to_the_cluster(cluster_runs: tuple[Path, dict[str, list[str]]]) -> None:
    """The personalized example's algorithm, model and dataset (files beside the scenario)
    run on both nodes, shipped by Ray's runtime_env: the same numbers as the local run."""
    folder, nodes = cluster_runs
    assert len(nodes["personal_head"]) == 2 and len(set(nodes["personal_head"])) == 2  # one executor on each node
    assert_same_tables(folder / "cluster" / "personal_head", run_locally(folder, "personal_head"))


def assert_same_tables(cluster: Path, local: Path) -> None:
    """The cluster run's metrics and events equal the local run's, exactly (wall time aside)."""
    for name in ("metrics", "events"):
        a = pd.read_parquet(cluster / f"{name}.parquet")
        b = pd.read_parquet(local / f"{name}.parquet")
        if name == "metrics":
            a, b = a.drop(columns=["wall_time"]), b.drop(columns=["wall_time"])
        assert len(a) > 0
        pd.testing.assert_frame_equal(a, b, check_exact=True)


KILLER = textwrap.dedent("""\
    import json, os, signal, sys
    import ray
    from fedclock.actors.session import Session
    from fedclock.scenarios import cli

    killed = []
    apply = Session.apply

    def where(actor):
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def applying(self, tasks):
        version = apply(self, tasks)
        if version == 3 and not killed:  # SIGKILL the executor process on the node the driver is not on
            head = ray.get_runtime_context().get_node_id()
            found = ray.get([e.__ray_call__.remote(where) for e in self.executors])
            node, pid = next((n, p) for n, p in found if n != head)
            os.kill(pid, signal.SIGKILL)
            killed.append([node, pid, len({n for n, _ in found}), self])
        return version

    Session.apply = applying
    code = cli.main(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump([k[:3] + [k[3].respawns] for k in killed], f)
    sys.exit(code)
""")


@pytest.mark.slow
def test_an_executor_killed_on_the_worker_node_is_replaced_with_the_local_results(
        two_node_cluster: LoopbackCluster, tmp_path: Path) -> None:
    """The executor process on the cluster's worker node is SIGKILLed with tasks in flight (after
    the server's third version): the runtime starts a fresh one, re-issues the lost tasks with
    the same inputs, and the run ends with the tables of the undisturbed local run, bit for bit."""
    address, env = two_node_cluster.two_nodes()
    file = tmp_path / "scenario.yaml"
    file.write_text(yaml.safe_dump({**yaml.safe_load(SCENARIO), "name": "killed"}, sort_keys=False))
    report = tmp_path / "killed.json"
    done = subprocess.run([sys.executable, "-c", KILLER, str(report), "run", str(file), "--address", address,
                           "--out", str(tmp_path / "cluster"), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = json.loads(report.read_text())
    assert len(killed) == 1 and killed[0][2] == 2, killed  # one kill, with an executor on each node
    assert killed[0][3] >= 1, killed  # the runtime noticed and started a fresh executor
    events = pd.read_parquet(tmp_path / "cluster" / "events.parquet")
    assert "lost" not in set(events.status)  # re-issued, not recorded as lost
    (run,) = load_suite(file, ["runtime.backend=inline"]).runs
    run_scenario(run, Runtime("inline"), tmp_path / "local")
    assert_same_tables(tmp_path / "cluster", tmp_path / "local")


NODE_KILLER = textwrap.dedent("""\
    import json, os, signal, sys, time
    import ray
    from fedclock.actors.runtime import Runtime
    from fedclock.actors.session import Session
    from fedclock.scenarios import cli

    lost = []
    apply = Session.apply

    def node(actor):
        return ray.get_runtime_context().get_node_id()

    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().split(b"\\0")
        except OSError:
            return [b""]

    def pids_under(parent):
        table = {}
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    table[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
        found = {parent}
        while more := {p for p, pp in table.items() if pp in found} - found:
            found |= more
        return found

    def applying(self, tasks):
        version = apply(self, tasks)
        if version == 3 and not lost:  # the node the driver is not on is lost: its raylet and its workers SIGKILLed
            head = ray.get_runtime_context().get_node_id()
            gone = next(n for n in ray.get([e.__ray_call__.remote(node) for e in self.executors]) if n != head)
            (raylet,) = [int(p) for p in os.listdir("/proc") if p.isdigit() and cmdline(p)[0].endswith(b"/raylet")
                         and f"--node_id={gone}".encode() in cmdline(p)]
            for pid in pids_under(raylet):
                os.kill(pid, signal.SIGKILL)
            start = time.time()  # the run goes on once Ray has declared the node dead
            while any(n["NodeID"] == gone and n["Alive"] for n in ray.nodes()) and time.time() < start + 120:
                time.sleep(0.5)
            lost.append([gone, time.time() - start])
        return version

    def pinned_server(self, cfg):  # the first server on the driver's node ("stays") or the other one ("lost")
        if self._server is None and not lost and not pinned:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            from fedclock.actors.ray_actors import RayServer

            here = ray.get_runtime_context().get_node_id()
            there = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)
            where = NodeAffinitySchedulingStrategy(here if sys.argv[2] == "stays" else there, soft=False)
            self._server = ray.remote(RayServer).options(num_cpus=0, scheduling_strategy=where).remote(1)
            pinned.append(True)
        return server_actor(self, cfg)

    pinned = []
    server_actor = Runtime._server_actor
    Runtime._server_actor = pinned_server
    Session.apply = applying
    try:
        code = cli.main(sys.argv[3:])
    finally:
        with open(sys.argv[1], "w") as f:
            json.dump(lost, f)
    sys.exit(code)
""")


def _lose_the_worker_node(cluster: LoopbackCluster, tmp_path: Path,
                          server: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """On the cluster with one worker node beside the head, run the small scenario (two
    executors, one on each node; checkpoints every 2 versions) with ``--address``, the server
    actor on the driver's node (``server="stays"``) or on the other (``"lost"``), and lose the
    other node after the server's third version (the cluster is left with the head alone);
    returns the finished process, the results folder and the scenario file."""
    address, env = cluster.two_nodes()
    file = tmp_path / "scenario.yaml"
    file.write_text(yaml.safe_dump({**yaml.safe_load(SCENARIO), "name": "lost",
                                    "runtime": {"num_actors": 2, "placement": "pooled", "respawn_timeout_s": 10},
                                    "output": {"progress": False, "checkpoint_every": 2}}, sort_keys=False))
    report, out = tmp_path / "lost.json", tmp_path / "cluster"
    done = subprocess.run([sys.executable, "-c", NODE_KILLER, str(report), server, "run", str(file),
                           "--address", address, "--out", str(out), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lost = json.loads(report.read_text())
    if lost:
        cluster.lost_a_worker()
    assert len(lost) == 1 and lost[0][1] < 120, (lost, done.stderr[-3000:])  # the node was declared dead
    return done, out, file


def _resume(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``fedclock run --resume OUT`` as a user types it (on the cluster the run names)."""
    return subprocess.run([sys.executable, "-c", "import sys; from fedclock.scenarios import cli; "
                           "sys.exit(cli.main(sys.argv[1:]))", "run", "--resume", str(out), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=out.parent)


def _same_as_local(file: Path, out: Path) -> None:
    (run,) = load_suite(file, ["runtime.backend=inline"]).runs
    run_scenario(run, Runtime("inline"), out.parent / "local")
    assert_same_tables(out, out.parent / "local")


@pytest.mark.slow
def test_a_worker_node_lost_stops_the_run_in_one_line_and_resume_on_the_smaller_cluster_matches(
        two_node_cluster: LoopbackCluster, tmp_path: Path) -> None:
    """The worker node is lost mid-run (its raylet and workers SIGKILLed after the server's third
    version): its executor cannot be replaced (the other node's one CPU is taken), so after
    ``runtime.respawn_timeout_s`` the run stops in one line naming the lost executor and the way
    back, exit 1; ``fedclock run --resume`` on the one-node cluster left takes one executor and
    ends with the tables of the undisturbed local run, bit for bit."""
    done, out, file = _lose_the_worker_node(two_node_cluster, tmp_path, "stays")
    ours = [line for line in done.stderr.splitlines() if line.startswith("fedclock:")]
    assert done.returncode == 1 and len(ours) == 1, done.stderr[-3000:]
    assert re.fullmatch(r"fedclock: error: client executor 1 was lost and its replacement did not start within 10 s "
                        r"\(runtime.respawn_timeout_s\): the Ray cluster now has 1 node\(s\) with 1 CPUs \(0 free\), "
                        r"the run's 2 executors need 2 \(a node lost\?\); the run stopped with its checkpoints: go on "
                        rf"with fedclock run --resume {re.escape(str(out))} \(.*\)", ours[0]), ours[0]
    resumed = _resume(out, two_node_cluster.env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "goes on from its checkpoint with 1 pooled executor(s)" in resumed.stderr, resumed.stderr[-3000:]
    _same_as_local(file, out)


@pytest.mark.slow
def test_a_server_actor_lost_with_its_node_is_survived_or_resumed_with_the_local_results(
        two_node_cluster: LoopbackCluster, tmp_path: Path) -> None:
    """The node holding the server actor (and one executor) is lost mid-run: the run goes on
    from its last checkpoint on a fresh server with the executor that fits, or (when the lost
    executor is met first) stops in one line and ``--resume`` finishes it; either way the
    tables equal the local run's."""
    done, out, file = _lose_the_worker_node(two_node_cluster, tmp_path, "lost")
    ours = [line for line in done.stderr.splitlines() if line.startswith("fedclock: error:")]
    assert (done.returncode, len(ours)) in ((0, 0), (1, 1)), done.stderr[-3000:]
    if done.returncode == 1:
        assert "was lost and its replacement did not start" in ours[0], ours[0]
        assert _resume(out, two_node_cluster.env).returncode == 0
    else:  # went on from its checkpoint on a fresh server, with the one executor that fits
        assert "goes on from its checkpoint with 1 pooled executor(s)" in done.stderr, done.stderr[-3000:]
    _same_as_local(file, out)
