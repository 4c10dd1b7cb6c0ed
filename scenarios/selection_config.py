"""The ``selection:`` section of a scenario file, resolved: a built-in selector or a user's
``module:attribute`` class (found like algorithm plugins, :mod:`fedclock.scenarios.plugins`),
its settings validated against its own ``Params`` (they sit beside ``name`` in the file,
``selection: {name: oort, round_penalty: 2}``), and what the clients disclose.
The section's model and the selectors belong to :mod:`fedclock.scheduling.selection`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from fedclock.scenarios.plugins import PluginError, find
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.selection import DISCLOSABLE, SelectionConfig, Selector
from fedclock.scheduling.selection_registry import SELECTOR_NAMES, SELECTORS


def selector_class(name: str, base_dir: Path | None = None) -> type[Selector] | None:
    """The selector class ``name`` refers to (None: ``uniform``, the clock's own draw)."""
    if name == "uniform":
        return None
    if name in SELECTORS:
        return SELECTORS[name]
    return find("selection", name, base_dir, SELECTOR_NAMES).obj


def resolve_selection(raw: Any, base_dir: Path | None,
                      format_error: Any) -> SelectionConfig:
    """The section as read from the file (a mapping, or a bare name) as a
    :class:`~fedclock.scheduling.selection.SelectionConfig`; a mistake is a ValueError whose
    message is one line starting with the field (``format_error(exc, model, prefix)`` words
    a settings error)."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"selection: must be a mapping with a name, e.g. {{name: oort}} (got {raw!r})")
    raw = dict(raw)
    name = raw.pop("name", "uniform")
    if not isinstance(name, str):
        raise ValueError(f"selection.name: must be a string (allowed: {', '.join(SELECTOR_NAMES)} or "
                         f"module:attribute; got {name!r})")
    disclose = raw.pop("disclose", [])
    if isinstance(disclose, str):
        disclose = [disclose]
    if not isinstance(disclose, list) or any(d not in DISCLOSABLE for d in disclose):
        raise ValueError(f"selection.disclose: a list of {', '.join(DISCLOSABLE)} (got {disclose!r})")
    try:
        cls = selector_class(name, base_dir)
    except PluginError as exc:
        raise ValueError(str(exc)) from None
    if cls is None:
        if raw:
            raise ValueError(f"selection.{sorted(raw)[0]}: uniform selection has no settings (allowed: name, "
                             f"disclose)")
        return SelectionConfig(name=name, disclose=tuple(disclose))
    try:
        params = cls.Params.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(format_error(exc, cls.Params, ("selection",))) from None
    missing = [d for d in cls.needs if d not in disclose]
    if missing:
        raise ValueError(f"selection.disclose: selector {name!r} needs the clients to disclose {missing[0]} "
                         f"(add selection.disclose: [{', '.join(cls.needs)}])")
    return SelectionConfig(name=name, disclose=tuple(disclose), params=params)


def selection_problem(selection: SelectionConfig, mode: Any) -> str | None:
    """A one-line error when the selector cannot act in this mode."""
    if selection.name == "fedcs" and getattr(selection.params, "deadline_s", None) is None and \
            mode.round_deadline_s is None:
        return "selection.deadline_s: fedcs needs a round deadline (set mode.deadline_s in sync mode or " \
               "selection.deadline_s)"
    return None


def build_selector(selection: SelectionConfig, seed: int, base_dir: Path | None = None) -> Selector | None:
    """The run's selector, with its own seeded stream (None for ``uniform``)."""
    cls = selector_class(selection.name, base_dir)
    if cls is None:
        return None
    rng: np.random.Generator = numpy_rng(seed, Stream.SELECTION)
    return cls(selection.params, rng)


def selection_dict(selection: SelectionConfig) -> dict[str, Any]:
    """The section in the file format (settings beside the name)."""
    out: dict[str, Any] = {"name": selection.name}
    if selection.disclose:
        out["disclose"] = list(selection.disclose)
    out.update(selection.params.model_dump(mode="json"))
    return out
