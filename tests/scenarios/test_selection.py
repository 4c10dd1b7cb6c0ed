"""The ``selection:`` section end to end: one-line errors for bad settings, a user's selector
beside the scenario file on the inline backend and on Ray actors, a resumed ``oort`` run equal
to an uninterrupted one, over-commitment's cancelled tasks (never computed), and the
participation metrics."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime, Session
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.participation import jain_index
from tests.conftest import scenario
from tests.scenarios.test_bad_input import assert_one_line_error, validate_data
from tests.scenarios.runs import assert_resume_is_bit_identical

BASE: dict[str, Any] = {
    "name": "sel", "dataset": {"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
    "model": {"name": "mlp", "hidden": [8]},
    "population": {"num_clients": 10, "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200}}},
    "algorithm": {"name": "fedavg", "lr": 0.1, "local_steps": 3, "batch_size": 16},
    "mode": {"type": "sync", "cohort_size": 3}, "stop": {"rounds": 8}, "evaluation": {"personalized": False},
    "output": {"progress": False}, "seed": 5,
}


@pytest.mark.parametrize("selection, mode, names", [
    ({"name": "orrt"}, None, ["selection.name", "unknown selection 'orrt'", "oort"]),
    ({"name": "oort", "round_penalty": -1}, None, ["selection.round_penalty"]),
    ({"name": "oort", "exploraton_factor": 0.5}, None, ["selection.exploraton_factor"]),
    ({"name": "power_of_choice"}, None, ["selection.disclose", "data_size"]),
    ({"name": "fedcs", "disclose": ["resources"]}, None, ["selection.deadline_s", "mode.deadline_s"]),
    ({"name": "uniform", "d": 3}, None, ["selection.d", "uniform selection has no settings"]),
    ({"name": "oort", "disclose": ["gps"]}, None, ["selection.disclose", "resources, data_size"]),
    ({"name": "oort"}, {"type": "sync", "cohort_size": 3, "overcommit": 0.5}, ["mode.overcommit"]),
    ({"name": "oort"}, {"type": "sync", "cohort_size": 3, "deadline_s": 1.0, "overcommit": 1.3,
                        "late_results": "include"}, ["late_results", "overcommit"]),
], ids=["unknown", "param-range", "param-typo", "needs-data-size", "fedcs-deadline", "uniform-params",
        "disclose-value", "overcommit-below-1", "overcommit-include"])
def test_bad_selection_settings_are_one_line_errors(selection: dict[str, Any], mode: dict[str, Any] | None,
                                                     names: list[str]) -> None:
    data = {**BASE, "selection": selection, **({"mode": mode} if mode else {})}
    assert_one_line_error(validate_data(data), *names)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of one inline run of BASE (default selection), run once for the module."""
    out = tmp_path_factory.mktemp("base") / "default"
    run_scenario(scenario(**BASE), Runtime("inline"), out)
    return out


def test_selection_is_settable_by_set_and_uniform_changes_nothing(tmp_path: Path, base_run: Path) -> None:
    run_scenario(scenario(**BASE, selection={"name": "uniform"}), Runtime("inline"), tmp_path / "uniform")
    for table in ("events", "metrics"):
        a = pd.read_parquet(base_run / f"{table}.parquet").drop(columns=["wall_time"], errors="ignore")
        b = pd.read_parquet(tmp_path / "uniform" / f"{table}.parquet").drop(columns=["wall_time"], errors="ignore")
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    file = tmp_path / "s.yaml"
    import yaml
    file.write_text(yaml.safe_dump(BASE))
    assert main(["validate", str(file), "--set", "selection.name=oort", "--set", "selection.round_penalty=0"]) == 0


USER_SELECTORS = '''
import numpy as np
from fedclock.scheduling.selection import Selector


class LowestIds(Selector):
    """Picks the k lowest client ids among the candidates (a deterministic test selector)."""

    def select(self, view, candidates, k):
        return candidates[:k]


class NotASelector:
    pass


class Outsider(Selector):
    """Returns a client that does not exist."""

    def select(self, view, candidates, k):
        return [int(candidates[0]), 10**6]


class Fractions(Selector):
    def select(self, view, candidates, k):
        return candidates[:k] + 0.5


class Peeking(Selector):
    def select(self, view, candidates, k):
        view.resources  # not disclosed: raises
        return candidates[:k]
'''


def _user_file(tmp_path: Path, tag: str, name: str, backend: str) -> Path:
    (tmp_path / f"{tag}_sel.py").write_text(USER_SELECTORS)
    import yaml
    data = {**BASE, "population": {"num_clients": 6}, "stop": {"rounds": 3},
            "selection": {"name": f"{tag}_sel:{name}"}, "runtime": {"backend": backend}}
    file = tmp_path / "scenario.yaml"
    file.write_text(yaml.safe_dump(data))
    return file


