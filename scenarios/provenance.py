"""Which fedclock made a result: the source commit and whether its work tree was clean.

:func:`source_state` asks git about the tree fedclock is imported from (``git rev-parse
HEAD``, ``git status --porcelain --untracked-files=all``: changed tracked files and untracked
files git does not ignore). When that tree is not a git checkout (an installed package), or
git is missing, it falls back to the installed package's version (:mod:`importlib.metadata`),
whose cleanliness is unknown.

A dirty tree is described by a short sha256 of ``git diff HEAD`` followed by the untracked
files' names (:attr:`SourceState.diff_hash`), so two reports made from the same changes say
the same hash. ``run.json`` records :func:`run_commit` for each run
(:mod:`fedclock.scenarios.runstatus`); ``fedclock reproduce`` lists reused runs made at
another commit and the algorithm files that differ between the two commits
(:func:`algorithm_changes`).
"""
from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

PACKAGE_DIR = Path(__file__).resolve().parent
"""Where fedclock's scenarios package is imported from (inside the source tree's checkout)."""

REPORT_DIR = PACKAGE_DIR.parent / "docs" / "reproductions"
"""Where ``fedclock reproduce`` writes its reports by default, in the checkout."""


@dataclass(frozen=True)
class SourceState:
    """The source fedclock runs from."""

    commit: str
    """The full git commit, or ``fedclock VERSION (installed package)`` without git."""
    clean: bool | None
    """Whether the work tree matches the commit (None: unknown, not a git checkout)."""
    root: Path | None = None
    """The checkout's top folder (None without git)."""
    changed: tuple[str, ...] = ()
    """Changed tracked files and untracked files, as ``git status --porcelain`` names them."""
    untracked: tuple[str, ...] = ()
    diff_hash: str = ""
    """sha256 (12 hex digits) of ``git diff HEAD`` then the untracked names; empty when clean."""

    @property
    def is_git(self) -> bool:
        """Whether the state comes from git."""
        return self.root is not None

    def short(self) -> str:
        """The commit, shortened to 10 digits when it is a git commit."""
        return self.commit[:10] if self.is_git else self.commit


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def package_version() -> str:
    """``fedclock VERSION (installed package)``, or ``unknown`` when fedclock is not installed."""
    try:
        return f"fedclock {metadata.version('fedclock')} (installed package)"
    except metadata.PackageNotFoundError:
        return "unknown (not a git checkout, no installed package)"


def source_state(where: Path = PACKAGE_DIR, ignore: Callable[[Path], bool] | None = None,
                 hash_diff: bool = True) -> SourceState:
    """The state of the checkout holding ``where`` (module docstring); ``ignore`` picks paths
    (absolute, in the checkout) left out of the dirty check, e.g. the
    report files ``fedclock reproduce`` is about to rewrite; ``hash_diff`` False skips the
    diff's hash (:func:`run_commit` needs only whether the tree is clean)."""
    try:
        top = _git(where, "rev-parse", "--show-toplevel")
        head = _git(where, "rev-parse", "HEAD")
    except OSError:  # no git
        return SourceState(package_version(), None)
    if top.returncode != 0 or head.returncode != 0:
        return SourceState(package_version(), None)
    root = Path(top.stdout.strip())
    status = _git(root, "status", "--porcelain", "--untracked-files=all")
    changed: list[str] = []
    untracked: list[str] = []
    for line in status.stdout.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if ignore is not None and ignore(root / path):
            continue
        changed.append(path)
        if line.startswith("??"):
            untracked.append(path)
    if not changed:
        return SourceState(head.stdout.strip(), True, root)
    tracked = [p for p in changed if p not in untracked]
    digest = ""
    if hash_diff:
        diff = _git(root, "diff", "HEAD", "--", *tracked).stdout if tracked else ""
        digest = hashlib.sha256((diff + "\n".join(untracked)).encode()).hexdigest()[:12]
    return SourceState(head.stdout.strip(), False, root, tuple(changed), tuple(untracked), digest)


def is_generated_report(path: Path, report_dir: Path) -> bool:
    """Whether ``path`` is a file ``fedclock reproduce`` writes into ``report_dir`` (a report
    ``*.md`` other than ``README.md``, or a ``*.png``): left out of the dirty check, so that
    regenerating reports one family after another needs no commit in between."""
    try:
        inside = path.resolve().parent == report_dir.resolve()
    except OSError:
        return False
    return inside and (path.suffix == ".png" or (path.suffix == ".md" and path.name != "README.md"))


def run_commit(where: Path = PACKAGE_DIR, report_dir: Path = REPORT_DIR) -> str:
    """The commit a run records in ``run.json``: the git commit, ``+dirty`` when the tree has
    changes, or the package version (:func:`source_state` of the checkout holding ``where``).
    The reports in ``report_dir`` (the checkout's :data:`REPORT_DIR`) are left out of the
    check (:func:`is_generated_report`): a run's code is the same whether or not a report was
    just regenerated beside it, so the runs of the second family ``fedclock reproduce``
    regenerates from a clean commit record that commit clean, as the first family's do."""
    state = source_state(where, ignore=lambda p: is_generated_report(p, report_dir), hash_diff=False)
    return state.commit + (" +dirty" if state.clean is False else "")


def algorithm_changes(root: Path, first: str, second: str) -> list[str] | None:
    """The files under ``algorithms/`` that differ between two commits of the checkout at
    ``root`` (``git diff --name-only``; empty: none); None when git cannot tell (an unknown
    commit, no git)."""
    try:
        done = _git(root, "diff", "--name-only", first, second, "--", "algorithms")
    except OSError:
        return None
    return sorted(done.stdout.split()) if done.returncode == 0 else None

