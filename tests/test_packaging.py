"""An installed (non-editable) fedclock carries every data file the package reads.

The library scenarios, the claim sets and the sample traces are data files under
``scenarios/``; ``setup.cfg``'s ``package_data`` must name each of them, as setuptools
reads that file (a multi-line value is split at line ends only), or ``pip install .``
ships a package whose ``library/...`` names do not exist.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from setuptools.config.setupcfg import read_configuration

ROOT = Path(__file__).resolve().parent.parent


def _patterns() -> list[str]:
    options = read_configuration(str(ROOT / "setup.cfg"))["options"]
    return list(options["package_data"]["fedclock.scenarios"])


def _covered(relative: str, patterns: list[str]) -> bool:
    # setuptools globs each pattern within the package folder; '*' does not cross '/'
    depth = relative.count("/")
    return any(pattern.count("/") == depth and fnmatch.fnmatchcase(relative, pattern)
               for pattern in patterns)


def test_every_data_file_under_scenarios_is_package_data() -> None:
    package = ROOT / "scenarios"
    data = sorted(str(path.relative_to(package)) for path in package.rglob("*")
                  if path.is_file() and path.suffix not in {".py", ".pyc"} and "__pycache__" not in path.parts)
    assert data, "no data files found: the test looks in the wrong place"
    patterns = _patterns()
    missing = [name for name in data if not _covered(name, patterns)]
    assert not missing, f"not in setup.cfg package_data: {missing}"


def test_patterns_are_one_per_line() -> None:
    assert all("," not in pattern and " " not in pattern for pattern in _patterns())


def test_every_package_folder_is_listed() -> None:
    """A sub-package (a folder with ``__init__.py``, such as ``scenarios/data/``) that
    ``setup.cfg`` does not list is left out of an installed fedclock."""
    options = read_configuration(str(ROOT / "setup.cfg"))["options"]
    listed = set(options["packages"])
    folders = {"fedclock." + ".".join(init.parent.relative_to(ROOT).parts)
               for layer in ("actors", "algorithms", "scheduling", "scenarios")
               for init in (ROOT / layer).rglob("__init__.py") if "__pycache__" not in init.parts}
    assert "fedclock.scenarios.data" in folders
    missing = sorted(folders - listed)
    assert not missing, f"not in setup.cfg packages: {missing}"
