"""Counted FLOPs of the server's step (:mod:`fedclock.algorithms.server_cost`) against
numbers computed by hand."""
from __future__ import annotations

import pytest
import torch
from pydantic import TypeAdapter
from torch.utils.flop_counter import FlopCounterMode

from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.fedpac import FedPAC
from fedclock.algorithms.flop_count import META
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.server_cost import ELEMENTWISE, ServerCost, count_server_step
from fedclock.algorithms.server_optimizers import ServerOptimizerConfig
from fedclock.algorithms.simplex_qp import qp_flops, solve_simplex_qp

MLP = ModelFactory("mlp", (1, 4, 4), 3, (8,))
P = 16 * 8 + 8 + 8 * 3 + 3
"""The MLP's parameters: 16 inputs -> 8 hidden -> 3 classes, with biases (163)."""


def test_mlp_has_the_hand_counted_parameters() -> None:
    assert MLP.num_params == P == 163


@pytest.mark.parametrize("k", [2, 10])
def test_fedavg_aggregation_of_k_updates(k: int) -> None:
    """FedAvg's server: ``step.add_(delta_j, alpha=n_j / n)`` for each of the k arrivals (a
    multiply-add, 2 FLOPs per parameter each) then ``w + lr * step`` (a multiply and an add
    per parameter): ``2 k P + 2 P``."""
    alg = FedAvg(FedAvg.Params(batch_size=4, local_steps=1), MLP)
    assert count_server_step(alg, k) == 2 * k * P + 2 * P


def test_no_arrivals_cost_nothing() -> None:
    assert ServerCost(FedAvg(FedAvg.Params(), MLP)).flops(0) == 0


def test_a_server_optimizer_is_counted_too() -> None:
    """FedAdam's step (Reddi et al., ICLR 2021, Algorithm 2), per parameter: the update
    ``after - before`` (1); ``m = b1 m + (1 - b1) d`` (3); ``v = b2 v + (1 - b2) d^2`` (4);
    ``w + lr m / (sqrt(v) + tau)`` (5): 13 P on top of FedAvg's averaging."""
    plain = FedAvg(FedAvg.Params(batch_size=4, local_steps=1), MLP)
    adam = FedAvg(FedAvg.Params(batch_size=4, local_steps=1), MLP)
    adam.server_optimizer = TypeAdapter(ServerOptimizerConfig).validate_python({"name": "adam"})
    assert count_server_step(adam, 4) - count_server_step(plain, 4) == 13 * P


def test_elementwise_formulas_by_hand() -> None:
    """One FLOP per element for ``add`` and ``sqrt``, two for ``add`` with ``alpha`` and for
    ``addcmul``, one per input element for ``sum``."""
    a, b = torch.empty(5, 7, device=META), torch.empty(5, 7, device=META)
    counter = FlopCounterMode(display=False, custom_mapping=ELEMENTWISE)
    with counter:
        a + b
        a.add(b, alpha=0.5)
        torch.sqrt(a)
        torch.addcmul(a, a, b)
        a.sum()
    assert counter.get_total_flops() == 35 + 70 + 35 + 70 + 35


def test_qp_formula_by_hand() -> None:
    """``m`` iterations; iteration k solves a (k+1)-square system (2 (k+1)^3 / 3, floored)
    and forms ``2 Q a`` (2 m^2). m = 3: (5 + 18) + (18 + 18) + (42 + 18) = 119."""
    assert qp_flops(3) == 119 and qp_flops(1) == 0


def test_fedpac_charges_one_qp_per_member() -> None:
    """FedPAC's server solves one QP of the cohort's size per member, outside PyTorch: its
    formula is ``k * qp_flops(k)``; the counted step adds it to the torch part."""
    alg = FedPAC(FedPAC.Params(batch_size=4, local_steps=1), MLP)
    assert alg.server_formula_flops(3) == 3 * 119
    off = FedPAC(FedPAC.Params(batch_size=4, local_steps=1, collaborate_heads=False), MLP)
    assert off.server_formula_flops(3) == 0
    assert count_server_step(alg, 3) > count_server_step(off, 3) + 3 * 119


def test_a_meta_qp_gives_uniform_weights() -> None:
    out = solve_simplex_qp(torch.empty(4, 4, device=META))
    assert out.device == META and out.shape == (4,)
