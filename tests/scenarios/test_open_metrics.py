"""Open metrics (issue 44): a number an algorithm reports that the typed results schema does
not name reaches the tables as one more float64 column (``metrics.parquet`` from
``server_metrics``, ``events.parquet`` from ``client_update``), never dropped; a value that
is not a number is a one-line error naming the key."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fedclock.scenarios.cli import main
from fedclock.scenarios.results import METRICS_SCHEMA, MetricError, Table, read_rows

ALGOS = '''
from fedclock.algorithms.fedavg import FedAvg


class CountingAvg(FedAvg):
    """FedAvg that also reports the server's version doubled and each client's sample count.

    Paper: none (a test's)
    """

    name = "counting_avg"

    def server_metrics(self, state):
        return {**super().server_metrics(state), "twice_version": 2.0 * state.version, "level": VALUE}

    def client_update(self, payload, client_state, data, rng):
        result = super().client_update(payload, client_state, data, rng)
        result.metrics["client_samples"] = float(data.num_train)
        return result
'''

SCENARIO = """\
name: open_metrics
dataset: {name: digits, max_train_samples: 300}
model: {name: mlp, hidden: [8]}
population: {num_clients: 3}
algorithm: {name: "TAG_algos:CountingAvg", local_steps: 2}
stop: {rounds: 2}
evaluation: {personalized: false}
runtime: {backend: inline}
output: {progress: false}
"""


def _write(tmp_path: Path, tag: str, value: str) -> Path:
    (tmp_path / f"{tag}_algos.py").write_text(ALGOS.replace("VALUE", value))
    file = tmp_path / "scenario.yaml"
    file.write_text(SCENARIO.replace("TAG", tag))
    return file


def test_a_plugin_algorithms_new_metrics_reach_the_tables(tmp_path: Path) -> None:
    file = _write(tmp_path, "openm", "1")
    assert main(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    schema = pq.read_schema(tmp_path / "out" / "metrics.parquet")
    assert schema.names[:len(METRICS_SCHEMA)] == METRICS_SCHEMA.names  # the typed core stays as it is
    assert schema.field("twice_version").type == pa.float64() and schema.field("level").type == pa.float64()
    metrics = pd.read_parquet(tmp_path / "out" / "metrics.parquet")
    assert list(metrics.version) == [0, 1, 2]
    assert list(metrics.twice_version) == [0.0, 2.0, 4.0]
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    assert (events.status == "applied").all() and len(events) == 6
    assert list(events.client_samples) == list(events.num_samples.astype(float))


def test_a_metric_that_is_not_a_number_is_one_line_naming_it(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    file = _write(tmp_path, "badm", "'high'")
    assert main(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "metric 'level' is str 'high'" in err


def test_an_open_table_grows_a_float_column_and_reads_back_across_parts(tmp_path: Path) -> None:
    """Rows before a new key hold null in its column; a part file written after the key first
    appeared is wider than the main file, and the two read back as one table."""
    schema = pa.schema([("version", pa.int64())])
    table = Table(tmp_path / "m.parquet", schema, journal=True, open_columns=True)
    table.append({"version": 0})
    table.flush()
    table.append({"version": 1, "gain": 3})
    table.commit()
    table.append({"version": 2, "gain": 2.5, "other": True})
    table.commit()
    rows = read_rows(tmp_path / "m.parquet")
    assert rows.schema.names == ["version", "gain", "other"]
    assert rows.to_pydict() == {"version": [0, 1, 2], "gain": [None, 3.0, 2.5], "other": [None, None, 1.0]}
    with pytest.raises(MetricError, match="metric 'gain' is str"):
        table.append({"version": 3, "gain": "x"})
    closed = Table(tmp_path / "c.parquet", schema)
    closed.append({"version": 0, "gain": 1.0})  # a closed table keeps its schema (the other tables)
    closed.flush()
    assert pq.read_schema(tmp_path / "c.parquet").names == ["version"]
