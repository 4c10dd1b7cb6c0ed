"""FedScale's device files, read as published, through an unpickler that runs no code.

FedScale (Lai et al., "FedScale: Benchmarking Model and System Performance of Federated
Learning at Scale", ICML 2022) ships two pickled dicts that describe clients' devices; its
simulator reads them in ``fedscale/cloud/internal/client_metadata.py`` and the aggregator:

* ``client_device_capacity``: ``{id: {"computation": ms, "communication": kbit/s}}``.
  ``computation`` is a model's inference latency per sample in milliseconds; FedScale charges
  a training task ``3 * batch * steps * computation / 1000`` seconds (forward plus a backward
  pass taken as twice the forward: its ``augmentation_factor`` of 3). ``communication`` is
  the bandwidth in kbit/s, one link for both directions (FedScale charges ``(upload +
  download) / communication`` with sizes in kbit).
* ``client_behave_trace``: ``{id: {"active": [t...], "inactive": [t...], "finish_time": T,
  ...}}``: the client is online from ``active[i]`` to ``inactive[i]`` (seconds), and the
  trace repeats every ``finish_time`` seconds (FedScale takes ``now % finish_time``). Other
  keys are ignored.

How fedclock uses them (units made explicit):

* a capacity entry becomes a device: ``compute = 1000 / (3 * computation)`` training samples
  per second (:data:`TRAIN_FACTOR` = FedScale's factor 3, so a task takes the time FedScale
  would charge it), ``down_mbps = up_mbps = communication / 1000``; latency is not in the
  file and keeps the population's value.
* a behaviour entry becomes an availability: online during ``[active[i], inactive[i])``
  (fedclock's intervals are half-open; FedScale tests both ends inclusively), repeated every
  ``finish_time`` seconds; an interval is clipped to ``[0, finish_time)``.
* client ``c`` of the scenario takes the ``c``-th entry in ascending key order, cycling when
  the file has fewer entries than the population (FedScale maps its client ``k`` to key
  ``k mod len`` for capacities and to the ``k mod len``-th key in file order for behaviour;
  ascending key order makes the mapping independent of how the file was written).

The unpickler (:class:`PlainDataUnpickler`) refuses every global: only the protocol's own
opcodes for dicts, lists, tuples, sets, strings, bytes, ints, floats, booleans and None
are accepted, so a pickle that would call anything (``os.system`` through ``__reduce__``,
or even a NumPy scalar) is refused before it runs. ``pickle.load`` itself is never called.
"""
from __future__ import annotations

import io
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np

TRAIN_FACTOR = 3.0
"""Training cost of a sample relative to FedScale's measured inference latency (FedScale's
``augmentation_factor``: forward + backward ~ 3 forward passes)."""
PICKLE_MAGIC = b"\x80"
"""First byte of a pickle of protocol 2 or later (how a FedScale file is recognized)."""
CAPACITY_KEYS = ("computation", "communication")
BEHAVIOR_KEYS = ("active", "inactive", "finish_time")


class FedScaleError(ValueError):
    """A FedScale file that cannot be used (one line naming the file and the problem)."""


class PlainDataUnpickler(pickle.Unpickler):
    """Unpickles builtin containers and numbers only: every global lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refuses {module}.{name}: only builtin containers and numbers are accepted")


def is_pickle(path: Path) -> bool:
    """True when the file starts like a pickle of protocol 2 or later."""
    try:
        with path.open("rb") as fh:
            return fh.read(1) == PICKLE_MAGIC
    except OSError:
        return False


def load_plain(path: Path) -> Any:
    """The file's pickled data through :class:`PlainDataUnpickler`; a pickle that holds
    anything else is a :class:`FedScaleError`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FedScaleError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return PlainDataUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise FedScaleError(f"{path}: not a plain-data pickle ({str(exc).splitlines()[0]})") from None
    except Exception as exc:  # truncated or corrupt data: one line
        raise FedScaleError(f"{path}: unreadable pickle ({exc.__class__.__name__}: {exc})") from None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _entries(data: Any, path: Path, keys: tuple[str, ...], what: str) -> list[tuple[Any, dict]]:
    """The dict's entries in ascending key order, each a dict holding ``keys``."""
    if not isinstance(data, dict) or not data:
        raise FedScaleError(f"{path}: a FedScale {what} file is a non-empty dict {{id: {{...}}}} "
                            f"(got {type(data).__name__})")
    try:
        ordered = sorted(data.items())
    except TypeError:
        raise FedScaleError(f"{path}: client ids must all be numbers or all strings") from None
    for key, entry in ordered:
        if not isinstance(entry, dict) or any(k not in entry for k in keys):
            raise FedScaleError(f"{path}: entry {key!r} must be a dict with {', '.join(map(repr, keys))} "
                                f"(a FedScale {what} file)")
    return ordered


