"""Where a cold Ray run's start-up goes: whole cold processes side by side, and their timelines.

    python benchmarks/ray_startup.py --repeats 3 --spans --out startup.json
    python benchmarks/ray_startup.py --repeats 3 --spans --before-python OLD/bin/python --out startup.json
    python benchmarks/ray_startup.py --repeats 1 --spans --importtime --out startup.json
    python benchmarks/ray_startup.py --repeats 3 --daemons --out daemons.json
    python benchmarks/ray_startup.py --repeats 3 --floor --out floor.json
    python benchmarks/ray_startup.py --repeats 3 --floor --file library/benchmarks/pfl_cifar10 \
        --set dataset.generate.users=20 --set population.num_clients=20 --set mode.cohort_size=4 --out floor.json

The workload is the quickstart's FedAvg run with 4 clients and 1 round (``benchmarks/grid.py``'s
``one_round_file``): its training takes milliseconds, so the whole process is start-up.

Each repeat runs, one after the other (so that on a shared machine every side sees the same
load), ``fedclock run FILE`` as the console script runs it (``python -m
fedclock.scenarios.entry``) with ``--backend inline`` and ``--backend ray``, and with
``--before-python`` the Ray run of another checkout (an interpreter that imports it; run as
``python -m fedclock.scenarios.cli``, the console script before ``scenarios/entry.py``). Each
sample is a whole cold process: wall seconds from before it starts to its exit, CPU seconds
(user + system) of it and every descendant it waited for.

``--daemons`` measures Ray's start alone instead, as a run starts it (without the daemons
``actors/ray_start.py`` leaves out) and in full, alternately: ``ray.init``'s wall seconds and
the CPU seconds of Ray's processes by program after 4 s idle.

``--floor`` measures what no change of fedclock's can go below on this machine, beside the
1-round Ray run (alternately, cold whole processes): Ray started as a run starts it and one
trivial task on a fresh Ray worker (``ray``: no PyTorch anywhere), and the same with PyTorch
imported in the driver and in one actor that runs the task (``ray + torch``: the least a run
that trains in a Ray actor does); wall and CPU seconds as for the runs, and the time the task
returned (seconds since the process started). With ``--file`` (and its ``--set`` overrides,
``stop.rounds=1`` always added) the runs are of that scenario instead of the quickstart's, and
two more sides join each pass: ``python -c "import torch"`` (the floor of any run that trains
with PyTorch in its own process) and the same 1-round run on the inline backend; each run with
``--profile-startup``, whose line is kept with its sample.

``--spans`` adds, per repeat and Ray side, one more cold run in a child of this script that
wraps a few fedclock functions with timestamps before it runs the command (the code that runs
is the command's; only the wrappers are added): ``ray.init`` start and end, PyTorch and the
command imported, the data loaded, the actors created and set up, the first task sent, and each
actor process's creation time (read from the process through Ray's ``__ray_call__`` before the
run closes); times are seconds since this script started the child. ``--importtime`` starts the
child with ``PYTHONPROFILEIMPORTTIME=1``, which Ray's processes inherit, and lists an actor
process's slowest imports from its log file.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid import one_round_file  # a sibling benchmark script
from proctree import role_of, tree_cpu_by_pid  # a sibling benchmark script

T0_VARIABLE = "FEDCLOCK_BENCH_T0"
ENTRY = "fedclock.scenarios.entry"


def child(argv: list[str], spans_path: Path, early: bool) -> None:
    """Run the command with ``argv`` with timestamps around the start-up steps; write the
    spans. ``early``: as the console script does (:mod:`fedclock.scenarios.entry`: Ray starts
    before PyTorch is imported); otherwise as ``python -m fedclock.scenarios.cli`` (and as
    the console script did before it)."""
    t0 = float(os.environ[T0_VARIABLE])
    spans: dict[str, Any] = {"interpreter up": time.time() - t0}

    def mark(name: str) -> None:
        spans.setdefault(name, time.time() - t0)

    def wrap(owner: Any, name: str, label: str, before: bool = True) -> None:
        original = getattr(owner, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if before:
                mark(f"{label}: start")
            out = original(*args, **kwargs)
            mark(f"{label}: end")
            return out

        setattr(owner, name, wrapped)

    from fedclock.actors import ray_start

    wrap(ray_start, "start_ray", "ray.init")
    starter = None
    if early:
        from fedclock.scenarios.entry import ray_address

        on_ray, address = ray_address(argv)
        starter = ray_start.RayStart(address) if on_ray else None
    import torch  # noqa: F401

    mark("driver: torch imported")
    import fedclock.scenarios.cli as cli
    from fedclock.actors import runtime
    from fedclock.actors.calls import ActorCalls
    from fedclock.actors.payloads import PayloadCache
    from fedclock.actors.session import Session
    from fedclock.scenarios import experiment

    mark("driver: fedclock imported")
    if hasattr(runtime, "start_ray"):  # the code before RayStart imported it by name
        wrap(runtime, "start_ray", "ray.init")
    wrap(runtime.Runtime, "_executors", "executor actors created")
    wrap(runtime.Runtime, "_server_actor", "server actor created")
    wrap(runtime.Runtime, "session", "Runtime.session (actors set up)")
    wrap(experiment, "build_federation", "data loaded")
    wrap(experiment.ResultsWriter, "__init__", "results writer built")
    wrap(experiment.Clock, "__init__", "clock built")
    wrap(experiment.Clock, "run", "clock.run")
    wrap(PayloadCache, "for_client", "first payload asked")
    wrap(Session, "evaluate", "first evaluation")
    wrap(ActorCalls, "train", "first task sent", before=False)
    wrap(ActorCalls, "train_group", "first task sent", before=False)
    close = runtime.Runtime.close

    def closing(self: Any) -> None:
        mark("run done, closing")
        if self.backend == "ray" and self._pool:
            spans["actor processes created"] = sorted(_actor_times(a, t0) for a in self._pool + [self._server])
        close(self)

    runtime.Runtime.close = closing  # type: ignore[method-assign]
    try:
        code = cli.main(argv, ray_start=starter) if early else cli.main(argv)
    finally:
        if starter is not None:
            starter.close()
    mark("Ray shut down")
    spans_path.write_text(json.dumps(spans, indent=1), encoding="utf-8")
    from fedclock.scenarios import entry

    getattr(entry, "exit_now", sys.exit)(code)  # as the console script ends (code before it: sys.exit)


def _actor_times(actor: Any, t0: float) -> float:
    """When an actor's process was created (seconds since ``t0``)."""
    import ray

    def created(instance: Any) -> float:
        import psutil

        return float(psutil.Process().create_time())

    return float(ray.get(actor.__ray_call__.remote(created))) - t0


