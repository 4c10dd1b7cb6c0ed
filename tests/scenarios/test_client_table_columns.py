"""clients.parquet's label columns are computed a block of clients at a time (issue 50,
``benchmarks/RESULTS.md``, "Ten million clients": a list of every client's label cost 8 bytes
a client a column): any split into blocks gives the values the per-client lists gave."""
from __future__ import annotations

from fedclock.scenarios.experiment import describe_availability
from fedclock.scenarios.loader import parse_suite
from fedclock.scheduling.population import PopulationConfig, client_class_rows, client_classes


def _blocks(rows, n: int, cuts: tuple[int, ...]) -> list:  # type: ignore[no-untyped-def]
    edges = [0, *cuts, n]
    return [v for a, b in zip(edges, edges[1:]) for v in rows(a, b)]


def test_device_classes_by_block_equal_the_list() -> None:
    pop = PopulationConfig(num_clients=1003, device_mix={"low_end_phone": 0.3, "edge_box": 0.5})
    full = client_classes(pop)
    assert full.count("low_end_phone") == 301 and full.count("edge_box") == 501 and full.count("custom") == 201
    rows = client_class_rows(pop)
    for cuts in ((), (1,), (300, 301), (301, 802), (500,), (802, 1002)):
        assert _blocks(rows, 1003, cuts) == full
    assert rows(300, 303) == ["low_end_phone", "edge_box", "edge_box"]
    assert rows(801, 803) == ["edge_box", "custom"]


def test_availability_labels_by_block_last_group_wins() -> None:
    scenario = parse_suite({
        "name": "t", "seed": 0, "dataset": {"name": "synthetic", "synthetic_samples": 400, "synthetic_features": 5},
        "model": {"name": "mlp", "hidden": [8]},
        "population": {"num_clients": 50, "availability": {"type": "always"},
                       "clients": [{"ids": [3, 7, 40], "availability": {"type": "periodic_missing", "period": 3}},
                                   {"ids": [7, 49], "availability": {"type": "diurnal"}}]},
        "algorithm": {"name": "fedavg"}, "mode": {"type": "sync", "cohort_fraction": 0.1}, "stop": {"rounds": 1},
    }, "t").runs[0]
    column = describe_availability(scenario)
    assert len(column) == 50
    for cuts in ((), (7,), (8, 40), (41, 49)):
        labels = _blocks(lambda a, b: column[a:b], 50, cuts)
        assert {i: v for i, v in enumerate(labels) if v != "always"} == {
            3: "periodic_missing(period=3)", 7: "diurnal", 40: "periodic_missing(period=3)", 49: "diurnal"}
