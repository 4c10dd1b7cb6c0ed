"""Checkpoint files: what a run needs to go on from a server version after a crash.

A checkpoint is a folder ``<run dir>/checkpoints/<version>/`` holding two files:

* ``tensors.pt`` — a flat ``{name: tensor}`` dict written with :func:`torch.save` and read
  with ``torch.load(weights_only=True)``; anything in it that is not a tensor is refused.
  Names: ``server/<key>`` (the global state's tensors), ``client/<id>/<key>`` (each client's
  kept state), ``payload/<k>/<key>`` (the payloads of the tasks running at that moment,
  each distinct payload once) and ``task/<index>/<key>`` (a running task's client state
  at its start).
* ``meta.json`` — plain JSON: the server version, the global state's ``extra``, the
  server's receive count, which clients have a kept state, the running tasks (index,
  client, payload number, whether it had a client state), the training metrics of the
  tasks applied at that moment, the row counts of the results tables, the wall time so
  far, the log of what the clock got from the backend so far (the version each ``apply``
  returned, the metrics each ``evaluate`` returned), and a fingerprint of the scenario
  (without its ``runtime`` and ``output`` sections, which do not change results).

Checkpoints are taken right after an ``apply`` that brings the server to a version that is a
multiple of ``output.checkpoint_every`` (before that version's evaluation, which the
resumed run redoes).

No clock state is stored: the clock is deterministic, so a resumed run replays it from
``t = 0`` against these logs (:mod:`fedclock.actors.replay`), which also brings back every
random generator — the clock's cohort generator by replaying its draws, training and
server draws because they are seeded by (seed, stream, client, task index) and (seed,
receive count).

A checkpoint is written to a temporary folder and renamed, so a folder named by a version is
always complete; the last :data:`KEEP` checkpoints are kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from fedclock.actors.checkpoint import Checkpoint, CheckpointError, RunningTask
from fedclock.algorithms.base import ServerState, Tensors

KEEP = 2
"""How many checkpoints a run keeps (the newest ones)."""

FORMAT = 1


def fingerprint(resolved: dict[str, Any]) -> str:
    """A hash of a resolved scenario (as in ``scenario.resolved.yaml``) without the sections
    that do not change results (``runtime``, ``output``)."""
    core = {k: v for k, v in resolved.items() if k not in ("runtime", "output")}
    return hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def _tensors(prefix: str, values: Tensors | None, what: str, out: dict[str, torch.Tensor]) -> None:
    for key, value in (values or {}).items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{what}: {key!r} is a {type(value).__name__}, not a tensor; checkpoints hold "
                                  f"tensors only")
        out[f"{prefix}/{key}"] = value.detach().cpu().clone()


def write_checkpoint(run_dir: Path, ckpt: Checkpoint, scenario_fingerprint: str) -> Path:
    """Write ``ckpt`` atomically as ``checkpoints/<version>/`` and keep only the newest
    :data:`KEEP`; returns its folder."""
    tensors: dict[str, torch.Tensor] = {}
    _tensors("server", ckpt.server.tensors, "server state", tensors)
    for c, state in ckpt.clients.items():
        _tensors(f"client/{c}", state, f"client {c}'s state", tensors)
    for k, payload in enumerate(ckpt.payloads):
        _tensors(f"payload/{k}", payload, "payload", tensors)
    for t in ckpt.tasks:
        _tensors(f"task/{t.index}", t.state, f"task {t.index}'s client state", tensors)
    meta = {
        "format": FORMAT, "fingerprint": scenario_fingerprint, "version": ckpt.version,
        "extra": ckpt.server.extra, "receives": ckpt.receives,
        "clients": [[c, s is not None] for c, s in sorted(ckpt.clients.items())],
        "payloads": len(ckpt.payloads),
        "tasks": [[t.index, t.client, t.payload, t.state is not None] for t in ckpt.tasks],
        "rows": ckpt.rows, "applies": ckpt.applies, "evaluations": ckpt.evaluations,
        "applied": ckpt.applied, "wall_time": ckpt.wall_time,
    }
    if ckpt.losses is not None:  # a selector reads reported losses (fedclock.scheduling.selection)
        meta["losses"] = ckpt.losses
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / str(ckpt.version)
    tmp = root / f".tmp-{ckpt.version}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(tensors, tmp / "tensors.pt")
    (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    if final.exists():  # the same version written again (a run resumed from an older checkpoint)
        stale = root / f".old-{ckpt.version}"
        os.replace(final, stale)
        shutil.rmtree(stale)
    os.replace(tmp, final)
    for old in _versions(root)[:-KEEP]:
        shutil.rmtree(root / str(old), ignore_errors=True)
    return final


def _versions(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's tensor file, loaded with ``weights_only=True``; anything but a flat
    ``{str: tensor}`` dict is refused."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint tensor file ({first})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                             for k, v in data.items()):
        raise CheckpointError(f"{path}: holds something other than named tensors; refused")
    return data


def _group(tensors: dict[str, torch.Tensor], prefix: str) -> Tensors:
    start = prefix + "/"
    return {k[len(start):]: v for k, v in tensors.items() if k.startswith(start)}


def read_checkpoint(folder: Path, scenario_fingerprint: str | None = None) -> Checkpoint:
    """Read one checkpoint folder; with ``scenario_fingerprint``, refuse one written for
    another scenario."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder}: no readable meta.json ({type(exc).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{folder}/meta.json: not a fedclock checkpoint (format {FORMAT})")
    if scenario_fingerprint is not None and meta["fingerprint"] != scenario_fingerprint:
        raise CheckpointError(f"{folder}: written for a different scenario than the run directory's "
                              f"scenario.resolved.yaml (was the file edited?)")
    tensors = load_tensors(folder / "tensors.pt")
    try:
        return Checkpoint(
            version=int(meta["version"]),
            server=ServerState(tensors=_group(tensors, "server"), version=int(meta["version"]),
                               extra=dict(meta["extra"])),
            receives=int(meta["receives"]),
            clients={int(c): (_group(tensors, f"client/{c}") if has else None) for c, has in meta["clients"]},
            payloads=[_group(tensors, f"payload/{k}") for k in range(int(meta["payloads"]))],
            tasks=[RunningTask(int(i), int(c), int(p), _group(tensors, f"task/{i}") if has else None)
                   for i, c, p, has in meta["tasks"]],
            rows={str(k): int(v) for k, v in meta["rows"].items()},
            applies=[int(v) for v in meta["applies"]],
            evaluations=[{str(k): float(v) for k, v in m.items()} for m in meta["evaluations"]],
            applied=[{str(k): float(v) for k, v in m.items()} for m in meta["applied"]],
            wall_time=float(meta["wall_time"]),
            losses=None if meta.get("losses") is None else [None if v is None else float(v) for v in meta["losses"]])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{folder}/meta.json: malformed ({type(exc).__name__}: {exc})") from None


def latest_checkpoint(run_dir: Path, scenario_fingerprint: str) -> Checkpoint | None:
    """The newest readable checkpoint of a run directory (None when there is none). A
    checkpoint written for another scenario is an error, not skipped."""
    root = checkpoint_dir(run_dir)
    for version in reversed(_versions(root)):
        try:
            return read_checkpoint(root / str(version), scenario_fingerprint)
        except CheckpointError as exc:
            if "different scenario" in str(exc):
                raise
    return None
