"""The GPU-fraction benchmark script: its overlap measure, a clean exit without CUDA, and
(``cuda`` marker, skipped without a GPU) actors holding fractions of the GPU placed and
training together. Without a GPU the session-wide Ray of the tests declares none; run
``benchmarks/gpu_fractions.py --fake-gpus`` to see the co-scheduling on the CPU."""
from __future__ import annotations

import pytest
import torch

from tests.benchmarks.scripts import load_script
from tests.devices import cuda_test


def test_all_busy_fraction() -> None:
    gpu = load_script("gpu_fractions")
    assert gpu.all_busy_fraction([(0.0, 10.0), (0.0, 10.0)]) == 1.0
    assert gpu.all_busy_fraction([(0.0, 10.0), (2.0, 7.0), (1.0, 9.0)]) == pytest.approx(0.5)
    assert gpu.all_busy_fraction([(0.0, 4.0), (5.0, 10.0)]) == 0.0  # one after the other
    assert gpu.all_busy_fraction([(3.0, 8.0)]) == 1.0


def test_without_cuda_one_line_and_exit_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = load_script("gpu_fractions")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main([]) == 0
    out = capsys.readouterr()
    assert out.err == "" and len(out.out.strip().splitlines()) == 1 and "no CUDA device" in out.out


@cuda_test
def test_gpu_fraction_actors_are_placed_together_and_train_at_the_same_time(ray_runtime: object) -> None:
    """Two executor actors asking for half of the one GPU each are both placed on it at once
    (their ``setup`` moves the model to ``cuda``, which fails where Ray hid the GPU), and their
    training spans overlap: each trains 20 tasks of 11 steps, so a serialized placement
    (one actor after the other) would give an overlap near 0."""
    import ray

    from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
    from fedclock.algorithms.models import ModelFactory

    assert ray.cluster_resources().get("GPU", 0) >= 1, "the test Ray does not see the GPU"
    gpu = load_script("gpu_fractions")
    fed = gpu.make_federation(2, 500)
    algorithm = FedAvg(FedAvgParams(lr=gpu.LR, batch_size=gpu.BATCH, local_epochs=1),
                       ModelFactory("cnn5", (1, 28, 28), 10))
    algorithm.num_clients = fed.num_clients
    payload = algorithm.payload_for(algorithm.init_server(torch.Generator().manual_seed(0)), 0)
    rate, overlap = gpu.measure(2, 20, fed, algorithm, payload, "cuda")
    assert rate > 0 and overlap > 0.5
