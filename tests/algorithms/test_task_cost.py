"""Counted FLOPs and memory of a task (algorithms/flop_count.py, algorithms/task_cost.py)
against numbers computed by hand and against direct counts."""
from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from torch import nn

from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.fedcr import FedCR
from fedclock.algorithms.fedrep import FedRep
from fedclock.algorithms.fedsam import FedSAM
from fedclock.algorithms.flop_count import count_sample, count_task
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.perfedavg import PerFedAvg
from fedclock.algorithms.task_cost import TaskCost


def conv_net(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Conv2d(1, 4, 3x3, padding 1) + ReLU + flatten (body), Linear(4*8*8, classes) (head)."""
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, num_classes))


LOGISTIC = ModelFactory("logistic", (1, 8, 8), 10)
MLP = ModelFactory("mlp", (1, 8, 8), 10, (32,))
CONV = ModelFactory("conv", (1, 8, 8), 10, builder=conv_net)


def test_linear_layer_flops_by_hand() -> None:
    """One sample through Linear(64, 10): forward 2*64*10 multiply-adds counted twice over
    (a FLOP per multiply and per add), backward the weight gradient only (the input needs
    none): 1280 + 1280."""
    assert count_sample(FedAvg(FedAvg.Params(), LOGISTIC)) == 2 * 64 * 10 * 2


def test_conv_layer_flops_by_hand() -> None:
    """Conv 3x3, 1 -> 4 channels, 8x8 output: 2 * (4*8*8 outputs) * (1*3*3) = 4608 forward,
    the same for its weight gradient (no input gradient); the head Linear(256, 10): 5120
    forward, 5120 weight gradient, 5120 input gradient (the conv's output needs one)."""
    assert count_sample(FedAvg(FedAvg.Params(), CONV)) == 2 * 4608 + 3 * 5120


def test_fedavg_task_is_steps_times_batch_samples() -> None:
    """A FedAvg task of s steps of batch B costs exactly s * B plain samples."""
    alg = FedAvg(FedAvg.Params(batch_size=8, local_epochs=2), MLP)
    cost = TaskCost(alg)
    for n in (3, 8, 13, 70, 200):
        assert cost.flops(n) == alg.local_steps(n) * min(8, n) * cost.sample_flops()
        assert cost.flops(n, 2) == 2 * min(8, n) * cost.sample_flops()


def test_sam_costs_twice_fedavg() -> None:
    """SAM's second forward/backward pass is counted: twice FedAvg's task on the same model."""
    fedavg, sam = TaskCost(FedAvg(FedAvg.Params(batch_size=8), MLP)), TaskCost(FedSAM(FedSAM.Params(batch_size=8), MLP))
    assert sam.flops(50) == 2 * fedavg.flops(50)


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda: FedCR(FedCR.Params(batch_size=12), MLP),               # a pass over the whole train split
    lambda: PerFedAvg(PerFedAvg.Params(batch_size=12, variant="fo"), MLP),  # a step draws two batches
])
def test_partial_work_prices_equal_direct_counts(make) -> None:  # type: ignore[no-untyped-def]
    """The probe-based price of every client size equals a direct count of that task."""
    alg = make()
    cost = TaskCost(alg)
    for n in (7, 13, 30, 100, 200):
        assert cost.flops(n) == count_task(alg, n).flops, n
    assert cost.flops(30, 1) == count_task(alg, 30, 1).flops


def test_phased_work_is_counted_per_size() -> None:
    """FedRep's head epochs then body epochs: the whole task counted, more than FedAvg's
    body-and-head epochs (the head epochs come on top); a partial step count is refused."""
    rep = TaskCost(FedRep(FedRep.Params(batch_size=8, local_epochs=1, head_epochs=2), MLP))
    avg = TaskCost(FedAvg(FedAvg.Params(batch_size=8, local_epochs=1), MLP))
    assert rep.flops(40) > avg.flops(40)
    with pytest.raises(ValueError, match="phased"):
        rep.flops(40, 1)


def test_memory_of_a_small_mlp_by_hand() -> None:
    """FedAvg on Linear(64, 32) + ReLU + Linear(32, 10), batch 8, no momentum: parameters
    (64*32+32 + 32*10+10 = 2442 floats), their gradients (2442), payload and upload (2442
    each), and the activations autograd saves for the largest step: the input batch
    (8*64), the ReLU output saved by ReLU and by the head (8*32, twice: a tensor saved twice
    counts twice), the log-softmax output saved by log-softmax and by the NLL loss (8*10,
    twice), the loss's total weight (one float) and the labels (8 int64)."""
    alg = FedAvg(FedAvg.Params(batch_size=8), MLP)
    params = 64 * 32 + 32 + 32 * 10 + 10
    count = count_task(alg, 64, 1)
    assert count.parameter_bytes == 4 * params and count.trainable_bytes == 4 * params
    assert count.message_bytes == 4 * 2 * params
    memory = TaskCost(alg).memory_bytes(64)
    assert memory == 4 * 4 * params + count.activation_bytes
    assert count.activation_bytes == 4 * (8 * 64 + 2 * 8 * 32 + 2 * 8 * 10 + 1) + 8 * 8


def test_counting_leaves_the_algorithm_untouched() -> None:
    """Counting runs on a copy: the algorithm's workspace stays on its device, unchanged."""
    alg = FedAvg(FedAvg.Params(batch_size=8), MLP)
    before = [p.detach().clone() for p in alg.workspace.parameters()]
    TaskCost(alg).flops(20)
    assert all(p.device.type == "cpu" and torch.equal(p, q) for p, q in zip(alg.workspace.parameters(), before))
    assert isinstance(TaskCost(alg).flops(20), Fraction)
