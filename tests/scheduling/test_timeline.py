"""Scripted timelines: events fire at exactly their time (or server version), change the
devices, availability and mode limits of the right clients, and are recorded.

Devices are chosen so that every duration is exact in floating point: the MLP-8 model on
digits is 2440 bytes, so 0.001952 Mbit/s moves it in exactly 10 s and 0.01952 Mbit/s in
1 s; 10 samples of work at 0.125 samples/s take 80 s. A task therefore takes 100 s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError, load_suite
from fedclock.scheduling.timeline_events import ClientGroup
from fedclock.scheduling.rng import Stream, numpy_rng
from fedclock.scheduling.timeline import resolve_group
from tests.conftest import scenario

EXACT_DEVICES = {"compute": 0.125, "down_mbps": 0.001952, "up_mbps": 0.001952, "latency_s": 0}
FEDASYNC = {"name": "fedasync", "batch_size": 10, "local_steps": 1}
FEDAVG = {"name": "fedavg", "batch_size": 10, "local_steps": 1}
SHIPPED = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "scripting"


def run(tmp_path: Path, **sections: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    sections.setdefault("evaluation", {"every": 1000, "personalized": False})
    run_scenario(scenario(**sections), Runtime("inline"), tmp_path)
    return pd.read_parquet(tmp_path / "events.parquet"), pd.read_parquet(tmp_path / "timeline.parquet")


def test_slowdown_at_300_and_dropout_at_600_show_at_exactly_those_times(tmp_path: Path) -> None:
    """The issue's example, as shipped: half the clients 10x slower at T=300 s, 20% offline
    at T=600 s."""
    s = load_suite(SHIPPED / "slowdown_dropout.yaml").runs[0]
    s = s.model_copy(update={"evaluation": s.evaluation.model_copy(update={"every": 1000})})
    run_scenario(s, Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    timeline = pd.read_parquet(tmp_path / "timeline.parquet")
    assert list(timeline.time) == [300.0, 600.0]
    assert list(timeline.type) == ["scale", "offline"] and list(timeline.num_clients) == [5, 2]
    assert list(timeline.detail) == ["compute x0.1", ""]
    slowed, offline = set(timeline.clients[0]), set(timeline.clients[1])
    for row in events.itertuples():
        after = row.dispatched_at >= 300.0
        assert row.compute_s == (800.0 if after and row.client in slowed else 80.0), row
    # a task dispatched at exactly T = 300 already runs at the new speed; one in flight at T keeps its old one
    at_300 = events[events.dispatched_at == 300.0]
    assert set(at_300.client) == set(range(10))
    assert set(at_300[at_300.compute_s == 800.0].client) == slowed
    assert (events[(events.dispatched_at == 200.0)].compute_s == 80.0).all()
    # nobody offline is dispatched from T = 600 on; the rest (not slowed) are dispatched at exactly 600
    assert not ((events.dispatched_at >= 600.0) & events.client.isin(offline)).any()
    fast_online = set(range(10)) - slowed - offline
    assert set(events[events.dispatched_at == 600.0].client) == fast_online
    for c in offline - slowed:  # its task from 500 s ended at exactly 600 s and was not followed
        assert events[events.client == c].dispatched_at.max() == 500.0


def test_join_keeps_clients_dormant_until_the_event(tmp_path: Path) -> None:
    events, timeline = run(tmp_path, population={"num_clients": 4, "devices": EXACT_DEVICES},
                           algorithm=FEDASYNC, mode={"type": "async", "concurrency": 4}, stop={"virtual_time_s": 500},
                           timeline=[{"at_s": 250, "type": "join", "clients": {"ids": [2, 3]}}])
    first = events.groupby("client").dispatched_at.min()
    assert first[0] == 0.0 and first[1] == 0.0 and first[2] == 250.0 and first[3] == 250.0
    assert list(timeline.time) == [250.0] and list(timeline.clients[0]) == [2, 3]


def test_server_uplink_caps_downloads_dispatched_while_it_holds(tmp_path: Path) -> None:
    events, timeline = run(tmp_path, population={"num_clients": 2, "devices": EXACT_DEVICES},
                           algorithm=FEDAVG, stop={"virtual_time_s": 700},
                           timeline=[{"at_s": 200, "type": "server_uplink", "mbps": 0.000976},
                                     {"at_s": 500, "type": "server_uplink", "mbps": None}])
    # rounds open at 0, 100, 200 (capped: 20 s download, a 110 s round), 310, 420, 530 (cap lifted)
    by_round = events.groupby("round").agg(start=("dispatched_at", "first"), dl=("download_s", "first"))
    assert list(by_round.start) == [0.0, 100.0, 200.0, 310.0, 420.0, 530.0, 630.0]
    assert list(by_round.dl) == [10.0, 10.0, 20.0, 20.0, 20.0, 10.0, 10.0]
    assert (events.upload_s == 10.0).all()
    assert list(timeline.detail) == ["mbps=0.000976", "no cap"]


def test_cohort_changes_for_rounds_opened_after_the_event(tmp_path: Path) -> None:
    events, _ = run(tmp_path, population={"num_clients": 6, "devices": EXACT_DEVICES}, algorithm=FEDAVG,
                    mode={"type": "sync", "cohort_size": 2}, stop={"rounds": 5},
                    timeline=[{"at_s": 250, "type": "cohort", "size": 5}])
    sizes = events.groupby("round").size()
    assert list(sizes) == [2, 2, 2, 5, 5]  # round 3 opens at 300 s


def test_concurrency_changes_when_the_server_reaches_a_version(tmp_path: Path) -> None:
    events, timeline = run(tmp_path, population={"num_clients": 6, "devices": EXACT_DEVICES}, algorithm=FEDASYNC,
                           mode={"type": "async", "concurrency": 2}, stop={"virtual_time_s": 600},
                           timeline=[{"at_version": 4, "type": "concurrency", "value": 5}])
    assert list(timeline.version) == [4] and list(timeline.time) == [200.0]
    def in_flight(t: float) -> int:
        return int(((events.dispatched_at <= t) & (events.finished_at > t)).sum())
    assert in_flight(150.0) == 2 and in_flight(250.0) == 5


def test_every_repeats_until_and_changes_accumulate(tmp_path: Path) -> None:
    events, timeline = run(tmp_path, population={"num_clients": 1, "devices": EXACT_DEVICES}, algorithm=FEDAVG,
                           stop={"virtual_time_s": 700},
                           timeline=[{"every_s": 100, "until_s": 300, "type": "scale", "compute": 2.0}])
    assert list(timeline.time) == [100.0, 200.0, 300.0]
    # compute doubles at 100, 200, 300; rounds open at 0, 100, 160, 220, 260, 300, ...
    assert list(events.compute_s[:4]) == [80.0, 40.0, 40.0, 20.0]
    assert events[events.dispatched_at >= 300.0].compute_s.eq(10.0).all()


def test_offline_then_online_with_every_and_tags(tmp_path: Path) -> None:
    events, timeline = run(
        tmp_path, population={"num_clients": 3, "devices": EXACT_DEVICES,
                              "clients": [{"ids": [1, 2], "tags": ["phone"]}]},
        algorithm=FEDASYNC, mode={"type": "async", "concurrency": 3}, stop={"virtual_time_s": 800},
        timeline=[{"at_s": 150, "type": "offline", "clients": {"tag": "phone"}},
                  {"at_s": 450, "type": "online", "clients": {"tag": "phone", "fraction": 0.5}}])
    back = set(timeline.clients[1])
    assert len(back) == 1 and back <= {1, 2}
    for c in (1, 2):
        times = list(events[events.client == c].dispatched_at)
        if c in back:
            assert times == [0.0, 100.0, 450.0, 550.0, 650.0, 750.0]
        else:
            assert times == [0.0, 100.0]
    assert list(events[events.client == 0].dispatched_at) == [0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0]


def test_groups_by_range_device_class_and_fraction_are_seeded() -> None:
    s = scenario(population={"num_clients": 10, "device_mix": {"low_end_phone": 0.3, "edge_box": 0.7},
                             "clients": [{"ids": [4, 9], "tags": ["a"]}]})
    pop = s.population
    rng = lambda: numpy_rng(0, Stream.TIMELINE, 0)  # noqa: E731
    assert list(resolve_group(ClientGroup(range=(2, 5)), pop, rng())) == [2, 3, 4]
    assert list(resolve_group(ClientGroup(device_class="low_end_phone"), pop, rng())) == [0, 1, 2]
    assert list(resolve_group(ClientGroup(tag="a"), pop, rng())) == [4, 9]
    half = resolve_group(ClientGroup(fraction=0.5), pop, rng())
    assert len(half) == 5 and np.array_equal(half, resolve_group(ClientGroup(fraction=0.5), pop, rng()))
    assert set(resolve_group(ClientGroup(device_class="edge_box", fraction=0.3), pop, rng())) <= set(range(3, 10))
    assert len(resolve_group(ClientGroup(ids=[1, 2, 3], fraction=0.5), pop, rng())) == 2  # 1.5 rounds half up


@pytest.mark.parametrize("timeline, mode, message", [
    ([{"at_s": 1, "type": "concurrency", "value": 2}], {"type": "sync"}, "timeline[0].type: 'concurrency' needs mode"),
    ([{"at_s": 1, "type": "cohort", "size": 2}], {"type": "async"}, "timeline[0].type: 'cohort' needs mode.type sync"),
    ([{"at_s": 1, "type": "concurrency", "value": 9}], {"type": "async"}, "timeline[0].value: 9 exceeds"),
    ([{"at_s": 1, "type": "offline", "clients": {"tag": "gpu"}}], None, "timeline[0].clients.tag: no client has tag"),
    ([{"at_s": 1, "type": "offline", "clients": {"ids": [3]}}], None, "timeline[0].clients.ids: client 3 does not"),
    ([{"at_s": 1, "type": "offline", "clients": {"range": [0, 4]}}], None, "timeline[0].clients.range: stop 4"),
    ([{"at_s": 1, "type": "offline", "clients": {"range": [2, 1]}}], None, "needs stop > start"),
    ([{"at_s": 1, "type": "offline", "clients": {"device_class": "edge_box"}}], None,
     "is not in population.device_mix"),
    ([{"at_s": 1, "type": "offline", "clients": {"ids": [1], "tag": "x"}}], None, "choose one of ids, range, tag"),
    ([{"at_s": 1, "every_s": 5, "type": "offline"}], None, "give exactly one of at_s, every_s, at_version"),
    ([{"type": "offline"}], None, "give exactly one of at_s, every_s, at_version (got none)"),
    ([{"at_s": 1, "until_s": 5, "type": "offline"}], None, "start_s and until_s go with every_s"),
    ([{"every_s": 5, "type": "join", "clients": {"ids": [1]}}], None, "every_s: a join happens once"),
    ([{"at_s": 1, "type": "join"}], None, "timeline[0].clients: required field is missing"),
    ([{"at_s": 1, "type": "scale"}], None, "give at least one of compute, down_mbps"),
    ([{"at_s": 1, "type": "scale", "compute": -1}], None, "timeline[0].compute"),
    ([{"at_s": 1, "type": "cohort"}], {"type": "sync"}, "give exactly one of size, fraction"),
    ([{"at_s": 1, "type": "server_uplink"}], None, "timeline[0].mbps: required field is missing"),
    ([{"at_s": 1, "type": "server_uplink", "mbps": 1, "clients": {}}], None, "timeline[0].clients: unknown field"),
    ([{"at_s": 1, "type": "explode"}], None, "timeline[0]"),
    ([{"at_s": -1, "type": "offline"}], None, "timeline[0].at_s"),
])
def test_timeline_mistakes_are_one_line(timeline: list, mode: dict | None, message: str) -> None:
    algorithm = FEDASYNC if mode is not None and mode["type"] == "async" else FEDAVG
    sections: dict[str, Any] = {"timeline": timeline, "algorithm": algorithm,
                                "stop": {"virtual_time_s": 10}}
    if mode is not None:
        sections["mode"] = mode
    with pytest.raises(ScenarioError) as err:
        scenario(**sections)
    text = str(err.value)
    assert message in text and "\n" not in text


def test_unknown_event_type_lists_the_allowed_types() -> None:
    with pytest.raises(ScenarioError, match="scale.*set.*offline.*online.*join.*server_uplink.*concurrency.*cohort"):
        scenario(timeline=[{"at_s": 1, "type": "explode"}])


def test_scripted_devices_share_the_population_arrays_until_an_event_changes_one() -> None:
    """Without a change the timeline's devices are the population's arrays (one copy); the
    first change copies all five, so the population's stay as drawn: compute [1, 2] scaled x3
    for client 1 is [1, 6] for the clock and still [1, 2] for clients.parquet."""
    from fedclock.scheduling.devices import Devices
    from fedclock.scheduling.timeline import ScriptedDevices

    drawn = Devices(np.array([1.0, 2.0]), np.array([10.0, 20.0]), np.array([5.0, 5.0]), np.array([0.1, 0.2]))
    scripted = ScriptedDevices(drawn)
    assert scripted.compute is drawn.compute and scripted.memory_gb is drawn.memory_gb
    scripted.writable("compute")[1:] *= 3
    assert scripted.compute.tolist() == [1.0, 6.0] and drawn.compute.tolist() == [1.0, 2.0]
    assert scripted.down_mbps is not drawn.down_mbps and scripted.down_mbps.tolist() == [10.0, 20.0]
    scripted.writable("latency_s")[0] = 0.5
    assert scripted.latency_s.tolist() == [0.5, 0.2] and drawn.latency_s.tolist() == [0.1, 0.2]
