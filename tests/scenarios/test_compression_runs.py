"""Compressed uploads in whole runs: the shipped quick file, bytes and upload time from the
encoded size, top-k with error feedback against top-k without it (paired seeds), a resumed
top-k + error-feedback run, the same tables on Ray and inline, one-line refusals."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.checkpoints import read_checkpoint
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import ScenarioError, load_suite
from fedclock.scenarios.run_costs import CountedCosts
from fedclock.scenarios.schema import Scenario
from tests.conftest import scenario
from tests.scenarios.runs import assert_resume_is_bit_identical

QUICK = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "compression" / "quick.yaml"
MLP_64 = 64 * 64 + 64 + 64 * 10 + 10  # digits' 64 inputs, one hidden layer of 64, 10 classes

EF = dict(  # async, stale arrivals, top-k with error feedback (client state kept between tasks)
    population={"num_clients": 5, "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200},
                                              "up_mbps": {"dist": "loguniform", "low": 0.5, "high": 5}}},
    dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
    algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 4, "batch_size": 16, "buffer_size": 2},
    mode={"type": "async", "concurrency": 3}, stop={"versions": 12}, evaluation={"every": 3}, seed=5,
    upload={"compression": {"type": "top_k", "fraction": 0.05, "error_feedback": True}},
)


@pytest.fixture(scope="module")
def costs() -> CountedCosts:
    """The module's counted FLOPs, shared by its runs as a session shares them between the seeds
    of a run (each arm's seeds count the same task once)."""
    return CountedCosts()


def runs() -> dict[str, Scenario]:
    return {r.name: r for r in load_suite(QUICK).runs}


def test_quick_file_charges_each_codecs_exact_bytes_and_shorter_uploads(tmp_path: Path) -> None:
    """bytes_up per task: 4 n float32, 2 n fp16, ceil(5 n / 8) + 4 ceil(n / 512) for 4-bit
    QSGD in buckets of 512, 8 ceil(0.01 n) for top-k; the upload time is bytes * 8 / 0.2 Mbit/s
    plus the latency."""
    expected = {"float32": 4 * MLP_64, "fp16": 2 * MLP_64, "qsgd_4bit": -(-5 * MLP_64 // 8) + 4 * 10,
                "top_k_ef": 8 * 49, "top_k": 8 * 49}
    assert QUICK.read_text().startswith("# Compressed uploads")
    inline = Runtime("inline")
    for name, run in runs().items():
        short = run.model_copy(update={"stop": run.stop.model_copy(update={"rounds": 1})})
        run_scenario(short, inline, tmp_path / name)
        events = pd.read_parquet(tmp_path / name / "events.parquet")
        assert set(events.bytes_up) == {expected[name]}, name
        assert (events.upload_s - (expected[name] * 8 / 0.2e6 + 0.05)).abs().max() < 1e-9, name


@pytest.mark.slow
def test_top_k_with_error_feedback_learns_where_without_it_does_worse(tmp_path: Path, costs: CountedCosts) -> None:
    """Top-1 % of the update (k = 49 of 4810) on three paired seeds: error feedback must beat
    no error feedback on every seed and by at least 3 points on average (measured at the time
    of writing: 86.1 vs 70.2, 82.5 vs 77.2, 84.7 vs 83.0). The test set has 359 images, so
    one seed's ordering is decided by at least one image; with error feedback off in both
    arms the accuracies are equal and the test fails."""
    inline = Runtime("inline")
    quick = runs()
    gains = []
    for seed in (0, 1, 2):
        acc = {}
        for name in ("top_k_ef", "top_k"):
            s = quick[name].model_copy(update={"seed": seed})
            acc[name] = run_scenario(s, inline, tmp_path / f"{name}-{seed}", costs=costs).global_accuracy
        gains.append(acc["top_k_ef"] - acc["top_k"])
    assert min(gains) > 0 and sum(gains) / 3 >= 0.03, gains


def test_a_resumed_top_k_error_feedback_run_equals_an_uninterrupted_one(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The residual is client state: it goes into the checkpoint and the resumed run's tables
    are bit-identical to the uninterrupted run's."""
    def residual_in_checkpoint(crashed: Path) -> None:
        last = max(int(p.name) for p in (crashed / "checkpoints").iterdir())
        ckpt = read_checkpoint(crashed / "checkpoints" / str(last))
        assert any("upload_residual" in (state or {}) for state in ckpt.clients.values())

    assert_resume_is_bit_identical(EF, tmp_path, monkeypatch, every=4, crash=9, before_resume=residual_in_checkpoint)


@pytest.mark.slow
def test_same_tables_on_ray_and_inline(ray_runtime: Runtime, tmp_path: Path) -> None:
    """The linked algorithm travels to Ray actors (pickled as its class plus settings) and the
    codec's draws come from the task's seeded generator: the tables equal the inline run's."""
    qsgd = {**EF, "upload": {"compression": {"type": "quantize", "bits": 2, "bucket_size": 64}},
            "download": {"compression": {"type": "fp16"}}, "stop": {"versions": 6}}
    run_scenario(scenario(**qsgd, runtime={"backend": "ray", "num_actors": 2}), ray_runtime, tmp_path / "ray")
    run_scenario(scenario(**qsgd), Runtime("inline"), tmp_path / "inline")
    for table in ("metrics", "events"):
        a = pd.read_parquet(tmp_path / "ray" / f"{table}.parquet")
        b = pd.read_parquet(tmp_path / "inline" / f"{table}.parquet")
        if table == "metrics":
            a, b = a.drop(columns=["wall_time"]), b.drop(columns=["wall_time"])
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    events = pd.read_parquet(tmp_path / "inline" / "events.parquet")
    assert set(events.bytes_down) == {2 * (64 * 8 + 8 + 8 * 10 + 10)}  # fp16 weights of the 64-8-10 MLP


@pytest.mark.parametrize("sections, message", [
    ({"algorithm": {"name": "scaffold"}, "upload": {"compression": {"type": "fp16"}}},
     "upload.compression: algorithm 'scaffold' uploads neither a model delta nor the model"),
    ({"upload": {"compression": {"type": "top_k"}}}, "upload.compression: give exactly one of k and fraction"),
    ({"upload": {"compression": {"type": "quantize", "bits": 0}}},
     "upload.compression.bits: Input should be greater than or equal to 1 (got 0)"),
    ({"download": {"compression": {"type": "top_k", "k": 3}}},
     "download.compression.type: Input should be 'fp16' (got 'top_k')"),
])
def test_mistakes_are_one_line_errors(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(**sections)
    assert message in str(err.value) and "\n" not in str(err.value)


MODEL_UPLOAD = dict(  # FedAsync uploads its model: the codec encodes its difference from the received one
    population={"num_clients": 10, "devices": {"compute": {"dist": "loguniform", "low": 100, "high": 400},
                                               "up_mbps": 0.2, "down_mbps": 10, "latency_s": 0.05}},
    dataset={"name": "digits", "partition": {"type": "dirichlet_by_class", "alpha": 0.5}},
    model={"name": "mlp", "hidden": [64]},
    algorithm={"name": "fedasync", "lr": 0.1, "local_steps": 10, "batch_size": 16, "alpha": 0.6},
    mode={"type": "async", "concurrency": 5}, stop={"versions": 40}, evaluation={"every": 40, "personalized": False},
)


def test_a_model_upload_in_fp16_charges_two_bytes_a_parameter(tmp_path: Path) -> None:
    """FedAsync with fp16 uploads: 2 bytes per parameter on the wire (the received model that
    rides along for the server's decoding is not charged), and the upload time shrinks to it."""
    s = scenario(**{**MODEL_UPLOAD, "stop": {"versions": 3}, "upload": {"compression": {"type": "fp16"}}})
    run_scenario(s, Runtime("inline"), tmp_path)
    events = pd.read_parquet(tmp_path / "events.parquet")
    events = events[events.status == "applied"]
    assert len(events) == 3 and set(events.bytes_up) == {2 * MLP_64}
    assert (events.upload_s - (2 * MLP_64 * 8 / 0.2e6 + 0.05)).abs().max() < 1e-9


@pytest.mark.slow
def test_model_upload_top_k_with_error_feedback_learns_where_without_it_does_worse(tmp_path: Path,
                                                                                    costs: CountedCosts) -> None:
    """FedAsync's model uploads through top-1 % of their difference from the received model
    (k = 49 of 4810), three paired seeds: with error feedback it must beat the same codec
    without it on every seed and by at least 3 points on average (measured at the time of
    writing: 58.5 vs 49.0, 63.0 vs 55.4, 81.1 vs 69.9 after 40 versions). Without error feedback 99 % of each
    task's change is lost; the ordering is decided by whole images of the 359 in the test
    set, and with error feedback off in both arms the accuracies are equal and the test fails.
    (Six runs of 40 versions, the slowest of this issue's tests: fewer versions leave the
    accuracies too close for an ordering on every seed.)"""
    inline = Runtime("inline")
    gains = []
    for seed in (0, 1, 2):
        acc = {}
        for ef in (True, False):
            s = scenario(**{**MODEL_UPLOAD, "seed": seed, "upload": {"compression": {
                "type": "top_k", "fraction": 0.01, "error_feedback": ef}}})
            acc[ef] = run_scenario(s, inline, tmp_path / f"{ef}-{seed}", costs=costs).global_accuracy
        gains.append(acc[True] - acc[False])
    assert min(gains) > 0 and sum(gains) / 3 >= 0.03, gains
