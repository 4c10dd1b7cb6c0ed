"""Counts kept on disk (algorithms/task_cost.py, CountCache): a cached count equals the
direct count, its key separates what changes a count, a user's code is never cached, and a
process that finds every count cached never imports PyTorch's compiler."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

from fedclock.algorithms import task_cost
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.flop_count import count_sample, count_task
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.task_cost import TaskCost, count_key

PFL = ModelFactory("pfl_cnn", (3, 16, 16), 10)


def test_cached_counts_equal_direct_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(task_cost.CACHE_ENV, str(tmp_path))
    alg = FedAvg(FedAvg.Params(batch_size=10), PFL)
    first = TaskCost(alg)
    flops, memory, sample = first.flops(50), first.memory_bytes(50), first.sample_flops()
    files = sorted((tmp_path / "counts").glob("*.json"))
    # three probes at L = 80 samples (1 step, 2 steps, 160 samples), the 50-sample one (batch 10 < 12) and the sample
    assert len(files) == 5
    again = TaskCost(alg)
    assert (again.flops(50), again.memory_bytes(50), again.sample_flops()) == (flops, memory, sample)
    assert sample == count_sample(alg)
    assert json.loads(files[0].read_text()) != {}
    direct = count_task(alg, 80, 1)
    cached = json.loads((tmp_path / "counts" / f"{count_key(alg, alg_dtype(), ('task', 80, 1, False))}.json")
                        .read_text())
    assert cached["flops"] == direct.flops and cached["activation_bytes"] == direct.activation_bytes


def alg_dtype():
    import torch

    return torch.float32


def test_the_key_separates_what_changes_a_count() -> None:
    base = FedAvg(FedAvg.Params(batch_size=10), PFL)
    key = count_key(base, alg_dtype(), ("task", 80, 1, False))
    assert key is not None and len(key) == 64
    assert key != count_key(FedAvg(FedAvg.Params(batch_size=20), PFL), alg_dtype(), ("task", 80, 1, False))
    assert key != count_key(base, alg_dtype(), ("task", 80, 2, False))
    assert key != count_key(FedAvg(FedAvg.Params(batch_size=10), ModelFactory("pfl_cnn", (3, 32, 32), 10)),
                            alg_dtype(), ("task", 80, 1, False))
    user = ModelFactory("mine", (1, 8, 8), 10, builder=lambda s, c: nn.Sequential(nn.Flatten(), nn.Linear(64, c)))
    assert count_key(FedAvg(FedAvg.Params(), user), alg_dtype(), ("sample",)) is None

    class Plugin(FedAvg):  # a class outside fedclock.algorithms
        pass

    assert count_key(Plugin(FedAvg.Params(), PFL), alg_dtype(), ("sample",)) is None


SCRIPT = """
import sys
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.task_cost import TaskCost
cost = TaskCost(FedAvg(FedAvg.Params(batch_size=10), ModelFactory("pfl_cnn", (3, 16, 16), 10)))
print(cost.flops(50), cost.memory_bytes(50), cost.sample_flops(), "torch._dynamo" in sys.modules)
"""


def test_a_process_with_every_count_cached_never_imports_the_compiler(tmp_path: Path) -> None:
    """Ablation: the same process with the cache off imports torch._dynamo to count."""
    def run(cache: str) -> list[str]:
        env = {**os.environ, task_cost.CACHE_ENV: cache}
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
        return out.stdout.split()

    filled = run(str(tmp_path))
    assert filled[-1] == "True"  # the first process counted
    cached = run(str(tmp_path))
    assert cached[:-1] == filled[:-1] and cached[-1] == "False"
    assert run("off")[-1] == "True"
