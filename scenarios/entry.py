"""The ``fedclock`` console script: starts Ray before the command imports PyTorch.

Importing the command (:mod:`fedclock.scenarios.cli`: PyTorch, pydantic, the algorithms)
takes 1.5 s of a cold run on 2 cores, and Ray's start takes about as long, most of it
waiting for Ray's own processes (``benchmarks/RESULTS.md``, "Ray start-up"). So when the
command line certainly asks for a run on the Ray backend, this module starts Ray in the
background first (:class:`~fedclock.actors.ray_start.RayStart`, which imports neither), and
the run's runtime adopts it. "Certainly" is read from the command line and the file's YAML
alone (:func:`ray_address`); where that is unsure (``--resume``, ``--jobs``, a file this
cannot read), Ray starts as before, once the file is loaded. A start that the run does not
use is shut down, so a wrong guess costs time, never a result.

``python -m fedclock.scenarios.cli`` runs the same command without the early start.

Once the command has returned (results written, Ray shut down), the console script ends the
process at once (:func:`exit_now`) instead of letting the interpreter tear down every module
it imported: with PyTorch and Ray loaded that teardown took 0.6-0.9 CPU s and 1-5 s of wall
time on the shared 2-core machine (``benchmarks/RESULTS.md``, "Ray start-up, third pass"),
after the user's results were final.
"""
from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn, Sequence

import yaml

from fedclock.actors.ray_start import RayStart
from fedclock.scenarios.grid_workers import start_early
from fedclock.scenarios.scenario_paths import find_scenario


class _Unsure(Exception):
    """The command line does not say for sure that it runs on Ray."""


class _EarlyParser(argparse.ArgumentParser):
    """A parser of the flags the console script reads before the command runs; a line it
    cannot parse is unsure (the command's own parser says what is wrong), not a usage printed."""

    def error(self, message: str) -> NoReturn:
        raise _Unsure(message)


def _early_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command, file and the flags :func:`ray_address` and :func:`asks_for_workers` read
    from ``fedclock ARGV`` (others are left to the command); :class:`_Unsure` where unparsable."""
    parser = _EarlyParser(add_help=False)
    parser.add_argument("command")
    parser.add_argument("file", nargs="?")
    parser.add_argument("--backend")
    parser.add_argument("--address")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--resume")
    parser.add_argument("--jobs")
    parser.add_argument("--unfinished", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    return parser.parse_known_args(list(argv))[0]


def ray_address(argv: Sequence[str]) -> tuple[bool, str | None]:
    """Whether ``fedclock ARGV`` is certainly one ``run`` of a file on the Ray backend
    (not ``--resume``, ``--jobs``, ``--unfinished`` or ``--help``), and the cluster address it
    names (None: a local Ray). Read from ``--backend``, ``--address``, ``--set
    runtime.backend=...``/``runtime.address=...`` and the file's ``runtime`` sections (its
    top level and each of its ``runs``); a file that is not a readable YAML path is unsure."""
    try:
        args = _early_args(argv)
        if args.command != "run" or args.file is None or args.resume or args.jobs not in (None, "1") \
                or args.unfinished or args.help:
            raise _Unsure
        return _from_file(_scenario_path(args.file), args.backend, args.address, args.overrides)
    except (_Unsure, OSError, ValueError, yaml.YAMLError):
        return False, None


def asks_for_workers(argv: Sequence[str]) -> bool:
    """Whether ``fedclock ARGV`` is a ``run`` (not ``--resume``) with ``--jobs`` other than 1
    (``auto`` or a number): then the grid's worker server starts early
    (:func:`fedclock.scenarios.grid_workers.start_early`)."""
    try:
        args = _early_args(argv)
    except _Unsure:
        return False
    return args.command == "run" and not args.resume and args.jobs not in (None, "1")


def _scenario_path(arg: str) -> Path:
    """The file ``fedclock run ARG`` reads (:func:`~fedclock.scenarios.scenario_paths.find_scenario`)."""
    path = find_scenario(arg)
    if path is None:
        raise _Unsure
    return path


def _from_file(path: Path, backend: str | None, address: str | None, overrides: list[str]) -> tuple[bool, str | None]:
    """The backend and address of every run of the YAML file at ``path`` (see :func:`ray_address`)."""
    settings: dict[str, Any] = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if key.strip() in ("runtime.backend", "runtime.address"):
            settings[key.strip().split(".")[1]] = yaml.safe_load(value)
        elif key.strip().startswith(("runs", "runtime")):  # another runtime key, or a run's: not read here
            raise _Unsure
    if address is not None:
        settings["address"] = address
    if backend is not None:
        settings["backend"] = backend
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise _Unsure
    runs = data.get("runs") or [{}]
    if not isinstance(runs, list):
        raise _Unsure
    seen = set()
    for run in runs:
        sections = [s.get("runtime") or {} for s in (data, run) if isinstance(s, dict)]
        if not all(isinstance(s, dict) for s in sections):
            raise _Unsure
        merged = {k: v for s in sections for k, v in s.items()} | settings
        seen.add((merged.get("backend", "ray"), merged.get("address")))
    if len(seen) != 1:
        raise _Unsure
    (found_backend, found_address), = seen
    if found_backend != "ray" or not (found_address is None or isinstance(found_address, str)):
        raise _Unsure
    return True, found_address


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script (see the module's docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    on_ray, address = ray_address(args)
    ray_start = RayStart(address) if on_ray else None
    if asks_for_workers(args):  # the grid's worker server imports while this process does (scenarios/grid_workers.py)
        start_early()
    try:
        from fedclock.scenarios import cli

        return cli.main(args, ray_start=ray_start)
    finally:
        if ray_start is not None:
            ray_start.close()


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` as the interpreter would, less its teardown of modules:
    the exit handlers run (``atexit``: Ray's, logging's, temporary folders'), the standard
    streams are flushed, then ``os._exit``. A thread other than daemons still running is
    waited for the ordinary way (``sys.exit``)."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``| head``) or a closed stream: nothing left to say
            pass
    os._exit(code)


def console() -> NoReturn:
    """The ``fedclock`` console script: :func:`main`, then :func:`exit_now`."""
    exit_now(main())


if __name__ == "__main__":
    console()
