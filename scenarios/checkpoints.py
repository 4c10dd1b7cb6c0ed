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
  tasks applied at that moment, the row counts of the results tables and a digest of those
  rows (:class:`fedclock.scenarios.results.RowsDigest`), the wall time so
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

* ``hashes.json`` — the SHA-256 of every other file in the folder, whatever it holds (so
  state that later versions add to a checkpoint is covered too). A checkpoint whose files do
  not match it (a flipped byte, a file added or missing) is refused when read.

A checkpoint is written to a temporary folder, each file flushed to disk (``fsync``), and
renamed, so a folder named by a version is always complete. The run makes the rows of the
results tables that a checkpoint counts durable *before* writing it
(:meth:`fedclock.scenarios.results.ResultsWriter.make_durable`), so a checkpoint never counts
a row that a crash can lose. Each checkpoint names the run that wrote it (the ``run_id`` of
the folder's ``run.json``, :mod:`fedclock.scenarios.runstatus`); the newest :data:`KEEP` of
that run are kept and no other run's are touched.

Resuming takes the newest *usable* checkpoint (:func:`usable_checkpoint`): one that reads,
matches its hashes, counts no more rows than the tables on disk hold and finds the rows it
counts as it recorded them (their digest: Parquet's Snappy pages carry no checksum, so a
flipped byte in a table reads back silently as a wrong value); each newer one it skips is
named with the reason, the damaged table among it. When none is usable, the resume is refused
in one line and the tables are left as they are.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from fedclock.actors.checkpoint import Checkpoint, CheckpointError, RunningTask
from fedclock.algorithms.base import ServerState, Tensors
from fedclock.scenarios.results import fsync
from fedclock.scenarios.runfiles import CHECKPOINTS_DIR

KEEP = 2
"""How many checkpoints a run keeps (the newest ones)."""

FORMAT = 1
HASHES_FILE = "hashes.json"


def fingerprint(resolved: dict[str, Any]) -> str:
    """A hash of a resolved scenario (as in ``scenario.resolved.yaml``) without the sections
    that do not change results (``runtime``, ``output``)."""
    core = {k: v for k, v in resolved.items() if k not in ("runtime", "output")}
    return hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINTS_DIR


def _tensors(prefix: str, values: Tensors | None, what: str, out: dict[str, torch.Tensor]) -> None:
    for key, value in (values or {}).items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{what}: {key!r} is a {type(value).__name__}, not a tensor; checkpoints hold "
                                  f"tensors only")
        out[f"{prefix}/{key}"] = value.detach().cpu().clone()


def write_checkpoint(run_dir: Path, ckpt: Checkpoint, scenario_fingerprint: str, run_id: str = "") -> Path:
    """Write ``ckpt`` atomically and durably as ``checkpoints/<version>/`` and keep only the
    newest :data:`KEEP` checkpoints of the run ``run_id``; returns its folder."""
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
        "applied": ckpt.applied, "applied_steps": ckpt.applied_steps, "wall_time": ckpt.wall_time, "run_id": run_id,
    }
    if ckpt.row_hashes is not None:
        meta["row_hashes"] = ckpt.row_hashes
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
    write_hashes(tmp)
    for path in sorted(tmp.iterdir()):
        fsync(path)
    fsync(tmp)
    if final.exists():  # the same version written again (a run resumed from an older checkpoint)
        stale = root / f".old-{ckpt.version}"
        if stale.exists():
            shutil.rmtree(stale)
        os.replace(final, stale)
        shutil.rmtree(stale)
    os.replace(tmp, final)
    fsync(root)
    for old in [v for v in _versions(root) if _run_of(root / str(v)) == run_id][:-KEEP]:
        shutil.rmtree(root / str(old), ignore_errors=True)
    return final


def _file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file below ``folder`` but :data:`HASHES_FILE`, by relative path."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name != HASHES_FILE:
            digest = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            out[name] = digest.hexdigest()
    return out


def write_hashes(folder: Path) -> None:
    """Write :data:`HASHES_FILE`: the hash of every other file in the checkpoint folder."""
    (folder / HASHES_FILE).write_text(json.dumps({"sha256": _file_hashes(folder)}, indent=1), encoding="utf-8")