def test_a_users_selector_beside_the_file_runs_inline(tmp_path: Path) -> None:
    file = _user_file(tmp_path, "inl", "LowestIds", "inline")
    assert main(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    assert sorted(events[events["round"] == 0].client) == [0, 1, 2]


def test_a_users_selector_runs_on_ray_actors(tmp_path: Path, ray_runtime: Any) -> None:
    from fedclock.scenarios.loader import load_suite

    file = _user_file(tmp_path, "ray", "LowestIds", "ray")
    (run_,) = load_suite(file).runs
    run_scenario(run_, ray_runtime, tmp_path / "out")
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    assert sorted(events[events["round"] == 0].client) == [0, 1, 2] and len(events) == 9


def test_a_bad_user_selector_is_one_line_and_peeking_is_refused(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    file = _user_file(tmp_path, "bad", "NotASelector", "inline")
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "selection.name" in err and "not a subclass" in err
    from fedclock.scenarios.loader import load_suite
    from fedclock.scheduling.selection import NotDisclosed

    file = _user_file(tmp_path, "peek", "Peeking", "inline")
    (run_,) = load_suite(file).runs
    with pytest.raises(NotDisclosed):
        run_scenario(run_, Runtime("inline"), tmp_path / "peek")


@pytest.mark.parametrize("name, why", [("Outsider", "[1000000] are not candidates"), ("Fractions", "float64")])
def test_a_selector_returning_invalid_clients_is_its_own_one_line_error(tmp_path: Path, name: str, why: str) -> None:
    """It ended in a traceback; now one line naming the selector, what it must return and why."""
    from tests.scenarios.one_line import one_line_error

    file = _user_file(tmp_path, f"inv{name.lower()}", name, "inline")
    one_line_error(["run", str(file), "--out", str(tmp_path / "out"), "--quiet"], f"selector {name!r}",
                   "must return 1 to", why)


def test_a_resumed_oort_run_equals_an_uninterrupted_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sections = {k: v for k, v in BASE.items() if k not in ("name", "output")}
    sections["selection"] = {"name": "oort", "pacer_step": 2}
    plain = assert_resume_is_bit_identical(sections, tmp_path, monkeypatch, every=3, crash=6)
    events = pd.read_parquet(plain / "events.parquet")
    uniform = scenario(**{**sections, "selection": {"name": "uniform"}})
    run_scenario(uniform, Runtime("inline"), tmp_path / "uniform")
    assert not events.client.equals(pd.read_parquet(tmp_path / "uniform" / "events.parquet").client)


def test_overcommit_closes_at_the_kth_arrival_and_never_computes_the_rest(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Stateful clients (scaffold's control variates): a cancelled task is never started, so
    its client's state stays as before it (the stated rule)."""
    started: list[int] = []
    original = Session.start

    def start(self: Session, task: Any) -> None:
        started.append(task.index)
        original(self, task)

    monkeypatch.setattr(Session, "start", start)
    sections = {**BASE, "algorithm": {"name": "scaffold", "lr": 0.1, "local_steps": 3, "batch_size": 16},
                "mode": {"type": "sync", "cohort_size": 2, "overcommit": 1.3}}
    run_scenario(scenario(**sections), Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    for _, rows in events.groupby("round"):
        assert len(rows) == 3  # ceil(1.3 x 2)
        applied, cancelled = rows[rows.status == "applied"], rows[rows.status == "cancelled"]
        assert len(applied) == 2 and len(cancelled) == 1
        close = applied.finished_at.max()  # the second arrival
        assert (cancelled.dispatched_at + cancelled.download_s + cancelled.compute_s + cancelled.upload_s
                >= close).all()
        assert (cancelled.finished_at == close).all() and (cancelled.bytes_up == 0).all()
    assert sorted(started) == sorted(events[events.status == "applied"].task)  # cancelled: never computed
    cancelled = events[events.status == "cancelled"]
    spent = np.clip(cancelled.finished_at - cancelled.dispatched_at - cancelled.download_s, 0, cancelled.compute_s)
    assert metrics.wasted_compute_s.iloc[-1] == pytest.approx(spent.sum())
    assert metrics.tasks_cancelled.iloc[-1] == len(cancelled) == 8
    clients = pd.read_parquet(tmp_path / "clients.parquet")
    assert clients.tasks_cancelled.sum() == 8


def test_participation_metrics_by_hand(base_run: Path) -> None:
    events = pd.read_parquet(base_run / "events.parquet")
    last = pd.read_parquet(base_run / "metrics.parquet").iloc[-1]
    clients = pd.read_parquet(base_run / "clients.parquet")
    counts = np.bincount(events.client, minlength=10)
    assert jain_index(np.array([1, 1, 1, 1])) == 1.0 and jain_index(np.array([4, 0, 0, 0])) == 0.25
    assert jain_index(np.array([2, 1, 1, 0])) == pytest.approx(16 / 24)
    assert last.participation_jain == pytest.approx(counts.sum() ** 2 / (10 * (counts ** 2).sum()))
    assert last.never_picked_fraction == pytest.approx(np.mean(counts == 0))
    seen = clients.num_train[clients.tasks_applied > 0].sum() / clients.num_train.sum()
    assert last.data_seen_fraction == pytest.approx(seen)


@pytest.mark.parametrize("mode", [{"type": "async", "concurrency": 2},
                                  {"type": "async", "concurrency": 2, "aggregation": {"window_s": 1.0}}],
                         ids=["async-refill", "windowed"])
def test_a_selector_picks_async_refills_and_window_cohorts(tmp_path: Path, mode: dict[str, Any]) -> None:
    (tmp_path / "win_sel.py").write_text(USER_SELECTORS.replace("candidates[:k]", "candidates[-k:]", 1))
    import yaml

    from fedclock.scenarios.loader import load_suite
    data = {**BASE, "population": {"num_clients": 6}, "mode": mode, "stop": {"versions": 6},
            "algorithm": {"name": "fedasync", "lr": 0.1, "local_steps": 3, "batch_size": 16},
            "selection": {"name": "win_sel:LowestIds"}}
    file = tmp_path / "scenario.yaml"
    file.write_text(yaml.safe_dump(data))
    (run_,) = load_suite(file).runs
    run_scenario(run_, Runtime("inline"), tmp_path / "out")
    events = pd.read_parquet(tmp_path / "out" / "events.parquet").sort_values("task")
    assert sorted(events.client.iloc[:2]) == [4, 5]  # the highest ids first, as the selector says
