"""Optional TensorBoard scalars (``output.tensorboard: true``).

Each evaluation of a run is written to ``<run dir>/tensorboard/`` as scalars whose step is
the server version and whose wall time is the *virtual* time, so TensorBoard's "Step" axis
shows server versions and its "Relative" axis shows virtual seconds. ``tensorboard --logdir
results/SUITE`` shows every run of a suite side by side. Needs the ``tensorboard`` package
(``pip install fedclock[tensorboard]``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from fedclock.scenarios.loader import ScenarioError

TAGS = {
    "global_accuracy": "accuracy/global", "personal_accuracy_mean": "accuracy/personal_mean",
    "personal_accuracy_p10": "accuracy/personal_p10", "personal_accuracy_p90": "accuracy/personal_p90",
    "global_loss": "loss/global", "tasks_applied": "tasks/applied", "tasks_dropped": "tasks/dropped",
    "bytes_total": "bytes/total",
}


class TensorBoardScalars:
    """Writes one run's evaluation metrics as TensorBoard scalars."""

    def __init__(self, log_dir: Path, purge_from: int | None = None) -> None:
        """``purge_from``: a resumed run's first version to write again; TensorBoard hides
        the scalars an earlier, crashed process wrote at that version or later (so a resumed
        run shows each version once)."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ScenarioError("output.tensorboard: needs the tensorboard package "
                                "(pip install tensorboard), or set output.tensorboard: false") from None
        self.log_dir = log_dir
        self._writer: Any = SummaryWriter(log_dir=str(log_dir), purge_step=purge_from)

    def add(self, virtual_time: float, version: int, values: Mapping[str, Any]) -> None:
        """One evaluation: every known metric that has a finite value."""
        for key, tag in TAGS.items():
            value = values.get(key)
            if value is not None and value == value:  # skip missing and NaN
                self._writer.add_scalar(tag, float(value), global_step=version, walltime=float(virtual_time))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
