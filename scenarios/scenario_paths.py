"""Where ``fedclock run ARG`` finds its file: a path as given, or a shipped scenario by name.

Imports nothing of fedclock's, so that the console script (:mod:`fedclock.scenarios.entry`)
can find the file before it imports PyTorch."""
from __future__ import annotations

from pathlib import Path

__all__ = ["SCENARIO_DIR", "find_scenario"]

SCENARIO_DIR = Path(__file__).parent
"""Where the shipped scenario files live."""


def find_scenario(arg: str | Path) -> Path | None:
    """The file ``arg`` names: the path itself, else ``ARG``, ``ARG.yaml`` or
    ``library/ARG.yaml`` among the shipped scenarios; None when there is none."""
    for candidate in (Path(arg), SCENARIO_DIR / arg, SCENARIO_DIR / f"{arg}.yaml",
                      SCENARIO_DIR / "library" / f"{arg}.yaml"):
        if candidate.is_file():
            return candidate
    return None