def kind_of(data: Any) -> str | None:
    """``"capacity"`` or ``"behavior"`` when the data's first entry has that file's keys."""
    if isinstance(data, dict) and data:
        first = next(iter(data.values()))
        if isinstance(first, dict):
            if all(k in first for k in CAPACITY_KEYS):
                return "capacity"
            if all(k in first for k in BEHAVIOR_KEYS):
                return "behavior"
    return None


def _expect(data: Any, path: Path, kind: str) -> None:
    found = kind_of(data)
    if found != kind:
        names = {"capacity": "client_device_capacity", "behavior": "client_behave_trace"}
        got = f"a {names[found]} file" if found else "neither FedScale file"
        raise FedScaleError(f"{path}: expected a FedScale {names[kind]} file (entries with "
                            f"{', '.join(CAPACITY_KEYS if kind == 'capacity' else BEHAVIOR_KEYS)}), got {got}")


def read_capacity(path: Path) -> np.ndarray:
    """The devices of a ``client_device_capacity`` file in ascending key order: an array of
    rows ``(compute samples/s, down_mbps, up_mbps)`` (see the module for the units)."""
    data = load_plain(path)
    _expect(data, path, "capacity")
    rows = []
    for key, entry in _entries(data, path, CAPACITY_KEYS, "client_device_capacity"):
        ms, kbps = entry["computation"], entry["communication"]
        if not (_number(ms) and ms > 0 and _number(kbps) and kbps > 0):
            raise FedScaleError(f"{path}: entry {key!r}: computation (ms per sample) and communication (kbit/s) "
                                f"must be numbers > 0 (got {ms!r}, {kbps!r})")
        rows.append((1000.0 / (TRAIN_FACTOR * float(ms)), float(kbps) / 1000.0, float(kbps) / 1000.0))
    return np.asarray(rows, dtype=np.float64)


def read_behavior(path: Path) -> list[tuple[list[tuple[float, float]], float]]:
    """The availability of each entry of a ``client_behave_trace`` file in ascending key
    order: its online intervals within one period (sorted, merged, clipped) and the period."""
    data = load_plain(path)
    _expect(data, path, "behavior")
    out = []
    for key, entry in _entries(data, path, BEHAVIOR_KEYS, "client_behave_trace"):
        active, inactive, period = entry["active"], entry["inactive"], entry["finish_time"]
        if not (_number(period) and period > 0):
            raise FedScaleError(f"{path}: entry {key!r}: finish_time must be a number > 0 (got {period!r})")
        if not (isinstance(active, (list, tuple)) and isinstance(inactive, (list, tuple))
                and len(active) == len(inactive) and all(map(_number, [*active, *inactive]))):
            raise FedScaleError(f"{path}: entry {key!r}: active and inactive must be lists of numbers of equal "
                                f"length (got {len(active) if isinstance(active, (list, tuple)) else active!r} and "
                                f"{len(inactive) if isinstance(inactive, (list, tuple)) else inactive!r})")
        spans: list[tuple[float, float]] = []
        for start, end in sorted(zip(map(float, active), map(float, inactive))):
            start, end = max(start, 0.0), min(end, float(period))
            if end <= start:
                continue
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            else:
                spans.append((start, end))
        out.append((spans, float(period)))
    return out


def unrolled(spans: list[tuple[float, float]], period: float, until: float) -> list[tuple[float, float]]:
    """The periodic intervals written out over ``[0, until)``, an interval that ends a period
    joined with one that starts the next."""
    out: list[tuple[float, float]] = []
    base = 0.0
    while base < until and spans:
        for start, end in spans:
            s, e = base + start, min(base + end, until)
            if s >= until:
                break
            if out and s <= out[-1][1]:
                out[-1] = (out[-1][0], e)
            else:
                out.append((s, e))
        base += period
    return out


def is_plain_pickle_kind(path: Path) -> str:
    """``"capacity"`` or ``"behavior"``: which FedScale file ``path`` holds (validated)."""
    data = load_plain(path)
    kind = kind_of(data)
    if kind is None:
        raise FedScaleError(f"{path}: neither FedScale file (entries with {', '.join(CAPACITY_KEYS)}, or with "
                            f"{', '.join(BEHAVIOR_KEYS)})")
    (read_capacity if kind == "capacity" else read_behavior)(path)
    return kind