def check_hashes(folder: Path) -> None:
    """Refuse a checkpoint folder whose files differ from :data:`HASHES_FILE` (one line)."""
    try:
        stored = json.loads((folder / HASHES_FILE).read_text(encoding="utf-8"))["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{folder}: no readable {HASHES_FILE} ({type(exc).__name__}); the checkpoint "
                              f"cannot be verified") from None
    found = _file_hashes(folder)
    if not isinstance(stored, dict) or found != stored:
        stored = stored if isinstance(stored, dict) else {}
        bad = sorted(n for n in set(found) | set(stored) if found.get(n) != stored.get(n))
        raise CheckpointError(f"{folder}: {', '.join(bad)} differ{'s' if len(bad) == 1 else ''} from "
                              f"{HASHES_FILE} (damaged, added or missing); refused")


def _run_of(folder: Path) -> str | None:
    """The run id a checkpoint names ("" for none; None when its meta.json is unreadable)."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        return str(meta.get("run_id", "")) if isinstance(meta, dict) else None
    except (OSError, ValueError):
        return None


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
    """Read one checkpoint folder (its files checked against :data:`HASHES_FILE`); with
    ``scenario_fingerprint``, refuse one written for another scenario."""
    check_hashes(folder)
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
        applied = [{str(k): float(v) for k, v in m.items()} for m in meta["applied"]]
        # before applied_steps, the reported steps were the metrics' "steps"
        steps = meta["applied_steps"] if "applied_steps" in meta else [m.pop("steps", None) for m in applied]
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
            applied=applied, applied_steps=[None if v is None else int(v) for v in steps],
            wall_time=float(meta["wall_time"]),
            row_hashes=None if meta.get("row_hashes") is None else {str(k): str(v) for k, v in
                                                                    dict(meta["row_hashes"]).items()},
            losses=None if meta.get("losses") is None else [None if v is None else float(v) for v in meta["losses"]])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{folder}/meta.json: malformed ({type(exc).__name__}: {exc})") from None


def latest_checkpoint(run_dir: Path, scenario_fingerprint: str) -> Checkpoint | None:
    """The newest readable checkpoint of a run directory (None when there is none). A
    checkpoint written for another scenario is an error, not skipped."""
    return usable_checkpoint(run_dir, scenario_fingerprint)[0]


def usable_checkpoint(run_dir: Path, scenario_fingerprint: str, rows_on_disk: dict[str, int] | None = None,
                      check_rows: Callable[[dict[str, int], dict[str, str] | None], str | None] | None = None
                      ) -> tuple[Checkpoint | None, list[str]]:
    """The newest checkpoint that reads, matches its hashes, (with ``rows_on_disk``, each
    results table's row count) counts no row the tables lack and (with ``check_rows``, told
    the rows it counts and their digests, :class:`fedclock.scenarios.results.TablesOnDisk`)
    finds those rows on disk as it recorded them; and one line per newer checkpoint skipped,
    saying why. A checkpoint of another scenario is an error."""
    root = checkpoint_dir(run_dir)
    skipped: list[str] = []
    for version in reversed(_versions(root)):
        try:
            ckpt = read_checkpoint(root / str(version), scenario_fingerprint)
        except CheckpointError as exc:
            if "different scenario" in str(exc):
                raise
            skipped.append(f"checkpoint {version} skipped: {exc}")
            continue
        short = {n: (rows_on_disk[n], c) for n, c in ckpt.rows.items()
                 if rows_on_disk is not None and n in rows_on_disk and rows_on_disk[n] < c}
        if short:
            name, (have, counted) = sorted(short.items())[0]
            skipped.append(f"checkpoint {version} skipped: it counts {counted} rows of {name}, the table on disk "
                           f"holds {have}")
            continue
        problem = check_rows(ckpt.rows, ckpt.row_hashes) if check_rows is not None else None
        if problem is not None:
            skipped.append(f"checkpoint {version} skipped: {problem}")
            continue
        return ckpt, skipped
    return None, skipped


def discard_after(run_dir: Path, version: int) -> None:
    """Delete the checkpoints newer than ``version`` (a run resumed from ``version`` writes its
    own again; those left would count rows the resumed run rewrites)."""
    root = checkpoint_dir(run_dir)
    for newer in [v for v in _versions(root) if v > version]:
        shutil.rmtree(root / str(newer), ignore_errors=True)
