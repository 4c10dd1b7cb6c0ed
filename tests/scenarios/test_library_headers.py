"""Every full-size paper file states, in its header, the paper-vs-file table; every quick
variant says what it scales down.

A full-size file of ``scenarios/library/{fedmrur,fedreco,fedstyle,spfl_plga}/`` (no
``quick`` in its name) carries in its leading comment block exactly this header row, the
separator row, and one row per setting the paper gives::

    # | setting | paper | section | this file | why it differs |
    # |---|---|---|---|---|
    # | rounds | 1600 | Sec. 5.1 | 1600 | |

The rules: at least 5 rows; 5 cells in every row; where ``paper`` and ``this file``
differ (compared after trimming spaces), ``why it differs`` is not empty. A quick file's
leading comment block has a line ``# Quick variant of <file>: <what it scales down>``,
where ``<file>`` names full-size files of the library (``table1_fmnist.yaml``,
``fedreco/table1_fmnist``; several joined by ``,`` or ``and``).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"
FAMILIES = ("benchmarks", "crossdevice", "fedmrur", "fedreco", "fedstyle", "spfl_plga", "selection")
HEADER_ROW = "# | setting | paper | section | this file | why it differs |"
SEPARATOR_ROW = "# |---|---|---|---|---|"
MIN_ROWS = 5
QUICK_LINE = re.compile(r"^# Quick variant of (?P<files>\S.*?): \S.*$")


def header_lines(text: str) -> list[str]:
    """The leading comment block: lines from the top while they are comments or blank."""
    out = []
    for line in text.splitlines():
        stripped = line.rstrip()
        if stripped and not stripped.startswith("#"):
            break
        out.append(stripped)
    return out


def _cells(line: str) -> list[str] | None:
    """Cells of a table row ``# | a | b |``; None when the line is not a row."""
    body = line[1:].strip() if line.startswith("#") else ""
    if not (body.startswith("|") and body.endswith("|") and len(body) >= 2):
        return None
    return [cell.strip() for cell in body[1:-1].split("|")]


def table_problems(text: str) -> list[str]:
    """What is wrong with a full-size file's paper-vs-file table (empty: nothing)."""
    lines = header_lines(text)
    if HEADER_ROW not in lines:
        return [f"no header row {HEADER_ROW!r} in the leading comment block"]
    at = lines.index(HEADER_ROW)
    if at + 1 >= len(lines) or lines[at + 1] != SEPARATOR_ROW:
        return [f"the header row must be followed by {SEPARATOR_ROW!r}"]
    problems = []
    rows = []
    for line in lines[at + 2:]:
        cells = _cells(line)
        if cells is None:
            break
        rows.append((line, cells))
    if len(rows) < MIN_ROWS:
        problems.append(f"{len(rows)} rows, at least {MIN_ROWS} needed")
    for line, cells in rows:
        if len(cells) != 5:
            problems.append(f"{len(cells)} cells instead of 5: {line}")
            continue
        setting, paper, _section, ours, why = cells
        if " ".join(paper.split()) != " ".join(ours.split()) and not why:
            problems.append(f"{setting!r}: paper {paper!r} and this file {ours!r} differ but 'why it differs' "
                            f"is empty")
    return problems


def _names_library_files(files: str, folder: Path) -> bool:
    names = [n.strip() for n in re.split(r",|\band\b", files) if n.strip()]
    found = []
    for n in names:
        stem = n.removesuffix(".yaml")
        found.append(any((base / f"{stem}.yaml").is_file() and "quick" not in Path(stem).name
                         for base in (folder, LIBRARY)))
    return bool(names) and all(found)


def quick_problems(text: str, folder: Path | None = None) -> list[str]:
    """What is wrong with a quick file's header (empty: nothing); ``folder`` is the file's
    family folder, where the named full-size files are looked up first."""
    for line in header_lines(text):
        match = QUICK_LINE.match(line)
        if match and _names_library_files(match["files"], folder or LIBRARY):
            return []
    return ["no line '# Quick variant of <file>: <what it scales down>' naming full-size library files in the "
            "leading comment block"]


def _library_files() -> list[str]:
    return sorted(str(p.relative_to(LIBRARY)) for family in FAMILIES for p in (LIBRARY / family).glob("*.yaml"))


@pytest.mark.parametrize("name", _library_files())
def test_library_file_header(name: str) -> None:
    text = (LIBRARY / name).read_text(encoding="utf-8")
    path = LIBRARY / name
    problems = quick_problems(text, path.parent) if "quick" in path.name else table_problems(text)
    assert not problems, f"{name}: " + "; ".join(problems)


# --------------------------------------------------------------------------- the checker itself
GOOD = """# Paper X, Table 1.
#
# | setting | paper | section | this file | why it differs |
# |---|---|---|---|---|
# | rounds | 1600 | Sec. 5.1 | 1600 | |
# | clients | 100 | Sec. 5.1 | 100 | |
# | local epochs | 5 | App. B | 2 | the authors' code runs 2 |
# | batch | 50 | Sec. 5.1 | 50 | |
# | lr | 0.1 | Sec. 5.1 | 0.1 | |
name: x
"""


def test_checker_accepts_a_good_table() -> None:
    assert table_problems(GOOD) == []


@pytest.mark.parametrize("broken,expected", [
    (GOOD.replace("the authors' code runs 2 ", ""), "differ but 'why it differs' is empty"),
    (GOOD.replace("# | lr | 0.1 | Sec. 5.1 | 0.1 | |\n", ""), "4 rows, at least 5"),
    (GOOD.replace("| batch | 50 | Sec. 5.1 | 50 | |", "| batch | 50 | 50 | |"), "4 cells instead of 5"),
    (GOOD.replace("| this file |", "| here |"), "no header row"),
    (GOOD.replace("# |---|---|---|---|---|\n", ""), "must be followed by"),
    ("name: x\n" + GOOD, "no header row"),  # a table after the first key is not the header
])
def test_checker_rejects(broken: str, expected: str) -> None:
    assert any(expected in p for p in table_problems(broken)), table_problems(broken)


def test_quick_line() -> None:
    folder = LIBRARY / "fedreco"
    assert quick_problems("# Quick variant of table1_fmnist.yaml: digits, 10 clients\nname: q\n", folder) == []
    assert quick_problems("# Quick variant of table1_fmnist and fedreco/table1_cifar10: MLP\nname: q\n", folder) == []
    assert quick_problems("# A quick variant.\nname: q\n", folder)
    assert quick_problems("name: q\n# Quick variant of table1_fmnist.yaml: b\n", folder)  # not in the header
    assert quick_problems("# Quick variant of Figure 2 of \"X: Y\" (FedReCo): z\nname: q\n", folder)
    assert quick_problems("# Quick variant of no_such_file.yaml: b\nname: q\n", folder)
    assert quick_problems("# Quick variant of table1_quick.yaml: b\nname: q\n", folder)  # not a full-size file
