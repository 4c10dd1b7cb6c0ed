"""The built-in selectors by name (``selection.name``); ``uniform`` is the clock's own draw
(:mod:`fedclock.scheduling.selection`)."""
from __future__ import annotations

from fedclock.scheduling.selection import Selector
from fedclock.scheduling.selection_fedcs import FedCS
from fedclock.scheduling.selection_oort import Oort
from fedclock.scheduling.selection_power import PowerOfChoice
from fedclock.scheduling.selection_tifl import TiFL

SELECTORS: dict[str, type[Selector]] = {"oort": Oort, "tifl": TiFL, "power_of_choice": PowerOfChoice, "fedcs": FedCS}
"""Built-in selector classes by name."""

SELECTOR_NAMES: tuple[str, ...] = ("uniform", *SELECTORS)
"""Every built-in name, ``uniform`` first."""
