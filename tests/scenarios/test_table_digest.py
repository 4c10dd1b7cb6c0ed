"""The digest of a table's rows a checkpoint records (:class:`fedclock.scenarios.results.RowsDigest`):
the same however the rows are cut into blocks, different for any changed value, null, string or
list boundary."""
from __future__ import annotations

import pyarrow as pa
import pytest

from fedclock.scenarios.results import TIMELINE_SCHEMA, RowsDigest, rows_digest

ROWS = {"time": [0.0, 1.5, float("nan"), 3.0], "version": [0, 1, None, 3], "round": [0, 0, 1, 1],
        "event": [0, -1, 2, 3], "type": ["a", "bb", None, ""], "num_clients": [1, 2, 0, 1],
        "clients": [[1], [2, 3], None, []], "detail": ["x", "y", "z", None]}


def test_the_digest_does_not_depend_on_the_blocks() -> None:
    table = pa.table(ROWS, schema=TIMELINE_SCHEMA)
    whole = rows_digest(table)
    for cut in range(5):
        digest = RowsDigest(TIMELINE_SCHEMA)
        digest.add(table.slice(0, cut))
        digest.add(table.slice(cut))
        assert digest.hexdigest() == whole, cut
    chunked = pa.concat_tables([table.slice(0, 1), table.slice(1, 2), table.slice(3)])
    assert rows_digest(chunked) == whole


@pytest.mark.parametrize("column, values", [
    ("clients", [[1, 2], [3], None, []]),  # the same elements, another list boundary
    ("type", ["ab", "b", None, ""]),  # the same characters, another string boundary
    ("version", [0, 1, 0, 3]),  # a null became 0
    ("time", [0.0, 1.5000000000000002, float("nan"), 3.0]),  # one bit of one float
    ("detail", ["x", "y", "z", ""]),  # a null became the empty string
])
def test_any_changed_value_changes_the_digest(column: str, values: list[object]) -> None:
    changed = pa.table({**ROWS, column: values}, schema=TIMELINE_SCHEMA)
    assert rows_digest(changed) != rows_digest(pa.table(ROWS, schema=TIMELINE_SCHEMA))
