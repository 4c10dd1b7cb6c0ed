"""How the runtime starts Ray: no dashboard, and a local run listens on loopback only."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from fedclock.actors.ray_start import RayStart, is_loopback
from fedclock.actors.runtime import Runtime
from tests.user_runs import fedasync_on_digits


@pytest.mark.parametrize("address", [None, "ray://10.0.0.5:10001"])
def test_ray_init_keeps_the_dashboard_off_and_local(monkeypatch: pytest.MonkeyPatch, address: str | None) -> None:
    import ray

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append({"shutdown": True}))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    runtime = Runtime("ray", address)  # starts Ray in the background
    runtime.close()
    kwargs, shutdown = calls
    assert kwargs["include_dashboard"] is False and kwargs["dashboard_host"] == "127.0.0.1"
    assert kwargs.get("address") == address
    assert shutdown == {"shutdown": True}


def test_a_local_ray_on_a_public_node_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append({"shutdown": True}))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "192.0.2.7")
    runtime = Runtime("ray")  # Ray starts in the background: the error comes with the first use
    with pytest.raises(RuntimeError, match="192.0.2.7, not loopback"):
        _ = runtime.cpus
    assert calls[-1] == {"shutdown": True}
    runtime.close()


def _fake_ray(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Ray's start and shutdown recorded instead of run."""
    import ray

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append({"shutdown": True}))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    return calls


def test_a_runtime_adopts_a_ray_started_earlier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``fedclock`` command starts Ray before it imports PyTorch (scenarios/entry.py); the
    run's runtime uses that start (Ray is started once) and shuts it down when it closes."""
    calls = _fake_ray(monkeypatch)
    early = RayStart(None)
    runtime = Runtime("ray", None, ray_start=early)
    runtime.close()
    early.close()  # a second close does nothing
    assert [c.get("shutdown", False) for c in calls] == [False, True]


@pytest.mark.parametrize("backend,address", [("inline", None), ("ray", "10.0.0.5:6379")])
def test_a_ray_started_for_another_runtime_is_shut_down(monkeypatch: pytest.MonkeyPatch, backend: str,
                                                        address: str | None) -> None:
    calls = _fake_ray(monkeypatch)
    early = RayStart(None)
    runtime = Runtime(backend, address, ray_start=early)
    assert calls[:2] == [calls[0], {"shutdown": True}] and calls[0].get("address") is None
    runtime.close()
    assert [c.get("address") for c in calls[2:-1]] == ([address] if backend == "ray" else [])


def test_is_loopback() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.3.0.1", "::1", "::ffff:127.0.0.1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.0.2.2", "::ffff:10.0.0.1", "fe80::1"]))


def _listening(process: psutil.Process, seen: dict[tuple[int, float], str]) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every TCP or UDP socket ``process`` and its
    descendants listen on (those that vanish while being read are skipped); each descendant
    is added to ``seen`` as (pid, creation time): command line."""
    found: set[tuple[str, str, int]] = set()
    for proc in [process, *process.children(recursive=True)]:
        try:
            seen.setdefault((proc.pid, proc.create_time()), " ".join(proc.cmdline()))
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN or (conn.type == 2 and not conn.raddr):  # 2: SOCK_DGRAM
                    found.add((name, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


def _alive(pid: int, created: float) -> bool:
    """Whether the process ``pid`` created at ``created`` still runs (not a zombie)."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_local_run_listens_on_loopback_only(tmp_path: Path) -> None:
    """``fedclock run`` without ``--address`` in a child process (the console script's module,
    which starts Ray before it imports PyTorch): every socket it and the Ray
    processes it starts (GCS, raylet, object manager, workers, agents) listen on while it runs
    is bound to loopback. The same run shows the lean start and the quick exit
    (actors/ray_start.py ``IDLE_DAEMONS``, scenarios/entry.py ``exit_now``): neither the
    autoscaler's monitor nor the API server was started, and when the command has exited no
    process it started is left."""
    file = tmp_path / "local.yaml"
    file.write_text(fedasync_on_digits("local", seed=0, num_clients=4, versions=4, every=4,
                                       runtime="{num_actors: 1, placement: pooled}", output="{progress: false}"))
    child = subprocess.Popen([sys.executable, "-m", "fedclock.scenarios.entry", "run", str(file), "--out",
                              str(tmp_path / "out"), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: set[tuple[str, str, int]] = set()
    processes: dict[tuple[int, float], str] = {}
    try:
        process = psutil.Process(child.pid)
        deadline = time.time() + 180
        while child.poll() is None and time.time() < deadline:
            seen |= _listening(process, processes)
            time.sleep(0.1)
    finally:
        if child.poll() is None:
            child.kill()
        _, err = child.communicate()
    assert child.returncode == 0, err.decode()[-3000:]
    left = [line for (pid, created), line in processes.items() if pid != child.pid and _alive(pid, created)]
    assert not left, f"left running after the command exited: {left}"
    started = " ".join(processes.values())
    assert "raylet" in started and "log_monitor.py" in started  # what a run needs is started
    assert "autoscaler/_private/monitor.py" not in started and "dashboard/dashboard.py" not in started, started
    assert {"gcs_server", "raylet"} <= {name for name, _, _ in seen}, seen  # Ray's servers were seen listening
    public = sorted(s for s in seen if not is_loopback(s[1]))
    assert not public, f"listening beyond loopback: {public}"


def test_the_idle_daemons_are_skipped_only_while_ray_starts() -> None:
    """While the local Ray starts, the head node's methods that start the autoscaler's monitor
    and the API server do nothing; afterwards they are Ray's again."""
    from ray._private.node import Node

    from fedclock.actors.ray_start import IDLE_DAEMONS, _without_idle_daemons

    methods = {name: getattr(Node, name) for name in IDLE_DAEMONS}
    with _without_idle_daemons():
        skipped = {name: getattr(Node, name) for name in IDLE_DAEMONS}
        assert all(skipped[name] is not methods[name] for name in IDLE_DAEMONS)
        assert all(method(object()) is None for method in skipped.values())  # nothing started
    assert {name: getattr(Node, name) for name in IDLE_DAEMONS} == methods
