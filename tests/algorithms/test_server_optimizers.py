"""Server optimizers (Reddi et al. ICLR 2021 Algorithm 2; FedAvgM, Hsu et al. 2019) against
numbers worked out by hand over three rounds, composed with FedAvg (sync) and FedBuff
(buffered async)."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.base import Algorithm, Arrival
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedbuff import FedBuff, FedBuffParams
from fedclock.algorithms.server_optimizers import (M_KEY, V_KEY, AdagradServerOptimizer, AdamServerOptimizer,
                                                   SGDServerOptimizer, YogiServerOptimizer)
from tests.algorithms.server_rules import TINY, gen

ROUNDS = ([1.0, 0.0, 0.0, 0.0], [-0.5, 2.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0])
"""The aggregated update Delta_t of each round: coordinate 0 gets 1, -0.5, 2; coordinate 1
gets 0, 2, 0; the others never move."""


def _arrival(delta: list[float]) -> Arrival:
    return Arrival(client=0, upload={"delta": torch.tensor(delta)}, num_samples=5, version_dispatched=0, staleness=0)


def _run(algorithm: Algorithm, optimizer: object) -> list[torch.Tensor]:
    """The weights' move from w_0 after each of the three rounds (one arrival per round)."""
    algorithm.server_optimizer = optimizer  # type: ignore[assignment]
    state = algorithm.init_server(gen())
    w0 = state.tensors["weights"].clone()
    moves = []
    for delta in ROUNDS:
        state, changed = algorithm.receive(state, [_arrival(delta)], gen())
        assert changed
        moves.append(state.tensors["weights"] - w0)
    return moves


def _expect(moves: list[torch.Tensor], first: list[float], second: list[float]) -> None:
    """Cumulative moves of coordinates 0 and 1 after rounds 1..3 (the others stay at 0)."""
    for t, move in enumerate(moves):
        torch.testing.assert_close(move, torch.tensor([first[t], second[t], 0.0, 0.0]), rtol=1e-6, atol=1e-7)


def test_fedavgm_heavy_ball() -> None:
    # m_t = 0.5 m + Delta_t, w += 0.5 m_t.  coord 0: m = 1, 0, 2 -> moves 0.5, 0, 1
    #                                        coord 1: m = 0, 2, 1 -> moves 0, 1, 0.5
    moves = _run(FedAvg(FedAvgParams(), TINY), SGDServerOptimizer(name="sgd", lr=0.5, momentum=0.5))
    _expect(moves, [0.5, 0.5, 1.5], [0.0, 1.0, 1.5])


def test_fedadam_algorithm_2_without_bias_correction() -> None:
    # beta1 = beta2 = 0.5, tau = 0.5 (v_{-1} = 0.25), lr = 1.
    # coord 0: m = .5, 0, 1; v = .625, .4375, 2.21875.  coord 1: m = 0, 1, .5; v = .125, 2.0625, 1.03125
    opt = AdamServerOptimizer(name="adam", lr=1.0, beta1=0.5, beta2=0.5, tau=0.5)
    moves = _run(FedAvg(FedAvgParams(), TINY), opt)
    s0 = [0.5 / (math.sqrt(0.625) + 0.5), 0.0, 1.0 / (math.sqrt(2.21875) + 0.5)]
    s1 = [0.0, 1.0 / (math.sqrt(2.0625) + 0.5), 0.5 / (math.sqrt(1.03125) + 0.5)]
    _expect(moves, [sum(s0[:t + 1]) for t in range(3)], [sum(s1[:t + 1]) for t in range(3)])


def test_fedyogi_sign_rule() -> None:
    # v_t = v - (1 - beta2) D^2 sign(v - D^2), v_{-1} = 0.25.
    # coord 0: D^2 = 1, .25, 4: v = .25 + .5 = .75, .75 - .125 = .625, .625 + 2 = 2.625
    # coord 1: D^2 = 0, 4, 0:   v = .25 (sign term times 0), .25 + 2 = 2.25, 2.25
    opt = YogiServerOptimizer(name="yogi", lr=1.0, beta1=0.5, beta2=0.5, tau=0.5)
    moves = _run(FedAvg(FedAvgParams(), TINY), opt)
    s0 = [0.5 / (math.sqrt(0.75) + 0.5), 0.0, 1.0 / (math.sqrt(2.625) + 0.5)]
    s1 = [0.0, 1.0 / (1.5 + 0.5), 0.5 / (1.5 + 0.5)]
    _expect(moves, [sum(s0[:t + 1]) for t in range(3)], [sum(s1[:t + 1]) for t in range(3)])


