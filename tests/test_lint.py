"""The linter and the type checker pass (their settings: ``[tool.ruff]`` and ``[tool.mypy]`` in
pyproject.toml).

ruff checks every Python folder of the repository (those of ``LINTED`` that exist); mypy checks
the four packages. The packages are installed through setuptools' ``package_dir`` mapping
(``fedclock.actors`` is ``actors/``), which mypy cannot follow from an editable install, so the
test lays out a ``fedclock/`` folder of symbolic links to the layer folders and checks
``-p fedclock`` from there. mypy's cache lives in the system's temporary folder, one per checkout
(named by a hash of its path), so runs after the first reuse what it learned of torch and numpy
and two checkouts on one machine never read each other's entries.
"""
from __future__ import annotations

import os
import subprocess
import sys
import hashlib
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("actors", "algorithms", "scheduling", "scenarios")
LINTED = (*PACKAGES, "tests", "benchmarks", "examples")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_ruff_passes() -> None:
    folders = [name for name in LINTED if (ROOT / name).is_dir()]
    done = _run(["ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), *folders], ROOT)
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"


def test_mypy_passes(tmp_path: Path) -> None:
    package = tmp_path / "fedclock"
    package.mkdir()
    for name in PACKAGES:
        (package / name).symlink_to(ROOT / name, target_is_directory=True)
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"fedclock-mypy-cache-{checkout}"
    env = {**os.environ, "MYPYPATH": str(tmp_path)}
    done = _run(["mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
                 "--no-error-summary", "-p", "fedclock"], tmp_path, env)
    assert done.returncode == 0, f"mypy found problems:\n{done.stdout}{done.stderr}"
