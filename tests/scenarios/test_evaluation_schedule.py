"""What is evaluated when: ``evaluation.at_rounds`` adds evaluations at exactly those server
versions, ``evaluation.per_client`` writes a row per client per evaluation, and
``analysis: {type: cka, at_rounds: [...]}`` measures after those versions; all survive a
crash and resume like the other result files."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime, Session
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError
from tests.conftest import scenario

SECTIONS: dict[str, Any] = dict(
    population={"num_clients": 4}, model={"name": "mlp", "hidden": [8]},
    algorithm={"name": "fedavg", "local_steps": 3, "batch_size": 16},
    stop={"rounds": 7}, evaluation={"every": 5, "at_rounds": [1, 3], "per_client": True},
)


def test_at_rounds_and_per_client_rows(tmp_path: Path) -> None:
    run_scenario(scenario(**SECTIONS), Runtime("inline"), tmp_path)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    # start, the two chosen versions, every 5th, and the end
    assert list(metrics["version"]) == [0, 1, 3, 5, 7]
    rows = pd.read_parquet(tmp_path / "client_metrics.parquet")
    assert len(rows) == 4 * len(metrics)  # clients x evaluations
    assert list(rows.columns) == ["client", "version", "round", "virtual_time", "accuracy", "loss", "num_test",
                                  "adapted_accuracy", "adapted_loss"]  # the last two null without evaluation.adapted
    for _, m in metrics.iterrows():
        at = rows[rows["version"] == m["version"]]
        assert sorted(at["client"]) == [0, 1, 2, 3] and (at["virtual_time"] == m["virtual_time"]).all()
        # the per-client rows are the numbers the metrics' personalized mean and p10 summarize
        assert at["accuracy"].mean() == pytest.approx(m["personal_accuracy_mean"], abs=1e-12)
        assert np.quantile(at["accuracy"], 0.1) == pytest.approx(m["personal_accuracy_p10"], abs=1e-12)
    assert (rows["num_test"] > 0).all() and rows["loss"].notna().all()
    assert rows.groupby("client")["accuracy"].nunique().min() > 1  # each client's accuracy moves over time


def test_without_per_client_no_file_and_default_schedule(tmp_path: Path) -> None:
    run_scenario(scenario(**{**SECTIONS, "evaluation": {"every": 5}}), Runtime("inline"), tmp_path)
    assert list(pd.read_parquet(tmp_path / "metrics.parquet")["version"]) == [0, 5, 7]
    assert not (tmp_path / "client_metrics.parquet").exists()


def test_cka_at_chosen_rounds(tmp_path: Path) -> None:
    sections = {**SECTIONS, "evaluation": {"every": 10},
                "analysis": {"type": "cka", "at_rounds": [1, 6], "samples": 32}}
    run_scenario(scenario(**sections), Runtime("inline"), tmp_path)
    cka = pd.read_parquet(tmp_path / "cka.parquet")
    assert sorted(cka["version"].unique()) == [1, 6]
    assert list(pd.read_parquet(tmp_path / "metrics.parquet")["version"]) == [0, 1, 6, 7]  # CKA versions evaluated
    assert len(cka) == 2 * 4 * cka["layer"].nunique()  # versions x clients x layers
    early, late = (cka[cka["version"] == v].set_index(["client", "layer"])["cka"] for v in (1, 6))
    assert not np.allclose(early.to_numpy(), late.sort_index().reindex(early.index).to_numpy())
    # by default CKA is measured once, at the end
    run_scenario(scenario(**{**sections, "analysis": {"type": "cka", "samples": 32}}), Runtime("inline"),
                 tmp_path / "end")
    end = pd.read_parquet(tmp_path / "end" / "cka.parquet")
    last = pd.read_parquet(tmp_path / "end" / "metrics.parquet").iloc[-1]
    assert list(end["version"].unique()) == [7] and list(end["round"].unique()) == [last["round"]]
    metrics = pd.read_parquet(tmp_path / "metrics.parquet").set_index("version")
    assert all(cka[cka["version"] == v]["round"].eq(metrics.loc[v, "round"]).all() for v in (1, 6))


def test_cka_at_version_zero_compares_the_first_round_with_the_initial_model(tmp_path: Path) -> None:
    """FedReCo Fig. 2's "round 1": every client trains once from the initial model (version
    0), compared with that model; the rows equal a direct measurement from init_server's weights."""
    from fedclock.scenarios.analysis import cka_rows
    from fedclock.scenarios.experiment import make_algorithm
    from fedclock.scenarios.data.federation import build_federation
    from fedclock.scheduling.rng import Stream, torch_rng

    sc = scenario(**{**SECTIONS, "evaluation": {"every": 10},
                     "analysis": {"type": "cka", "at_rounds": [0, 2], "samples": 32}})
    run_scenario(sc, Runtime("inline"), tmp_path)
    cka = pd.read_parquet(tmp_path / "cka.parquet")
    assert sorted(cka["version"].unique()) == [0, 2] and (cka[cka["version"] == 0]["round"] == 0).all()
    federation = build_federation(sc.dataset, sc.population.num_clients, sc.seed)
    algorithm = make_algorithm(sc, federation)
    initial = algorithm.init_server(torch_rng(sc.seed, Stream.INIT))
    assert sc.analysis is not None
    direct = cka_rows(algorithm, federation, sc.analysis, sc.seed, 0,
                      lambda c: algorithm.payload_for(initial, c), lambda c: None, 0)
    got = cka[cka["version"] == 0].sort_values(["client", "layer_index"])["cka"].to_numpy()
    want = pd.DataFrame(direct).sort_values(["client", "layer_index"])["cka"].to_numpy()
    assert np.allclose(got, want, atol=1e-9)
    assert not np.allclose(got, cka[cka["version"] == 2].sort_values(["client", "layer_index"])["cka"].to_numpy())