def test_fedadagrad_accumulates() -> None:
    # v_t = v + D^2 from .25.  coord 0: v = 1.25, 1.5, 5.5.  coord 1: v = .25, 4.25, 4.25
    opt = AdagradServerOptimizer(name="adagrad", lr=1.0, beta1=0.5, tau=0.5)
    moves = _run(FedAvg(FedAvgParams(), TINY), opt)
    s0 = [0.5 / (math.sqrt(1.25) + 0.5), 0.0, 1.0 / (math.sqrt(5.5) + 0.5)]
    s1 = [0.0, 1.0 / (math.sqrt(4.25) + 0.5), 0.5 / (math.sqrt(4.25) + 0.5)]
    _expect(moves, [sum(s0[:t + 1]) for t in range(3)], [sum(s1[:t + 1]) for t in range(3)])


def test_plain_sgd_at_lr_one_is_the_algorithm_itself() -> None:
    moves = _run(FedAvg(FedAvgParams(), TINY), SGDServerOptimizer(name="sgd", lr=1.0, momentum=0.0))
    _expect(moves, [1.0, 0.5, 2.5], [0.0, 2.0, 2.0])


def test_the_pseudo_gradient_is_the_weighted_mean_delta() -> None:
    """Two clients with 1 and 3 samples: Delta = (1 * 4 + 3 * 0) / 4 = 1 on coordinate 0."""
    alg = FedAvg(FedAvgParams(), TINY)
    alg.server_optimizer = AdamServerOptimizer(name="adam", lr=1.0, beta1=0.5, beta2=0.5, tau=0.5)
    state = alg.init_server(gen())
    w0 = state.tensors["weights"].clone()
    arrivals = [Arrival(0, {"delta": torch.tensor([4.0, 0, 0, 0])}, 1, 0, 0),
                Arrival(1, {"delta": torch.tensor([0.0, 0, 0, 0])}, 3, 0, 0)]
    state, _ = alg.receive(state, arrivals, gen())
    assert float(state.tensors["weights"][0] - w0[0]) == pytest.approx(0.5 / (math.sqrt(0.625) + 0.5))
    torch.testing.assert_close(state.tensors[M_KEY], torch.tensor([0.5, 0, 0, 0]))
    torch.testing.assert_close(state.tensors[V_KEY], torch.tensor([0.625, 0.125, 0.125, 0.125]))


def test_fedbuff_steps_the_optimizer_only_on_a_full_buffer() -> None:
    """Buffer of 2: the first arrival only buffers (no optimizer step, no state); the second
    gives Delta = mean of the two deltas = [1, 0, 0, 0], FedAdam's first step."""
    alg = FedBuff(FedBuffParams(buffer_size=2), TINY)
    alg.server_optimizer = AdamServerOptimizer(name="adam", lr=1.0, beta1=0.5, beta2=0.5, tau=0.5)
    state = alg.init_server(gen())
    w0 = state.tensors["weights"].clone()
    state, changed = alg.receive(state, [_arrival([2.0, 1.0, 0.0, 0.0])], gen())
    assert not changed and M_KEY not in state.tensors
    torch.testing.assert_close(state.tensors["weights"], w0)
    state, changed = alg.receive(state, [_arrival([0.0, -1.0, 0.0, 0.0])], gen())
    assert changed and state.version == 1
    expected = torch.tensor([0.5 / (math.sqrt(0.625) + 0.5), 0.0, 0.0, 0.0])
    torch.testing.assert_close(state.tensors["weights"] - w0, expected)


def test_defaults_are_the_papers() -> None:
    """Reddi et al. (ICLR 2021) Sec. 5 and the authors' code (google-research/federated,
    ``optimization/docs/hyperparameters.md``): tau 1e-3 for every adaptive method, beta1 0.9,
    FedAvgM's momentum 0.9 at server lr 1; beta2 0.99 is the paper's (their code keeps Keras'
    0.999); server lr 0.01 for Adam and Yogi and 0.1 for Adagrad are their typical best rates
    (see the module docstring)."""
    for cls, name in ((AdamServerOptimizer, "adam"), (YogiServerOptimizer, "yogi")):
        opt = cls(name=name)
        assert (opt.beta1, opt.beta2, opt.tau, opt.lr) == (0.9, 0.99, 1e-3, 0.01)
    adagrad = AdagradServerOptimizer(name="adagrad")
    assert (adagrad.beta1, adagrad.tau, adagrad.lr) == (0.9, 1e-3, 0.1)
    sgd = SGDServerOptimizer(name="sgd")
    assert (sgd.momentum, sgd.lr) == (0.9, 1.0)
