"""What a run writes into its folder, by name: the entries ``--overwrite`` may delete.

The names are defined here and every module that writes one takes it from here (the result
tables and the resolved scenario, :mod:`fedclock.scenarios.results`; ``run.json``,
:mod:`fedclock.scenarios.runstatus`; checkpoints, :mod:`fedclock.scenarios.checkpoints`;
TensorBoard scalars, CKA, diagnostics, linear evaluation and privacy files; what ``fedclock
plot`` and ``fedclock compare`` write into a run folder by default), so a writer cannot
write a name this list lacks without a test noticing; and with them the temporary names their atomic writes
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
STATUS_FILE = "run.json"
"""How the run ended (:mod:`fedclock.scenarios.runstatus`)."""
RESOLVED_FILE = "scenario.resolved.yaml"
"""The run's scenario with every default filled in (:func:`fedclock.scenarios.results.resolved_dict`)."""
TABLES = ("events", "metrics", "clients", "timeline", "client_metrics")
"""Every table a run writes, as ``<name>.parquet`` (:class:`fedclock.scenarios.results.ResultsWriter`)."""
PARTS_SUFFIX = ".parts"
"""A table's part files go in ``<table>.parts/`` (:func:`fedclock.scenarios.results.parts_dir`)."""
CHECKPOINTS_DIR = "checkpoints"
"""The folder of a run's checkpoints (:mod:`fedclock.scenarios.checkpoints`)."""
TENSORBOARD_DIR = "tensorboard"
"""TensorBoard scalars (:mod:`fedclock.scenarios.tensorboard`)."""
CKA_FILE = "cka.parquet"
"""CKA analysis (:mod:`fedclock.scenarios.analysis`)."""
DIAGNOSTICS_FILE = "diagnostics.parquet"
"""An algorithm's diagnostics (:mod:`fedclock.scenarios.diagnostics`)."""
LINEAR_EVAL_FILE = "linear_eval.parquet"
"""Linear evaluation of self-supervised runs (:mod:`fedclock.scenarios.linear_eval`)."""
PRIVACY_FILE = "privacy.json"
"""A ``privacy:`` run's accounting rule (:mod:`fedclock.scenarios.experiment`)."""
PLOTS_DIR = "plots"
"""Where ``fedclock plot DIR`` writes its figures by default (``DIR/plots``)."""
COMPARE_FILES = ("compare.parquet", "compare.csv")
"""What ``fedclock compare`` writes (into DIR by default)."""


def run_files() -> tuple[frozenset[str], dict[str, re.Pattern[str]]]:
    """The files a run writes into its folder (with their temporary names), and the folders
    it writes with a pattern every entry inside them matches."""
    files = {f"{t}.parquet" for t in TABLES} | {RESOLVED_FILE, STATUS_FILE, PRIVACY_FILE, CKA_FILE, DIAGNOSTICS_FILE,
                                                 LINEAR_EVAL_FILE, *COMPARE_FILES}
    files |= {name + TMP_SUFFIX for name in files}
    folders = {f"{t}{PARTS_SUFFIX}": re.compile(r"\d{12}\.parquet(\.tmp)?") for t in TABLES}
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
