"""``seeds:``/``repeats:``: every run once per seed, one directory per (run, seed), a summary
row per (run, seed), and the same tables for the same seed list."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedclock.scenarios.cli import main
from fedclock.scenarios.loader import ScenarioError, parse_suite

BASE = {"name": "seeded", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
        "population": {"num_clients": 3}, "stop": {"rounds": 3}, "algorithm": {"name": "fedavg"},
        "runs": [{"name": "a"}, {"name": "b", "algorithm": {"name": "fedavg", "lr": 0.02}}]}

FILE = """\
name: seeded
seeds: [4, 1]
dataset: {name: digits}
model: {name: mlp, hidden: [8]}
population: {num_clients: 3}
algorithm: {name: fedavg, local_steps: 3}
stop: {rounds: 3}
runs:
  - {name: a}
  - {name: b, algorithm: {name: fedprox, mu: 0.1, local_steps: 3}}
"""
PER_RUN_FILES = ("metrics.parquet", "events.parquet", "clients.parquet", "timeline.parquet", "scenario.resolved.yaml")


def test_seeds_expand_every_run_once_per_seed() -> None:
    suite = parse_suite({**BASE, "seeds": [7, 2, 9]}, "s")
    assert suite.seeds == (7, 2, 9)
    assert [(r.name, r.seed) for r in suite.runs] == [("a", 7), ("a", 2), ("a", 9), ("b", 7), ("b", 2), ("b", 9)]
    assert {r.algorithm.params.lr for r in suite.runs if r.name == "b"} == {0.02}
    repeated = parse_suite({**BASE, "repeats": 2}, "s")
    assert repeated.seeds == (0, 1) and [r.seed for r in repeated.runs] == [0, 1, 0, 1]
    assert parse_suite(BASE, "s").seeds is None and len(parse_suite(BASE, "s").runs) == 2
    # --set replaces whichever of seeds/repeats the file gives
    assert parse_suite({**BASE, "repeats": 3}, "s", ["seeds=[5]"]).seeds == (5,)
    assert parse_suite({**BASE, "seeds": [1, 2]}, "s", ["repeats=1"]).seeds == (0,)
    assert parse_suite({**BASE, "seed": 0, "seeds": [3]}, "s").runs[0].seed == 3  # seed: 0 is the default


@pytest.mark.parametrize("extra, overrides, expected", [
    ({"seeds": [1], "repeats": 2}, [], "seeds: and repeats: exclude each other"),
    ({"seeds": [1, 2], "seed": 4}, [], "seed: 4 cannot be combined with seeds:/repeats:"),
    ({"repeats": 2}, ["seed=4"], "seed: 4 cannot be combined"),
    ({"seeds": []}, [], "seeds: must be a non-empty list of whole numbers"),
    ({"seeds": [1, "x"]}, [], "seeds: must be a non-empty list"),
    ({"seeds": 3}, [], "seeds: must be a non-empty list"),
    ({"seeds": [2, 5, 2]}, [], "seeds: each seed may appear once (repeated: 2)"),
    ({"repeats": 0}, [], "repeats: must be a whole number from 1 to"),
    ({"repeats": True}, [], "repeats: must be a whole number"),
], ids=["both", "seed", "set-seed", "empty", "text", "scalar", "repeated", "zero", "bool"])
def test_seed_mistakes_are_one_line(extra: dict, overrides: list[str], expected: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_suite({**BASE, **extra}, "s", overrides)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_seeds_in_a_run_entry_are_refused() -> None:
    runs = [{"name": "a", "seeds": [1, 2]}]
    with pytest.raises(ScenarioError, match=r"runs\[0\]\.seeds: set seeds: at the top level"):
        parse_suite({**BASE, "runs": runs}, "s")


def _run(tmp_path: Path, text: str, out: str, *args: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["run", str(path), "--backend", "inline", "--quiet", "--out", str(tmp_path / out), *args]) == 0
    return tmp_path / out


def _summary(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "summary.parquet").drop(columns=["wall_time", "out_dir"])


def test_same_seed_list_gives_the_same_tables_and_each_seed_equals_its_single_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _run(tmp_path, FILE, "first")
    printed = capsys.readouterr().out
    assert " ± " in printed and "mean ± std across seeds" in printed  # the final table folds the seeds
    for run in ("a", "b"):
        for seed in (4, 1):
            for name in PER_RUN_FILES:
                assert (first / run / f"seed_{seed}" / name).is_file()
    summary = _summary(first)
    assert sorted(zip(summary["name"], summary["seed"])) == [("a", 1), ("a", 4), ("b", 1), ("b", 4)]
    second = _run(tmp_path, FILE, "second")
    pd.testing.assert_frame_equal(summary, _summary(second))
    for run in ("a", "b"):
        for seed in (4, 1):
            left = pd.read_parquet(first / run / f"seed_{seed}" / "metrics.parquet").drop(columns=["wall_time"])
            right = pd.read_parquet(second / run / f"seed_{seed}" / "metrics.parquet").drop(columns=["wall_time"])
            pd.testing.assert_frame_equal(left, right, check_exact=True)
    a = summary[summary["name"] == "a"].set_index("seed")
    assert a.loc[4, "global_accuracy"] != a.loc[1, "global_accuracy"]  # the seed is really used
    # a (run, seed) job is independent of the others: it equals the run alone with that seed
    single = FILE.replace("seeds: [4, 1]\n", "seed: 1\n")
    alone = _run(tmp_path, single, "alone")
    pd.testing.assert_frame_equal(
        pd.read_parquet(alone / "b" / "events.parquet"),
        pd.read_parquet(first / "b" / "seed_1" / "events.parquet"), check_exact=True)


def test_run_seed_runs_one_seed_and_keeps_the_summary_rows_of_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_run = FILE[:FILE.index("runs:")]
    out = _run(tmp_path, one_run, "out", "--seed", "1")
    assert (out / "seed_1" / "metrics.parquet").is_file() and not (out / "seed_4").exists()
    assert list(_summary(out)["seed"]) == [1]
    _run(tmp_path, one_run, "out", "--seed", "4")
    assert sorted(_summary(out)["seed"]) == [1, 4]  # separate invocations fill one summary
    _run(tmp_path, one_run.replace("seeds: [4, 1]", "seeds: [4, 7]"), "out", "--seed", "7")
    assert sorted(_summary(out)["seed"]) == [4, 7]  # a row of a seed the file no longer lists is dropped
    path = tmp_path / "s.yaml"
    capsys.readouterr()
    assert main(["run", str(path), "--backend", "inline", "--quiet", "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--seed: 2 is not among the file's seeds (allowed: 4, 7)" in err


def test_resume_works_per_run_and_seed(tmp_path: Path) -> None:
    """A (run, seed) directory resumes from its own checkpoint into the same tables."""
    text = FILE.replace("stop: {rounds: 3}", "stop: {rounds: 4}\noutput: {checkpoint_every: 2}")
    out = _run(tmp_path, text, "out")
    job = out / "b" / "seed_4"
    before = pd.read_parquet(job / "events.parquet")
    assert sorted(int(p.name) for p in (job / "checkpoints").iterdir()) == [2, 4]
    assert main(["run", "--resume", str(job), "--quiet", "--backend", "inline"]) == 0
    pd.testing.assert_frame_equal(before, pd.read_parquet(job / "events.parquet"), check_exact=True)
    assert not (job / "seed_4").exists()  # the resumed job writes into its own directory


def test_processes_running_seeds_side_by_side_all_land_in_the_summary(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight writers (threads standing for `run --seed S` processes) add their rows at once;
    reading is slowed so that, unlocked, each would overwrite the others' rows."""
    import threading
    import time

    import pyarrow.parquet as pq

    from fedclock.scenarios import cli, summary_file
    from fedclock.scenarios.experiment import RunSummary

    read = pq.read_table

    def slow_read(*args: object, **kwargs: object) -> object:
        table = read(*args, **kwargs)
        time.sleep(0.05)
        return table

    monkeypatch.setattr(summary_file.pq, "read_table", slow_read)
    path = tmp_path / "summary.parquet"

    def job(seed: int) -> None:
        summary = RunSummary(name="a", algorithm="fedavg", mode="sync", global_accuracy=0.5, personal_accuracy_mean=0.5,
                             personal_accuracy_p10=0.4, virtual_time=1.0, wall_time=1.0, versions=2, rounds=2,
                             bytes_moved=10, tasks_applied=2, stragglers_dropped=0, mean_staleness=0.0,
                             stop_reason="rounds", out_dir=tmp_path / f"seed_{seed}", seed=seed)
        cli._write_summary(path, [summary], {("a", s) for s in range(8)})

    threads = [threading.Thread(target=job, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(pd.read_parquet(path)["seed"]) == list(range(8))