class Crash(Exception):
    """Stands for the driver dying."""


def test_per_client_rows_and_cka_survive_crash_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sections = {**SECTIONS, "analysis": {"type": "cka", "at_rounds": [2, 6], "samples": 16},
                "output": {"checkpoint_every": 2, "progress": False}}
    plain = scenario(**sections)
    run_scenario(plain, Runtime("inline"), tmp_path / "plain")
    original = Session.apply

    def apply(self: Session, tasks: Any) -> int:
        got = original(self, tasks)
        if got >= 5:
            raise Crash(f"version {got}")
        return got

    monkeypatch.setattr(Session, "apply", apply)
    with pytest.raises(Crash):
        run_scenario(plain, Runtime("inline"), tmp_path / "crashed")
    monkeypatch.undo()
    assert sorted(pd.read_parquet(tmp_path / "crashed" / "cka.parquet")["version"].unique()) == [2]
    run_scenario(plain, Runtime("inline"), tmp_path / "crashed", resume=True)
    for name in ("client_metrics", "cka"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "plain" / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "crashed" / f"{name}.parquet"), check_exact=True)


@pytest.mark.parametrize("sections, expected", [
    ({"evaluation": {"per_client": True, "personalized": False}},
     "evaluation.per_client: needs evaluation.personalized: true"),
    ({"evaluation": {"at_rounds": [2, 9]}, "stop": {"rounds": 5}},
     "evaluation.at_rounds: server version 9 is never reached (the run stops by version 5; allowed: 1..5)"),
    ({"analysis": {"type": "cka", "at_rounds": [0, 9]}, "stop": {"rounds": 5}},
     "analysis.at_rounds: server version 9 is never reached (the run stops by version 5; allowed: 0..5)"),
    ({"analysis": {"type": "cka", "at_rounds": [6]}, "stop": {"rounds": 4, "versions": 3}},
     "analysis.at_rounds: server version 6 is never reached (the run stops by version 3"),
    ({"evaluation": {"at_rounds": [0]}}, "evaluation.at_rounds[0]: Input should be greater than or equal to 1"),
    ({"analysis": {"type": "cka", "at_rounds": []}}, "analysis.at_rounds: List should have at least 1 item"),
], ids=["per-client-needs-personalized", "beyond-rounds", "cka-beyond-rounds", "cka-beyond-versions", "zero",
        "empty"])
def test_schedule_mistakes_are_one_line(sections: dict[str, Any], expected: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(**sections)
    assert expected in str(err.value) and "\n" not in str(err.value)