SAMPLE_S = 0.05
"""How often :func:`timed_tree` reads the process tree."""


def adopt_orphans() -> bool:
    """Make this process the one that adopts its descendants' orphans (Linux's child
    subreaper); whether that worked."""
    import ctypes

    return bool(ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER


def timed_tree(cmd: list[str], keep_stderr: bool = False) -> dict[str, Any]:
    """Run ``cmd`` to its end as a child of this process, which adopts its orphans (Linux's
    child subreaper, so a Ray process that outlives it is still seen): wall seconds to its
    exit; CPU seconds of it and each descendant, each process's last reading every
    :data:`SAMPLE_S` s (a process loses at most its last sample), summed by role
    (``driver``, ``server``, ``executors``, ``ray``: :func:`proctree.role_of`); the
    descendants alive when it exited, and how long until the last of them was gone;
    ``keep_stderr``: with the ``start-up:`` line the command printed there (``--profile-startup``)."""
    subreaper = adopt_orphans()
    cpu: dict[int, float] = {}
    roles: dict[int, str] = {}

    def sample(root: int) -> None:
        cpu.update((pid, v) for pid, v in tree_cpu_by_pid(root).items() if pid not in earlier)
        for pid in cpu:
            if roles.get(pid, "ray") == "ray":  # a Ray worker takes its actor's title once it holds the actor
                roles[pid] = "driver" if pid == root else role_of(pid, root)

    earlier = set(tree_cpu_by_pid(os.getpid()))  # this script and what an earlier sample left (not this one's)
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err) as proc:
        while proc.poll() is None:
            sample(proc.pid)
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - start
        left = [pid for pid in tree_cpu_by_pid(os.getpid()) if pid not in earlier]
        while True:  # its orphans, adopted here: sampled until they are gone
            sample(os.getpid())
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            if not set(tree_cpu_by_pid(os.getpid())) - earlier:
                break
            time.sleep(SAMPLE_S)
        gone = time.perf_counter() - start - wall
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        err.seek(0)
        profile = [line.split("start-up: ", 1)[1].strip() for line in err if "start-up: " in line]
    by_role: dict[str, float] = {}
    for pid, seconds in cpu.items():
        by_role[roles.get(pid, "ray")] = by_role.get(roles.get(pid, "ray"), 0.0) + seconds
    return {"wall_s": wall, "cpu_s": sum(by_role.values()), "cpu_s_by_role": by_role, "left_behind": len(left),
            "gone_after_s": gone if left else 0.0, "subreaper": subreaper, "load_1min": os.getloadavg()[0],
            **({"startup_profile": profile[0] if profile else None} if keep_stderr else {})}


