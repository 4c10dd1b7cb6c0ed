"""``diagnostics.parquet``: quantities an algorithm logs about itself (e.g. SPFL's gradient
similarities per client and stage), one row per logged value.

The algorithm keeps them in its server state and lists them through
:meth:`~fedclock.algorithms.base.Algorithm.diagnostics`; after the run this module reads the
final server state and writes the rows, so neither the clock nor the runtime's hot path carries
them. A run that dies before its end has no diagnostics file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fedclock.algorithms.base import Algorithm
from fedclock.scenarios.runfiles import DIAGNOSTICS_FILE


def has_diagnostics(algorithm: Algorithm) -> bool:
    """True when the algorithm overrides :meth:`Algorithm.diagnostics`."""
    return type(algorithm).diagnostics is not Algorithm.diagnostics


def write_diagnostics(algorithm: Algorithm, server_state: Any, out_dir: Path) -> Path | None:
    """Write the algorithm's diagnostic rows for ``server_state`` to ``out_dir``; the file's
    path, or None when there are no rows."""
    rows = algorithm.diagnostics(server_state)
    if not rows:
        return None
    path = out_dir / DIAGNOSTICS_FILE
    import pandas as pd  # imported on use: most algorithms log no diagnostics

    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
