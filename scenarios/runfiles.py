"""What a run writes into its folder, by name: the entries ``--overwrite`` may delete.

Each name is the constant of the module that writes the entry (the result tables and the
resolved scenario, :mod:`fedclock.scenarios.results`; ``run.json``,
:mod:`fedclock.scenarios.runstatus`; checkpoints, :mod:`fedclock.scenarios.checkpoints`;
TensorBoard scalars, CKA, diagnostics, linear evaluation and privacy files; what ``fedclock
plot`` and ``fedclock compare`` write into a run folder by default,
:mod:`fedclock.scenarios.rundirs`), and with them the temporary names their atomic writes
use (``<file>.tmp``, ``.run.json.*.tmp``) and what a folder of the run holds (a table's
``<table>.parts/`` part files, a checkpoint's ``<version>/``, ``.tmp-<version>/`` and
``.old-<version>/``, TensorBoard's event files, PNG figures). A test runs a run that writes
every one of them and checks that nothing it leaves is unknown here
(``tests/scenarios/test_overwrite.py``).

A folder whose every entry is one of these holds (what is left of) a fedclock run;
:func:`foreign_entry` names the first one that is not, which ``--overwrite`` refuses to
delete (:func:`fedclock.scenarios.runstatus.claim`).
"""
from __future__ import annotations

import re
from pathlib import Path

TMP_SUFFIX = ".tmp"
"""What an atomic write appends to the name it writes first (then renames)."""


def run_files() -> tuple[frozenset[str], dict[str, re.Pattern[str]]]:
    """The files a run writes into its folder (with their temporary names), and the folders
    it writes with a pattern every entry inside them matches."""
    from fedclock.scenarios.analysis import CKA_FILE
    from fedclock.scenarios.checkpoints import CHECKPOINTS_DIR
    from fedclock.scenarios.diagnostics import DIAGNOSTICS_FILE
    from fedclock.scenarios.experiment import PRIVACY_FILE
    from fedclock.scenarios.linear_eval import LINEAR_EVAL_FILE
    from fedclock.scenarios.results import RESOLVED_FILE, TABLES, parts_dir
    from fedclock.scenarios.rundirs import COMPARE_FILES, PLOTS_DIR
    from fedclock.scenarios.runstatus import STATUS_FILE
    from fedclock.scenarios.tensorboard import TENSORBOARD_DIR

    files = {f"{t}.parquet" for t in TABLES} | {RESOLVED_FILE, STATUS_FILE, PRIVACY_FILE, CKA_FILE, DIAGNOSTICS_FILE,
                                                 LINEAR_EVAL_FILE, *COMPARE_FILES}
    files |= {name + TMP_SUFFIX for name in files}
    folders = {parts_dir(Path(f"{t}.parquet")).name: re.compile(r"\d{12}\.parquet(\.tmp)?") for t in TABLES}
    folders[CHECKPOINTS_DIR] = re.compile(r"(\.tmp-|\.old-)?\d+")
    folders[TENSORBOARD_DIR] = re.compile(r"events\.out\.tfevents\..+")
    folders[PLOTS_DIR] = re.compile(r".+\.png")
    return frozenset(files), folders


_STATUS_TMP = re.compile(r"\.run\.json(\.[0-9a-f]+)?\.tmp")


def foreign_entry(run_dir: Path) -> Path | None:
    """The first entry of ``run_dir`` (or of one of a run's folders in it) that no fedclock
    run writes; None when every entry is a run's."""
    files, folders = run_files()
    for entry in sorted(run_dir.iterdir()):
        name = entry.name
        if entry.is_symlink():
            return entry
        if entry.is_dir():
            pattern = folders.get(name)
            if pattern is None:
                return entry
            inside = next((e for e in sorted(entry.iterdir()) if not pattern.fullmatch(e.name) or e.is_symlink()),
                          None)
            if inside is not None:
                return inside
        elif name not in files and not _STATUS_TMP.fullmatch(name):
            return entry
    return None
