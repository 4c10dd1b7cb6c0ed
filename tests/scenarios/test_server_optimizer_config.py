"""``algorithm.server_optimizer`` in scenario files: validated, written to the resolved file,
handed to the algorithm, checkpointed with the server state; mistakes are one-line errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.server_optimizers import M_KEY, V_KEY, YogiServerOptimizer
from fedclock.scenarios.checkpoints import read_checkpoint
from fedclock.scenarios.cli import main
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.results import resolved_dict
from tests.conftest import scenario


def test_the_section_is_validated_and_resolved() -> None:
    s = scenario(algorithm={"name": "fedavg", "server_optimizer": {"name": "yogi", "lr": 0.03}})
    assert s.algorithm.server_optimizer == YogiServerOptimizer(name="yogi", lr=0.03)
    resolved = resolved_dict(s)["algorithm"]["server_optimizer"]
    assert resolved == {"name": "yogi", "lr": 0.03, "beta1": 0.9, "beta2": 0.99, "tau": 0.001}
    assert "server_optimizer" not in resolved_dict(scenario())["algorithm"]  # unchanged without one


@pytest.mark.parametrize("section, message", [
    ({"name": "fedavg", "server_optimizer": {"name": "rmsprop"}},
     "algorithm.server_optimizer.name: unknown value 'rmsprop' (allowed: sgd, adam, yogi, adagrad)"),
    ({"name": "fedavg", "server_optimizer": {"name": "adam", "beta2": 1.5}}, "algorithm.server_optimizer.beta2"),
    ({"name": "fedavg", "server_optimizer": {"name": "adagrad", "beta2": 0.9}},
     "algorithm.server_optimizer.beta2: unknown field"),
    ({"name": "local", "server_optimizer": {"name": "sgd"}}, "algorithm 'local' moves no global model"),
])
def test_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], section: dict,
                               message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "algorithm": section, "stop": {"rounds": 1}}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_optimizer_state_is_checkpointed_and_a_resumed_run_is_identical(tmp_path: Path) -> None:
    """FedBuff (buffered async) with FedYogi: the run differs from plain FedBuff, and its
    checkpoint holds the optimizer's moments; resuming from it ends with the same tables."""
    base = dict(population={"num_clients": 4}, algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3,
                                                          "batch_size": 16, "buffer_size": 2},
                mode={"type": "async", "concurrency": 2}, stop={"versions": 6}, evaluation={"every": 2}, seed=5)
    yogi = {**base, "algorithm": {**base["algorithm"], "server_optimizer": {"name": "yogi", "lr": 0.05}}}
    inline = Runtime("inline")
    run_scenario(scenario(**base), inline, tmp_path / "plain")
    run_scenario(scenario(**yogi, output={"checkpoint_every": 3, "progress": False}), inline, tmp_path / "yogi")
    plain = pd.read_parquet(tmp_path / "plain" / "metrics.parquet")
    with_opt = pd.read_parquet(tmp_path / "yogi" / "metrics.parquet")
    assert not plain.global_loss.equals(with_opt.global_loss)
    ckpt = read_checkpoint(tmp_path / "yogi" / "checkpoints" / "6")
    assert {M_KEY, V_KEY} <= set(ckpt.server.tensors)
    resumed = scenario(**yogi, output={"checkpoint_every": 3, "progress": False})
    shutil.copytree(tmp_path / "yogi", tmp_path / "again")
    shutil.rmtree(tmp_path / "again" / "checkpoints" / "6")
    run_scenario(resumed, inline, tmp_path / "again", resume=True)
    again = pd.read_parquet(tmp_path / "again" / "metrics.parquet").drop(columns=["wall_time"])
    pd.testing.assert_frame_equal(with_opt.drop(columns=["wall_time"]), again, check_exact=True)