def command(python: str, module: str, path: Path | str, backend: str, out: str,
            extra: tuple[str, ...] = ()) -> list[str]:
    """``fedclock run PATH`` of one side, as ``python -m module``; ``extra``: more flags."""
    return [python, "-m", module, "run", str(path), "--quiet", "--backend", backend, "--out", out, *extra]


def sides(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """Each side's interpreter and module: this checkout's console script (``entry``) on both
    backends, and with ``--before-python`` the code before this change on both (its ``--before-module``)."""
    out = {"inline": (sys.executable, ENTRY), "ray": (sys.executable, ENTRY)}
    if args.before_python:
        out["inline, before"] = (args.before_python, args.before_module)
        out["ray, before"] = (args.before_python, args.before_module)
    return out


def spans_run(args: argparse.Namespace, python: str, early: bool) -> dict[str, Any]:
    """One cold Ray run with the timestamps (see the module's docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = one_round_file(Path(tmp))
        out = Path(tmp) / "spans.json"
        env = dict(os.environ)
        if args.importtime:
            env["PYTHONPROFILEIMPORTTIME"] = "1"
        env[T0_VARIABLE] = repr(time.time())
        earlier = set(tree_cpu_by_pid(os.getpid()))
        start = time.perf_counter()
        done = subprocess.run([python, __file__, "--child", str(out), "early" if early else "late",
                               "run", str(path), "--quiet", "--backend", "ray", "--out", str(Path(tmp) / "res")],
                              env=env, stderr=subprocess.PIPE, text=True, check=False)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        spans = json.loads(out.read_text(encoding="utf-8"))
        spans["process exit"] = wall
        spans["left behind"] = len(set(tree_cpu_by_pid(os.getpid())) - earlier)  # adopted by this script
        if args.importtime:
            spans["executor's slowest imports"] = _slowest_imports(args.top)
    return spans


def _slowest_imports(top: int) -> list[tuple[str, float]]:
    """The slowest top-level imports (cumulative seconds) of the last Ray session's first
    executor (its worker's log file)."""
    logs = Path(tempfile.gettempdir()) / "ray" / "session_latest" / "logs"
    best: list[tuple[str, float]] = []
    for err in sorted(logs.glob("worker-*.err")):
        rows = re.findall(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", err.read_text(errors="replace"))
        tops = [(name, int(cum) / 1e6) for _, cum, indent, name in rows if len(indent) <= 1]
        if sum(c for _, c in tops) > sum(c for _, c in best):
            best = tops
    return sorted(best, key=lambda r: -r[1])[:top]


def medians(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The samples of each side with the median of their wall and of their CPU seconds."""
    return {"samples": samples,
            "median_wall_s": {n: statistics.median(s["wall_s"] for s in v) for n, v in samples.items()},
            "median_cpu_s": {n: statistics.median(s["cpu_s"] for s in v) for n, v in samples.items()}}


def interleaved(args: argparse.Namespace) -> dict[str, Any]:
    """Cold whole processes, the sides alternately, ``--repeats`` each; with ``--spans`` a
    timeline of each Ray side per repeat as well."""
    adopt_orphans()  # before the first instrumented run too
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in sides(args)}
    timelines: dict[str, list[dict[str, Any]]] = {name: [] for name in sides(args) if not name.startswith("inline")}
    with tempfile.TemporaryDirectory() as folder:
        path = one_round_file(Path(folder))
        for _ in range(args.repeats):
            for name, (python, module) in sides(args).items():
                backend = "inline" if name.startswith("inline") else "ray"
                with tempfile.TemporaryDirectory() as tmp:
                    samples[name].append(timed_tree(command(python, module, path, backend, tmp)))
                if args.spans and name in timelines:
                    timelines[name].append(spans_run(args, python, early=module == ENTRY))
    figures = medians(samples)
    if args.spans:
        figures["timelines"] = timelines
        figures["median_first_task_s"] = {b: statistics.median(t["first task sent: end"] for t in v)
                                          for b, v in timelines.items()}
    return figures


def daemons_child(mode: str) -> None:
    """Start a local Ray as a run does (``lean``) or with every daemon (``full``: no
    ``IDLE_DAEMONS`` skipped), idle 4 s, print its start's wall seconds and the CPU seconds of
    this process's tree by program, shut it down."""
    from fedclock.actors import ray_start

    start = time.perf_counter()
    if mode == "full":
        ray_start.IDLE_DAEMONS = ()
    starter = ray_start.RayStart(None)
    starter.wait()
    init_s = time.perf_counter() - start
    time.sleep(4)
    by: dict[str, float] = {}
    for pid, seconds in tree_cpu_by_pid(os.getpid()).items():
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in line if w and not w.startswith(b"-")]
        name = "driver" if pid == os.getpid() else next(
            (Path(w).name for w in words[1:] if w.endswith(".py")), Path(words[0]).name if words else "?")
        by[name] = by.get(name, 0.0) + seconds
    starter.close()
    ray_cpu = sum(v for k, v in by.items() if k != "driver")
    sys.stdout.write(json.dumps({"mode": mode, "init_s": init_s, "ray_cpu_s": ray_cpu, "cpu_s_by_program": by,
                                 "load_1min": os.getloadavg()[0]}) + "\n")


def daemons(repeats: int) -> list[dict[str, Any]]:
    """:func:`daemons_child` in fresh processes, ``lean`` and ``full`` alternately."""
    out = []
    for _ in range(repeats):
        for mode in ("lean", "full"):
            done = subprocess.run([sys.executable, __file__, "--daemons-child", mode], capture_output=True, text=True,
                                  check=True)
            out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


class _TorchHolder:
    """The floor's actor: imports PyTorch and holds a tensor, as an executor does."""

    def __init__(self) -> None:
        import torch

        self.tensor = torch.zeros(1)

    def task(self) -> float:
        return float(self.tensor.sum())


def floor_child(kind: str, out: Path) -> None:
    """A cold process that starts Ray as a run does, sends one task (``ray``: a function
    with no import; ``ray + torch``: an actor that imports PyTorch, while this process imports
    it too) and writes when the task returned, then ends as the console script ends
    (:func:`fedclock.scenarios.entry.exit_now`)."""
    t0 = float(os.environ[T0_VARIABLE])
    from fedclock.actors.ray_start import RayStart

    starter = RayStart(None)
    if kind == "ray + torch":
        import torch  # noqa: F401  (the driver's PyTorch, imported while Ray starts, as a run does)
    starter.wait()
    import ray

    if kind == "ray + torch":
        holder = ray.remote(_TorchHolder).remote()
        ray.get(holder.task.remote())
        ray.kill(holder)  # as the run's close does (actors/runtime.py)
    else:
        ray.get(ray.remote(lambda: 0.0).remote())
    done = time.time() - t0
    out.write_text(json.dumps({"first task returned": done}), encoding="utf-8")
    starter.close()
    from fedclock.scenarios.entry import exit_now

    exit_now(0)


def floor(repeats: int, file: str | None = None, overrides: tuple[str, ...] = (),
          before_path: str | None = None) -> dict[str, Any]:
    """The ``--floor`` comparison (module docstring): per repeat a Ray run, then the two floors;
    with ``file`` (a scenario path or library name, ``overrides`` its ``--set`` values) that
    scenario's 1-round run on Ray and inline, ``import torch`` and the two Ray floors; with
    ``before_path`` (a folder holding another checkout's ``fedclock`` package, put first on
    ``PYTHONPATH``) that code's two runs too, each beside this code's."""
    adopt_orphans()
    names: tuple[str, ...] = ("fedclock run, ray", "ray", "ray + torch")
    if file is not None:
        names = ("import torch", "fedclock run, inline", *names)
    if file is not None and before_path is not None:
        names = ("import torch", "fedclock run, inline", "fedclock run, inline, before", "fedclock run, ray",
                 "fedclock run, ray, before", "ray", "ray + torch")
    extra = tuple(a for o in (*overrides, "stop.rounds=1") for a in ("--set", o))
    extra += ("--profile-startup",) if file is not None else ()
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        path: Path | str = file if file is not None else one_round_file(Path(folder))
        for _ in range(repeats):
            for name in names:
                with tempfile.TemporaryDirectory() as tmp:
                    if name.startswith("fedclock run"):
                        backend = name.split(", ")[1]
                        cmd = command(sys.executable, ENTRY, path, backend, tmp, extra if file is not None else ())
                        if name.endswith(", before"):
                            cmd = ["env", f"PYTHONPATH={before_path}", *cmd]
                        samples[name].append(timed_tree(cmd, keep_stderr=file is not None))
                        continue
                    if name == "import torch":
                        samples[name].append(timed_tree([sys.executable, "-c", "import torch"]))
                        continue
                    os.environ[T0_VARIABLE] = repr(time.time())
                    out = Path(tmp) / "floor.json"
                    sample = timed_tree([sys.executable, __file__, "--floor-child", name, str(out)])
                    samples[name].append(sample | json.loads(out.read_text(encoding="utf-8")))
    figures = medians(samples)
    figures["median_first_task_s"] = {n: statistics.median(s["first task returned"] for s in v)
                                      for n, v in samples.items() if v and "first task returned" in v[0]}
    if file is not None:
        figures["file"] = {"path": str(file), "overrides": [*overrides, "stop.rounds=1"]}
    return figures


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[3:], Path(argv[1]), argv[2] == "early")
    if argv[:1] == ["--floor-child"]:
        floor_child(argv[1], Path(argv[2]))
    if argv[:1] == ["--daemons-child"]:
        daemons_child(argv[1])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spans", action="store_true", help="also one instrumented Ray run's timeline per repeat")
    parser.add_argument("--before-python", default=None,
                        help="an interpreter that imports the code to compare with (run as fedclock.scenarios.cli)")
    parser.add_argument("--before-module", default="fedclock.scenarios.cli",
                        help="the module --before-python runs (fedclock.scenarios.entry: with the early start)")
    parser.add_argument("--importtime", action="store_true", help="with --spans: the executor's slowest imports")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--daemons", action="store_true",
                        help="instead: Ray's own processes started as a run starts them and in full, alternately")
    parser.add_argument("--floor", action="store_true",
                        help="instead: the 1-round Ray run beside Ray alone and Ray with PyTorch in one actor")
    parser.add_argument("--file", default=None,
                        help="with --floor: this scenario's 1-round runs, inline and Ray, beside import torch")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="with --file: its --set values")
    parser.add_argument("--before-path", default=None,
                        help="with --file: also the runs of the fedclock package in this folder (first on PYTHONPATH)")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    figures: dict[str, Any]
    if args.daemons:
        figures = {"daemons": daemons(args.repeats)}
    else:
        figures = (floor(args.repeats, args.file, tuple(args.overrides), args.before_path) if args.floor
                   else interleaved(args))
    figures["load_average"] = {"before": load, "after": os.getloadavg()}
    text = json.dumps(figures, indent=1)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
