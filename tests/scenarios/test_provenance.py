"""Which fedclock made a result (:mod:`fedclock.scenarios.provenance`): the commit and a clean
or dirty tree read from a temporary git repository, the package-version fallback, the commit
``run.json`` records, and the report's lines on runs made at another commit."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fedclock.scenarios import provenance
from fedclock.scenarios.provenance import (SourceState, algorithm_changes, is_generated_report, package_version,
                                           source_state)
from fedclock.scenarios.reproduce import provenance_lines
from fedclock.scenarios.runstatus import FINISHED, RunStatus, claim, read_status, write_status


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _commit(root: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / ".gitignore").write_text("results/\n", encoding="utf-8")
    _commit(root, {"algorithms/a.py": "x = 1\n", "docs/r/README.md": "r\n"}, "first")
    return root


def test_clean_then_dirty_tree(repo: Path) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    clean = source_state(repo)
    assert clean == SourceState(head, True, repo.resolve())
    assert clean.short() == head[:10]
    (repo / "results").mkdir()
    (repo / "results" / "run.txt").write_text("ignored\n", encoding="utf-8")  # ignored: still clean
    assert source_state(repo).clean is True
    (repo / "algorithms" / "a.py").write_text("x = 2\n", encoding="utf-8")
    dirty = source_state(repo)
    assert dirty.clean is False and dirty.changed == ("algorithms/a.py",) and dirty.untracked == ()
    assert len(dirty.diff_hash) == 12 and source_state(repo).diff_hash == dirty.diff_hash  # same changes, same hash
    (repo / "new.txt").write_text("n\n", encoding="utf-8")
    more = source_state(repo)
    assert more.untracked == ("new.txt",) and set(more.changed) == {"algorithms/a.py", "new.txt"}
    assert more.diff_hash != dirty.diff_hash
    assert source_state(repo, hash_diff=False).diff_hash == ""
    # the files a report run rewrites are left out when asked
    assert source_state(repo, ignore=lambda p: p.name in ("a.py", "new.txt")).clean is True


def test_not_a_git_checkout_falls_back_to_the_package_version(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    state = source_state(tmp_path)
    assert state == SourceState(package_version(), None)
    assert not state.is_git and state.short() == state.commit
    assert package_version().startswith(("fedclock ", "unknown"))


def test_algorithms_differ_between_commits(repo: Path) -> None:
    first = _git(repo, "rev-parse", "HEAD")
    docs_only = _commit(repo, {"docs/r/README.md": "changed\n"}, "docs")
    algorithm = _commit(repo, {"algorithms/a.py": "x = 3\n"}, "algorithm")
    assert algorithm_changes(repo, docs_only, algorithm) == ["algorithms/a.py"]
    assert algorithm_changes(repo, first, algorithm) == ["algorithms/a.py"]
    assert algorithm_changes(repo, first, docs_only) == []
    assert algorithm_changes(repo, "0" * 40, algorithm) is None


def test_run_json_records_the_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "source_state", lambda *a, **k: SourceState("a" * 40, True, tmp_path))
    assert claim(tmp_path / "run").commit == "a" * 40
    status = read_status(tmp_path / "run")
    assert status is not None and status.commit == "a" * 40
    monkeypatch.setattr(provenance, "source_state", lambda *a, **k: SourceState("b" * 40, False, tmp_path))
    assert claim(tmp_path / "other").commit == "b" * 40 + " +dirty"


def test_a_run_beside_regenerated_reports_records_its_commit_clean(repo: Path) -> None:
    """Reports ``fedclock reproduce`` just rewrote (the first family's, while the second
    family's runs start) leave a run's commit clean; any other change still marks it."""
    head = _git(repo, "rev-parse", "HEAD")
    reports = repo / "docs" / "r"
    (reports / "fedreco.md").write_text("regenerated\n", encoding="utf-8")
    (reports / "fedreco_t1.png").write_bytes(b"png")
    assert provenance.run_commit(repo, reports) == head
    (reports / "README.md").write_text("edited by hand\n", encoding="utf-8")
    assert provenance.run_commit(repo, reports) == head + " +dirty"


def test_report_lists_runs_made_at_another_commit(repo: Path, tmp_path: Path) -> None:
    """Four reused runs: one at this commit (not listed), one at a commit with the same
    algorithm files, one at a commit whose algorithm files differ (from a dirty tree), one by
    an older fedclock (no commit)."""
    first = _git(repo, "rev-parse", "HEAD")
    algorithm = _commit(repo, {"algorithms/a.py": "x = 3\n"}, "algorithm")
    now = _commit(repo, {"docs/r/README.md": "changed\n"}, "docs only")
    dirs = []
    for name, commit in (("here", now), ("same", algorithm), ("old", first + " +dirty"), ("none", "")):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        write_status(d, RunStatus(run_id=name, status=FINISHED, commit=commit))
        dirs.append(d)
    lines = provenance_lines(SourceState(now, True, repo), dirs)
    assert lines == [
        f"Source: commit `{now}`, work tree clean.",
        "Runs made at another commit:",
        f"- 1 reused run(s) made at `{algorithm[:10]}`: same algorithm files (`algorithms/`) as this commit.",
        f"- 1 reused run(s) made at `{first[:10]}` (from a work tree with changes): its algorithm files "
        "(`algorithms/`) differ from this commit's in `algorithms/a.py`.",
        "- 1 reused run(s) record no commit (made by an older fedclock).",
    ]
    # from a dirty tree: runs made at its commit with changes are its own, not listed
    dirty = SourceState(first, False, repo, ("x",), (), "0" * 12)
    assert provenance_lines(dirty, dirs[2:3]) == provenance_lines(dirty, [])[:1]
    assert len(provenance_lines(dirty, [])) == 1
    assert provenance_lines(SourceState("fedclock 0.1.0 (installed package)", None), dirs[:0]) == [
        "Source: fedclock 0.1.0 (installed package) (not a git checkout: whether it has local changes is unknown)."]


def test_generated_reports_are_left_out_of_the_dirty_check(tmp_path: Path) -> None:
    report = tmp_path / "docs"
    assert is_generated_report(report / "fedreco.md", report)
    assert is_generated_report(report / "fedreco_t1.png", report)
    assert not is_generated_report(report / "README.md", report)
    assert not is_generated_report(report / "sub" / "x.md", report)
    assert not is_generated_report(tmp_path / "fedreco.md", report)
