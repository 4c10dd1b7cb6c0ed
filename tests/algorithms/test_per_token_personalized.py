"""Personalized and body/head algorithms on per-token targets (``per_token_targets``,
``algorithms/targets.py``): each enabled one runs a round of one client on a tiny next-word
model, and its personal and global evaluations count tokens, not sequences (padding left
out); those that need one label per sample (class statistics) are refused in one line that
says why (``scenarios/experiment.py``)."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.base import ClientData, EvalResult
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.registry import get_algorithm
from fedclock.algorithms.targets import IGNORE_TARGET
from tests.algorithms.every_client import rounds_with_every_client

T, CLASSES = 4, 9
ENABLED = ["local", "fedbabu", "fedper", "fedrep", "fedavg_ft", "ditto", "apfl", "pfedme", "perfedavg"]
"""The personalized algorithms whose steps only need the shared loss and accuracy."""
REFUSED = ["fedpac", "fedcr"]
"""Those that need one label per sample: per-class statistics of features."""


def _client(c: int) -> ClientData:
    g = torch.Generator().manual_seed(c)
    x = torch.randint(1, CLASSES, (4, T), generator=g).float()
    y = torch.randint(1, CLASSES, (4, T), generator=g)
    y[0, 2:] = IGNORE_TARGET  # a short sentence: two padded positions
    return ClientData(c, x, y, x[:3], y[:3])


def _factory() -> ModelFactory:
    return ModelFactory("word_lstm_small", (T,), CLASSES, target_shape=(T,))


def test_the_head_is_the_last_layer_over_the_vocabulary() -> None:
    f = _factory()
    assert f.head.stop == f.num_params and f.head.stop - f.head.start == 16 * CLASSES + CLASSES


@pytest.mark.parametrize("name", ENABLED)
def test_one_round_on_per_token_targets(name: str) -> None:
    """A round of one client, then both evaluations: finite losses, accuracies in [0, 1],
    and the counts are the tokens that are not padding (3 sequences of 4 tokens, 2 padded:
    10 on the client's test split; 14 on its train split of 4 sequences). Fails where an
    algorithm's step takes one label per sample (a cross-entropy over ``(n, T, C)`` logits
    raises) or counts sequences."""
    cls = get_algorithm(name)
    assert cls.per_token_targets
    alg = cls(cls.Params(lr=0.05, batch_size=2, local_steps=1), _factory())
    alg.num_clients = 1
    clients = [_client(0)]
    state, kept = rounds_with_every_client(alg, clients, rounds=1, seed=3)
    personal = alg.evaluate_client(alg.payload_for(state, 0), kept[0], clients[0], batch_size=2)
    pooled = alg.evaluate_global(state, clients[0].x_train, clients[0].y_train, batch_size=3)
    for result, tokens in ((personal, 10), (pooled, 14)):
        assert isinstance(result, EvalResult) and result.count == tokens
        assert math.isfinite(result.loss) and 0.0 <= result.accuracy <= 1.0


@pytest.mark.parametrize("name", REFUSED)
def test_algorithms_with_class_statistics_keep_refusing_and_say_why(name: str) -> None:
    cls = get_algorithm(name)
    assert not cls.per_token_targets and "one label per sample" in cls.per_token_refusal
