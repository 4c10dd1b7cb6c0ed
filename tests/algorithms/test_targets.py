"""Per-token targets (``algorithms/targets.py``): the masked loss and accuracy against numbers
computed by hand, through the shared batch loss and evaluation; the Stack Overflow model's
shapes and parameter count."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fedclock.algorithms.base import evaluate_module
from fedclock.algorithms.flop_count import meta_data
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.registry import get_algorithm
from fedclock.algorithms.server_cost import upload_template
from fedclock.algorithms.targets import IGNORE_TARGET, counted_targets, target_cross_entropy
from fedclock.algorithms.training import cross_entropy_loss

# two sequences of three positions over three classes; the last position of the first one is padding
LOGITS = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 0.0, 0.0]],
                       [[0.0, 0.0, 3.0], [1.0, 0.0, 0.0], [0.0, 2.0, 1.0]]])
TARGETS = torch.tensor([[0, 2, IGNORE_TARGET], [2, 1, 1]])
# -log softmax of the target, by hand: log(sum exp) - logit of the target
HAND = [math.log(math.exp(2) + 2) - 2,            # hit (arg-max 0)
        math.log(2 + math.e) - 0,                 # miss (arg-max 1, target 2)
        math.log(2 + math.exp(3)) - 3,            # hit
        math.log(math.e + 2) - 0,                 # miss (arg-max 0, target 1)
        math.log(1 + math.exp(2) + math.e) - 2]   # hit


class Fixed(nn.Module):
    """Returns the rows of LOGITS its input indexes (a model whose outputs are set by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LOGITS[x.long()] * self.scale


def test_masked_loss_is_the_mean_over_tokens_that_are_not_padding() -> None:
    rows = torch.tensor([0, 1])
    assert float(cross_entropy_loss(Fixed(), rows, TARGETS).detach()) == pytest.approx(sum(HAND) / 5, rel=1e-6)
    other = LOGITS.clone()
    other[0, 2] = torch.tensor([-9.0, 9.0, 0.0])  # what the model says at a padded position never counts
    assert float(target_cross_entropy(other, TARGETS)) == pytest.approx(sum(HAND) / 5, rel=1e-6)
    assert counted_targets(TARGETS) == 5 and counted_targets(torch.tensor([3, 1])) == 2


@pytest.mark.parametrize("batch_size", [1, 2])
def test_evaluation_counts_tokens_hits_and_summed_loss(batch_size: int) -> None:
    result = evaluate_module(Fixed(), torch.tensor([0, 1]), TARGETS, batch_size)
    assert (result.correct, result.count) == (3.0, 5)
    assert result.loss_sum == pytest.approx(sum(HAND), rel=1e-6) and result.accuracy == pytest.approx(0.6)


def test_one_label_per_sample_keeps_its_numbers() -> None:
    """Sample targets go through F.cross_entropy unchanged: the first rows of each sequence
    read as two samples give their own two losses."""
    logits, y = LOGITS[:, 0], torch.tensor([0, 2])
    assert float(target_cross_entropy(logits, y)) == pytest.approx((HAND[0] + HAND[2]) / 2, rel=1e-6)
    assert float(target_cross_entropy(logits, y)) == float(torch.nn.functional.cross_entropy(logits, y))


def test_the_stack_overflow_model_predicts_every_position() -> None:
    factory = ModelFactory("word_lstm", (20,), 10_004, target_shape=(20,))
    assert factory.num_params == 4_053_428  # embedding 96, LSTM 670 (two bias vectors), dense 96, head 10,004
    small = ModelFactory("word_lstm_small", (20,), 40, target_shape=(20,))
    assert small.build()(torch.zeros(3, 20)).shape == (3, 20, 40)
    data = meta_data(3, (20,), torch.float32, None, small.target_shape)
    assert data.y_train.shape == (3, 20)  # cost counting feeds the model per-token targets
    fedbuff = get_algorithm("fedbuff")
    upload = upload_template(fedbuff(fedbuff.Params(batch_size=2), small))  # a server step's counted upload
    assert sum(t.numel() for t in upload.values()) == small.num_params
    with pytest.raises(ValueError, match="model.name: word_lstm reads sequences"):
        ModelFactory("word_lstm", (1, 28, 28), 10).build()
