"""Clusters: ``fedclock run FILE --address ADDR`` on a real two-node Ray cluster started on
this machine gives the same metrics and events as the local inline run.

Both tests read one ``fedclock run`` of one file holding both their runs (the module fixture
``cluster_runs``): one driver start, one connection and one set of actors (the runtime's pool
serves both runs), where each test had started its own (about 15 s each on two cores)."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
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


@pytest.fixture(scope="module")  # one cluster for both tests: its start is ~11 s
def two_node_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    temp = tempfile.mkdtemp(prefix="fcray")  # short: Ray's socket paths must stay under 108 characters
    token = Path(temp) / "token"  # the cluster's own token, whatever ~/.ray holds
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts", "start", "--disable-usage-stats",
               "--node-ip-address=127.0.0.1", "--num-cpus=1", f"--temp-dir={temp}"]
    gcs, client, dashboard, agent1, agent2 = _free_ports(5)
    try:
        subprocess.run(ray_cli + ["--head", f"--port={gcs}", "--include-dashboard=false",
                                  f"--ray-client-server-port={client}", f"--dashboard-port={dashboard}",
                                  f"--dashboard-agent-listen-port={agent1}"],
                       env=env, check=True, capture_output=True, timeout=120)
        subprocess.run(ray_cli + [f"--address=127.0.0.1:{gcs}", f"--dashboard-agent-listen-port={agent2}"],
                       env=env, check=True, capture_output=True, timeout=120)
        yield f"127.0.0.1:{gcs}", env
    finally:
        _stop(temp)
        shutil.rmtree(temp, ignore_errors=True)
        assert not _processes_under(temp), "the test cluster's processes outlived it"


@pytest.fixture(scope="module")
def cluster_runs(two_node_cluster: tuple[str, dict[str, str]],
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    """One ``fedclock run FILE --address ADDR`` of a file with both tests' runs: ``fedasync``
    (:data:`SCENARIO`, built-in parts only) and ``personal_head`` (the personalized example's
    own algorithm, model and dataset, files beside the scenario, for 3 rounds). Returns the
    file's folder (results under ``cluster/RUN``) and the nodes of each run's executors."""
    address, env = two_node_cluster
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
        two_node_cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """The executor process on the cluster's worker node is SIGKILLed with tasks in flight (after
    the server's third version): the runtime starts a fresh one, re-issues the lost tasks with
    the same inputs, and the run ends with the tables of the undisturbed local run, bit for bit."""
    address, env = two_node_cluster
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
