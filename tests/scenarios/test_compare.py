"""`fedclock compare`: time/versions to target, totals and files, on hand-written results."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedclock.scenarios.cli import main
from fedclock.scenarios.compare import across_seeds, common_target, compare_runs, reach
from fedclock.scenarios.rundirs import ResultsError, find_runs


def _write_run(folder: Path, times: list[float], versions: list[int], acc: list[float],
               events: pd.DataFrame | None = None, algorithm: str = "fedavg", mode: str = "sync") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    n = len(times)
    pd.DataFrame({"virtual_time": times, "wall_time": [0.5 * i for i in range(n)], "version": versions,
                  "round": versions, "global_accuracy": acc, "personal_accuracy_mean": [a + 0.05 for a in acc],
                  "personal_accuracy_p10": [a - 0.1 for a in acc], "bytes_total": [100 * v for v in versions]}
                 ).to_parquet(folder / "metrics.parquet")
    if events is not None:
        events.to_parquet(folder / "events.parquet")
    resolved = {"name": folder.name, "algorithm": {"name": algorithm}, "mode": {"type": mode}}
    (folder / "scenario.resolved.yaml").write_text(yaml.safe_dump(resolved))
    return folder


def _events(status: list[str], staleness: list[float | None], finished: list[float]) -> pd.DataFrame:
    n = len(status)
    return pd.DataFrame({"client": list(range(n)), "dispatched_at": [0.0] * n, "finished_at": finished,
                         "status": status, "staleness": pd.array(staleness, dtype="Int64"),
                         "bytes_down": [1000] * n,
                         "bytes_up": [400 if s in ("applied", "dropped") else 0 for s in status]})


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    # run a crosses 0.8 at its third evaluation (t=30, version 3); run b at t=12, version 6; run c never
    _write_run(tmp_path / "suite" / "a", [0, 10, 20, 30, 40], [0, 1, 2, 3, 4], [0.1, 0.5, 0.79, 0.81, 0.85],
               _events(["applied", "applied", "dropped", "unfinished"], [0, 0, None, None], [5.0, 6.0, 7.0, 41.5]))
    _write_run(tmp_path / "suite" / "b", [0, 4, 8, 12, 16], [0, 2, 4, 6, 8], [0.1, 0.6, 0.7, 0.9, 0.88],
               _events(["applied", "applied", "applied"], [0, 2, 4], [1.0, 2.0, 3.0]), "fedasync", "async")
    _write_run(tmp_path / "suite" / "c", [0, 50], [0, 1], [0.2, 0.64])
    return tmp_path / "suite"


def test_reach_first_evaluation_at_or_above_target() -> None:
    m = pd.DataFrame({"virtual_time": [0.0, 5.0, 9.0, 12.0], "version": [0, 1, 2, 3],
                      "global_accuracy": [0.2, 0.8, 0.7, 0.95]})
    assert reach(m, 0.8) == (5.0, 1)  # reaching exactly the target counts
    assert reach(m, 0.9) == (12.0, 3)
    t, v = reach(m, 0.99)
    assert math.isnan(t) and v is None


def test_compare_rows_with_targets(suite: Path) -> None:
    runs = find_runs([suite])
    assert [r.name for r in runs] == ["a", "b", "c"]
    frame = compare_runs(runs, [0.8])
    a, b, c = (frame.iloc[i] for i in range(3))
    assert a["time_to_0.8"] == 30.0 and a["versions_to_0.8"] == 3
    assert b["time_to_0.8"] == 12.0 and b["versions_to_0.8"] == 6
    assert math.isnan(c["time_to_0.8"]) and c["versions_to_0.8"] is pd.NA
    assert a["global_accuracy"] == 0.85 and b["global_accuracy"] == 0.88 and b["best_global_accuracy"] == 0.9
    # area under the curve: the mean over the evaluations, version 0 included
    assert a["auc_global_accuracy"] == pytest.approx((0.1 + 0.5 + 0.79 + 0.81 + 0.85) / 5)
    assert b["auc_global_accuracy"] == pytest.approx((0.1 + 0.6 + 0.7 + 0.9 + 0.88) / 5)
    assert c["auc_global_accuracy"] == pytest.approx(0.42)
    assert a["personal_accuracy_mean"] == pytest.approx(0.90) and a["personal_accuracy_p10"] == pytest.approx(0.75)
    assert (a["algorithm"], a["mode"], b["algorithm"], b["mode"]) == ("fedavg", "sync", "fedasync", "async")
    # totals from the events: bytes down for every task, up for applied and dropped
    assert a["bytes_moved"] == 4 * 1000 + 3 * 400 and a["tasks_applied"] == 2 and a["dropped"] == 1
    assert a["virtual_time"] == 41.5  # the last event ends after the last evaluation
    assert b["mean_staleness"] == pytest.approx(2.0) and a["mean_staleness"] == 0.0
    assert b["versions"] == 8 and b["wall_time"] == 2.0
    # without events: totals from the metrics
    assert c["bytes_moved"] == 100 and math.isnan(c["mean_staleness"]) and c["virtual_time"] == 50.0


def test_default_target_is_the_common_best(suite: Path) -> None:
    runs = find_runs([suite])
    assert common_target(runs) == 0.64
    frame = compare_runs(runs)
    assert [c for c in frame.columns if c.startswith("time_to_")] == ["time_to_0.64"]
    assert frame["versions_to_0.64"].tolist() == [2, 4, 1]  # a: 0.79 at v2, b: 0.7 at v4
    assert not frame["time_to_0.64"].isna().any()


def test_cli_compare_prints_and_writes(suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert main(["compare", str(suite / "a"), str(suite / "b"), "--target", "0.8", "--target", "0.89",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "s to 0.8" in text and "ver. to 0.89" in text and "fedasync" in text and "AUC %" in text
    parquet = pd.read_parquet(out / "compare.parquet")
    csv = pd.read_csv(out / "compare.csv")
    assert parquet["run"].tolist() == csv["run"].tolist() == ["a", "b"]
    assert parquet["versions_to_0.89"].tolist()[1] == 6 and pd.isna(parquet["versions_to_0.89"].tolist()[0])
    assert csv["time_to_0.8"].tolist() == [30.0, 12.0]
    # one suite directory: files land in it
    assert main(["compare", str(suite)]) == 0
    assert (suite / "compare.parquet").is_file() and (suite / "compare.csv").is_file()


def test_same_run_names_in_two_suites_are_prefixed(suite: Path, tmp_path: Path) -> None:
    _write_run(tmp_path / "other" / "a", [0, 1], [0, 1], [0.1, 0.2])
    names = [r.name for r in find_runs([suite, tmp_path / "other"])]
    assert names == ["suite/a", "b", "c", "other/a"]


@pytest.mark.parametrize("case", ["missing", "empty", "corrupt", "columns", "target"])
def test_cli_compare_errors_are_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    args = ["compare", str(folder)]
    expect = str(folder)
    if case == "missing":
        args = ["compare", str(tmp_path / "nope")]
        expect = "nope: no such directory"
    elif case == "empty":
        expect = "no results found"
    elif case == "corrupt":
        _write_run(folder, [0, 1], [0, 1], [0.1, 0.2])
        (folder / "metrics.parquet").write_bytes((folder / "metrics.parquet").read_bytes()[:40])
        expect = "metrics.parquet: not a readable Parquet file"
    elif case == "columns":
        pd.DataFrame({"x": [1]}).to_parquet(folder / "metrics.parquet")
        expect = "missing column(s) virtual_time, version, global_accuracy"
    else:
        _write_run(folder, [0, 1], [0, 1], [0.1, 0.2])
        args += ["--target", "1.5"]
        expect = "--target: must be an accuracy in (0, 1]"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedclock: error: ") and expect in err
    if case != "target":
        with pytest.raises(ResultsError):
            find_runs([folder if case != "missing" else tmp_path / "nope"])


def test_personal_metric_picks_the_first_version_at_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """FedReCo's timing table is personalized: here the global model (a random head) never
    gets near 0.6 while the personalized accuracy crosses it at version 2, not at version 3
    where it is highest, nor at version 1 where only the global accuracy rises."""
    folder = tmp_path / "reco"
    folder.mkdir()
    pd.DataFrame({"virtual_time": [0.0, 4.0, 9.0, 13.0], "wall_time": [0.0] * 4, "version": [0, 1, 2, 3],
                  "round": [0, 0, 1, 2], "global_accuracy": [0.1, 0.3, 0.12, 0.11],
                  "personal_accuracy_mean": [0.1, 0.45, 0.6, 0.8], "personal_accuracy_p10": [0.0] * 4}
                 ).to_parquet(folder / "metrics.parquet")
    runs = find_runs([folder])
    assert reach(runs[0].metrics, 0.6, "personal") == (9.0, 2)
    frame = compare_runs(runs, [0.6], metric="personal")
    assert frame.loc[0, "time_to_personal_0.6"] == 9.0 and frame.loc[0, "versions_to_personal_0.6"] == 2
    assert pd.isna(compare_runs(runs, [0.6])["versions_to_0.6"][0])  # the global metric never gets there
    assert compare_runs(runs, metric="personal").columns.str.startswith("time_to_personal_0.8").any()  # common target
    assert main(["compare", str(folder), "--target", "0.6", "--metric", "personal"]) == 0
    assert "mean personalized accuracy >= T" in capsys.readouterr().out
    # a run without the personalized metric: a one-line error naming it
    _write_run(tmp_path / "global_only", [0, 1], [0, 1], [0.1, 0.2])
    frame = pd.read_parquet(tmp_path / "global_only" / "metrics.parquet")
    frame.assign(personal_accuracy_mean=float("nan")).to_parquet(tmp_path / "global_only" / "metrics.parquet")
    assert main(["compare", str(folder), str(tmp_path / "global_only"), "--metric", "personal"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--metric personal: run 'global_only' has no personal_accuracy_mean" in err


def test_seeds_fold_into_mean_and_std(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three seed directories of run x: one row of means with sample stds; a target one seed
    never reached is averaged over the two that did and counted in reached_T."""
    accs = {0: [0.1, 0.5, 0.7], 1: [0.1, 0.6, 0.9], 2: [0.1, 0.4, 0.5]}
    for seed, acc in accs.items():
        _write_run(tmp_path / "suite" / "x" / f"seed_{seed}", [0, 10 + seed, 20 + seed], [0, 1, 2], acc)
        resolved = tmp_path / "suite" / "x" / f"seed_{seed}" / "scenario.resolved.yaml"
        resolved.write_text(yaml.safe_dump({"name": "x", "seed": seed, "algorithm": {"name": "fedavg"},
                                            "mode": {"type": "sync"}}))
    _write_run(tmp_path / "suite" / "y", [0, 5], [0, 1], [0.1, 0.65])
    runs = find_runs([tmp_path / "suite"])
    assert [(r.group, r.seed) for r in runs] == [("x", 0), ("x", 1), ("x", 2), ("y", None)]
    folded = across_seeds(compare_runs(runs, [0.6])).set_index("run")
    assert folded.loc["x", "seeds"] == 3 and folded.loc["y", "seeds"] == 1
    assert folded.loc["x", "global_accuracy"] == pytest.approx(0.7)
    assert folded.loc["x", "global_accuracy_std"] == pytest.approx(0.2)  # sample std of 0.7, 0.9, 0.5
    assert folded.loc["x", "time_to_0.6"] == pytest.approx((20 + 11) / 2)  # seed 0 at t=20, seed 1 at t=11
    assert folded.loc["x", "reached_0.6"] == 2 and folded.loc["y", "global_accuracy_std"] == 0.0
    assert main(["compare", str(tmp_path / "suite"), "--target", "0.6"]) == 0
    text = capsys.readouterr().out
    assert "70.00 ± 20.00" in text and "(2/3)" in text
    assert main(["compare", str(tmp_path / "suite"), "--per-seed"]) == 0
    assert len(pd.read_parquet(tmp_path / "suite" / "compare.parquet")) == 4


def test_adapted_accuracy_column_only_when_a_run_has_it(tmp_path: Path) -> None:
    """``evaluation.adapted`` runs get their final mean adapted accuracy in the table; runs
    without it leave the cell empty, and a suite of runs without it has no such column."""
    plain = _write_run(tmp_path / "s" / "plain", [0, 10], [0, 1], [0.2, 0.5])
    adapted = _write_run(tmp_path / "s" / "adapted", [0, 10], [0, 1], [0.2, 0.5])
    metrics = pd.read_parquet(adapted / "metrics.parquet")
    metrics["adapted_accuracy_mean"] = [0.3, 0.72]
    metrics.to_parquet(adapted / "metrics.parquet")
    frame = compare_runs(find_runs([tmp_path / "s"]))
    by_name = frame.set_index("dir")
    assert by_name.loc["adapted", "adapted_accuracy_mean"] == 0.72
    assert math.isnan(by_name.loc["plain", "adapted_accuracy_mean"])
    assert "adapted_accuracy_mean" not in compare_runs(find_runs([plain])).columns
