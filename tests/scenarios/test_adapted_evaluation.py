"""``evaluation.adapted`` in whole runs (inline backend): it adds the ``adapted_accuracy_*``
columns and changes nothing else, bit for bit (training, the clock, the events, every other
metric), in sync and async mode, for plain and personalized algorithms, vectorized or not;
with zero steps it is the global model's per-client accuracy; on a strongly non-IID
federation adaptation beats the global model on every paired seed; its mistakes are one line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError
from tests.conftest import scenario
from tests.scenarios.one_line import one_line_error
from tests.scenarios.runs import assert_resume_is_bit_identical

ADAPTED = ["adapted_accuracy_mean", "adapted_accuracy_p10", "adapted_accuracy_p90"]
QUIET = {"progress": False, "flush_every_s": 0}


def _run(out: Path, **sections: Any) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """The run's metrics (wall time dropped), events and client metrics (None: not written)."""
    run_scenario(scenario(**sections, output=QUIET), Runtime("inline"), out)
    client = out / "client_metrics.parquet"
    return (pd.read_parquet(out / "metrics.parquet").drop(columns="wall_time"), pd.read_parquet(out / "events.parquet"),
            pd.read_parquet(client) if client.exists() else None)


CASES = {
    "fedavg-sync": dict(algorithm={"name": "fedavg", "local_steps": 3, "batch_size": 8},
                        population={"num_clients": 4}, stop={"rounds": 3}),
    "fedasync-async-vectorized": dict(algorithm={"name": "fedasync", "local_steps": 3, "batch_size": 8},
                                      mode={"type": "async", "concurrency": 2}, population={"num_clients": 4},
                                      stop={"versions": 6}, evaluation={"every": 2},
                                      runtime={"backend": "inline", "vectorize": 2}),
    "spfl-sync": dict(algorithm={"name": "spfl", "local_steps": 2, "batch_size": 8},
                      population={"num_clients": 4}, stop={"rounds": 2}),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_option_changes_no_other_column_bit_for_bit(case: str, tmp_path: Path) -> None:
    sections = CASES[case]
    evaluation = {**sections.get("evaluation", {}), "per_client": True}
    off_m, off_e, off_c = _run(tmp_path / "off", **{**sections, "evaluation": evaluation})
    on = {**evaluation, "adapted": {"steps": 4, "lr": 0.1}}
    on_m, on_e, on_c = _run(tmp_path / "on", **{**sections, "evaluation": on})
    assert off_m[ADAPTED].isna().all().all() and on_m[ADAPTED].notna().all().all()
    pd.testing.assert_frame_equal(on_m.drop(columns=ADAPTED), off_m.drop(columns=ADAPTED), check_exact=True)
    pd.testing.assert_frame_equal(on_e, off_e, check_exact=True)
    assert off_c is not None and on_c is not None
    adapted_rows = ["adapted_accuracy", "adapted_loss"]
    pd.testing.assert_frame_equal(on_c.drop(columns=adapted_rows), off_c.drop(columns=adapted_rows), check_exact=True)
    assert off_c[adapted_rows].isna().all().all() and on_c[adapted_rows].notna().all().all()
    # the per-client rows and the metrics row agree: the mean over clients of one evaluation
    for version, rows in on_c.groupby("version"):
        mean = on_m.loc[on_m["version"] == version, "adapted_accuracy_mean"].item()
        assert rows["adapted_accuracy"].mean() == pytest.approx(mean, abs=1e-12)
    # adaptation moves the model (four steps at lr 0.1 change some client's test result)
    assert (on_c["adapted_loss"] != on_c["loss"]).any()
    # its own seeded stream: the same scenario gives the same adapted numbers
    again_m, _, _ = _run(tmp_path / "again", **{**sections, "evaluation": on})
    pd.testing.assert_frame_equal(again_m[ADAPTED], on_m[ADAPTED], check_exact=True)


def test_zero_steps_is_the_global_model_on_each_client_test_split(tmp_path: Path) -> None:
    """FedAvg's personalized model is the global model: with steps 0 the adapted columns are
    its personalized columns exactly, per client and in the summary."""
    m, _, c = _run(tmp_path, algorithm={"name": "fedavg", "local_steps": 3, "batch_size": 8},
                   population={"num_clients": 4}, stop={"rounds": 2},
                   evaluation={"per_client": True, "adapted": {"steps": 0}})
    for which in ("mean", "p10", "p90"):
        assert m[f"adapted_accuracy_{which}"].tolist() == m[f"personal_accuracy_{which}"].tolist()
    assert c is not None
    assert c["adapted_accuracy"].tolist() == c["accuracy"].tolist() and c["adapted_loss"].tolist() == c["loss"].tolist()


LEARNING: dict[str, Any] = dict(
    dataset={"name": "digits", "client_test_fraction": 0.3,
             "partition": {"type": "pathological", "classes_per_client": 2}},
    model={"name": "mlp", "hidden": [32]}, population={"num_clients": 10},
    algorithm={"name": "fedavg", "lr": 0.05, "batch_size": 16, "local_steps": 10}, stop={"rounds": 4},
)


def test_adaptation_beats_the_global_model_on_every_paired_seed(tmp_path: Path) -> None:
    """10 clients holding 2 digit classes each: the global FedAvg model must serve ten classes,
    a copy adapted for 10 steps on the client's own two classes does better on that client's
    test split. Ablation: the same seed with steps 0 (the global model itself); the two runs
    share every training number, so the difference is the adaptation alone."""
    gains = []
    for seed in (0, 1, 2):
        final = {}
        for steps in (10, 0):
            m, _, _ = _run(tmp_path / f"{seed}-{steps}", **LEARNING, seed=seed,
                           evaluation={"every": 4, "personalized": False, "adapted": {"steps": steps}})
            final[steps] = m.iloc[-1]
        assert final[10]["global_accuracy"] == final[0]["global_accuracy"]  # paired: the same training
        gains.append(final[10]["adapted_accuracy_mean"] - final[0]["adapted_accuracy_mean"])
    assert min(gains) > 0.15, gains  # more than 15 points on every seed (23 to 32 measured)


def test_adapted_without_client_test_split_is_one_line() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(dataset={"name": "digits", "client_test_fraction": 0}, evaluation={"personalized": False,
                                                                                   "adapted": {"steps": 2}})
    assert "evaluation.adapted: needs every client's own test split" in str(err.value)
    assert "\n" not in str(err.value)


def test_self_supervised_objective_is_refused_in_one_line() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(algorithm={"name": "fedavg", "objective": "simclr"}, evaluation={"adapted": {"steps": 2}})
    assert "evaluation.adapted" in str(err.value) and "allowed: supervised" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("adapted, names", [
    ("{steps: -1}", ["evaluation.adapted.steps", "greater than or equal to 0"]),
    ("{steps: 2, lr: 0}", ["evaluation.adapted.lr", "greater than 0"]),
    ("{steps: 2, momentum: 0.9}", ["evaluation.adapted.momentum"]),
], ids=["negative-steps", "zero-lr", "unknown-field"])
def test_bad_values_are_one_line_errors(adapted: str, names: list[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ndataset: {name: digits}\nalgorithm: {name: fedavg}\nstop: {rounds: 1}\n"
                    f"evaluation: {{adapted: {adapted}}}\n", encoding="utf-8")
    one_line_error(["validate", str(path)], *names)


def test_ids_of_the_adapted_rows_are_every_client_at_every_evaluation(tmp_path: Path) -> None:
    m, _, c = _run(tmp_path, population={"num_clients": 3}, stop={"rounds": 2},
                   evaluation={"per_client": True, "adapted": {"steps": 1}})
    assert c is not None and len(c) == 3 * len(m)
    assert np.array_equal(c["client"].to_numpy(), np.tile([0, 1, 2], len(m)))


def test_ray_gives_the_inline_numbers_with_two_executors(ray_runtime: Runtime, tmp_path: Path) -> None:
    """On Ray, two pooled executors share the clients' adaptations: every column, the adapted
    ones included, is the inline run's (each client's batches depend on the seed, the client
    and the version only)."""
    sections = {k: v for k, v in CASES["fedasync-async-vectorized"].items() if k != "runtime"}
    sections["evaluation"] = {"every": 2, "adapted": {"steps": 4, "lr": 0.1}}
    inline_m, inline_e, _ = _run(tmp_path / "inline", **sections, runtime={"backend": "inline"})
    run_scenario(scenario(**sections, runtime={"backend": "ray", "num_actors": 2, "placement": "pooled"},
                          output=QUIET), ray_runtime, tmp_path / "ray")
    ray_m = pd.read_parquet(tmp_path / "ray" / "metrics.parquet").drop(columns="wall_time")
    pd.testing.assert_frame_equal(ray_m, inline_m, check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ray" / "events.parquet"), inline_e, check_exact=True)


def test_a_resumed_run_keeps_the_adapted_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sections = dict(CASES["fedavg-sync"], stop={"rounds": 6},
                    evaluation={"every": 2, "per_client": True, "adapted": {"steps": 2}})
    plain = assert_resume_is_bit_identical(sections, tmp_path, monkeypatch, every=2, crash=5)
    assert pd.read_parquet(plain / "metrics.parquet")["adapted_accuracy_mean"].notna().all()
