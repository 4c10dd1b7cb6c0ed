"""Counted FLOPs of the server's step (:mod:`fedclock.algorithms.server_cost`) against
numbers computed by hand."""
from __future__ import annotations

import pytest
import torch
from pydantic import TypeAdapter
from torch.utils.flop_counter import FlopCounterMode

from fedclock.algorithms.base import Arrival, ServerState
from fedclock.algorithms.fedasync import FedAsync
from fedclock.algorithms.fedavg import FedAvg
from fedclock.algorithms.fedbuff import FedBuff
from fedclock.algorithms.fedpac import FedPAC
from fedclock.algorithms.flop_count import META
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.plga import LGA, PLGA
from fedclock.algorithms.server_cost import ELEMENTWISE, ArrivalInfo, ServerCost, ServerSteps, count_server_step, \
    declares_kinds
from fedclock.algorithms.server_optimizers import ServerOptimizerConfig
from fedclock.algorithms.simplex_qp import qp_flops, solve_simplex_qp
from fedclock.algorithms.spfl import SPFL, SPFLW, SPFLParams

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


def _arrivals(clients: range, staleness: int = 0) -> list[ArrivalInfo]:
    return [ArrivalInfo(client=c, num_samples=8, version_dispatched=0, staleness=staleness) for c in clients]


def _fedbuff(server_optimizer: str | None = None) -> FedBuff:
    alg = FedBuff(FedBuff.Params(batch_size=4, local_steps=1, buffer_size=3), MLP)
    if server_optimizer is not None:
        alg.server_optimizer = TypeAdapter(ServerOptimizerConfig).validate_python({"name": server_optimizer})
    return alg


def test_fedbuff_charges_the_append_then_the_flush() -> None:
    """FedBuff, buffer K = 3, one arrival per step. An append is ``buffer + c(s) * delta`` (a
    multiply and an add per parameter, 2 P); the K-th arrival also applies the buffer,
    ``w + (eta / K) * buffer`` (2 P more; the cleared buffer is a fill, free): so arrivals
    cost 2 P, 2 P, 4 P, and again. Counting from the initial state only (the old rule)
    charged 2 P to all of them."""
    steps = ServerCost(_fedbuff()).follow()
    assert [steps.step(_arrivals(range(c, c + 1))) for c in range(7)] == [2 * P, 2 * P, 4 * P] * 2 + [2 * P]
    assert steps.state.version == 2 and steps.counted_steps == 2  # one count per kind, then the cache


def test_fedbuff_server_optimizer_is_charged_on_the_flush_only() -> None:
    """With FedAdam the flush adds the optimizer's 13 P (see
    :func:`test_a_server_optimizer_is_counted_too`); an append changes no model, so no
    optimizer step runs: 2 P, 2 P, 17 P."""
    steps = ServerCost(_fedbuff("adam")).follow()
    assert [steps.step(_arrivals(range(c, c + 1))) for c in range(3)] == [2 * P, 2 * P, 17 * P]


def test_fedbuff_step_kinds() -> None:
    alg, state = _fedbuff(), ServerState(tensors={}, extra={"buffered": 2})
    arrivals = [Arrival(client=c, upload={}, num_samples=1, version_dispatched=0, staleness=0) for c in range(4)]
    assert [alg.server_step_kind(state, arrivals[:k]) for k in (0, 1, 4)] == ["append", "flush", "flush x2"]


def test_sync_fedavg_pays_its_aggregate_every_round() -> None:
    """Sync FedAvg, 3 arrivals a round: ``2 k P + 2 P`` = 8 P every round, counted once."""
    steps = ServerCost(FedAvg(FedAvg.Params(batch_size=4, local_steps=1), MLP)).follow()
    assert [steps.step(_arrivals(range(3))) for _ in range(3)] == [8 * P] * 3
    assert steps.counted_steps == 1
    by_steps = ServerCost(FedAvg(FedAvg.Params(batch_size=4, local_steps=1, weighting="steps"), MLP)).follow()
    assert by_steps.step(_arrivals(range(3))) == 8 * P  # a full task's steps: the algorithm's count


def test_fedasync_mixes_every_arrival() -> None:
    """FedAsync (sequential): ``(1 - a) w + a w_k`` per arrival, two multiplies and an add
    (3 P), whatever its staleness (the weight ``a`` is a number, not a tensor)."""
    steps = ServerCost(FedAsync(FedAsync.Params(batch_size=4, local_steps=1), MLP)).follow()
    assert [steps.step(_arrivals(range(c, c + 1), staleness=c)) for c in range(3)] == [3 * P] * 3


def test_fedasync_window_mixes_only_its_stale_arrivals() -> None:
    """FedAsync, ``window: stale_mix_mean``, two arrivals a window: the sample-weighted mean
    costs a multiply and an add per model (4 P); each stale arrival is first mixed with the
    model, ``a w_k + (1 - a) w`` (3 P). So 0, 1, 2 stale arrivals cost 4 P, 7 P, 10 P; a
    window like an earlier one comes from the cache."""
    steps = ServerCost(FedAsync(FedAsync.Params(batch_size=4, local_steps=1, window="stale_mix_mean"),
                                MLP)).follow()
    windows = ([0, 0], [0, 1], [1, 1], [0, 0])
    flops = [steps.step([ArrivalInfo(client=c, num_samples=8, version_dispatched=0, staleness=s)
                         for c, s in enumerate(w)]) for w in windows]
    assert flops == [4 * P, 7 * P, 10 * P, 4 * P] and steps.counted_steps == 3


def test_fedpac_names_no_kind_and_is_counted_every_round() -> None:
    """FedPAC names no step kind: every round's step is counted on the followed state, its
    QPs (``k qp_flops(k)``) included each time."""
    alg = FedPAC(FedPAC.Params(batch_size=4, local_steps=1), MLP)
    steps = ServerCost(alg).follow()
    flops = [steps.step(_arrivals(range(3))) for _ in range(2)]
    assert flops[0] == flops[1] == count_server_step(alg, 3, num_samples=8) and steps.counted_steps == 2


class _OwnServerStep(FedAvg):
    """A subclass with a server step of its own (not registered)."""

    name = "own_server_step_test"

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        return state, False


def test_kinds_are_trusted_only_from_the_class_of_the_server_step() -> None:
    assert declares_kinds(_fedbuff()) and declares_kinds(FedAvg(FedAvg.Params(), MLP))
    assert not declares_kinds(_OwnServerStep(FedAvg.Params(), MLP))
    assert not declares_kinds(FedPAC(FedPAC.Params(), MLP))


def _spfl_round(steps: ServerSteps, server_steps: int, clients: range = range(3)) -> int:
    """One SPFL round on the followed server: each client's task is told its upload at
    dispatch (after ``server_steps`` steps), then the server folds the arrivals."""
    kinds = [steps.upload_kind(c, server_steps) for c in clients]
    return steps.step([ArrivalInfo(client=c, num_samples=8, version_dispatched=0, staleness=0, upload=k)
                       for c, k in zip(clients, kinds)])


def test_spfl_refresh_and_model_update_steps_are_each_charged_their_own_work() -> None:
    """SPFL (Xie et al., Algorithm 1), Gamma = 2, three clients a round, the MLP's two stages
    (hidden: 136 parameters, head: 27; P = 163). Rounds: a similarity refresh, two model
    updates, a refresh, an update. With n = 3 arrivals:

    * refresh, per stage of d parameters: the cosine matrix (the row norms n d, the clamp n,
      the division n d, the ``where`` n d, ``unit @ unit.T`` 2 n^2 d) and the diagnostics
      (row sums n^2, minus the diagonal n, over n - 1: n): ``2 n^2 P + 3 n P + 2 (n^2 + 3 n)``
      = 27 P + 36 = 4437; the later refresh also takes the mean of the 3 models it holds
      (3 P): 4926;
    * model update, per stage: the softmax rows times the scale (n^2), their product with
      the uploads (2 n^2 d), subtracted from the n models (n d): ``2 (n^2) + 2 n^2 P + n P``
      = 21 P + 18 = 3441.

    Shaping every upload like the first task's (a refresh), as before, charges 4437 then
    4926 every round."""
    n = 3
    refresh = 2 * n * n * P + 3 * n * P + 2 * (n * n + 3 * n)
    update = 2 * n * n + 2 * n * n * P + n * P
    assert (refresh, update) == (4437, 3441)
    steps = ServerCost(SPFL(SPFLParams(gamma=2, batch_size=4, local_steps=1), MLP)).follow()
    assert [_spfl_round(steps, r) for r in range(5)] == [refresh, update, update, refresh + n * P, update]
    assert steps.state.version == 3


def test_spfl_w_fuses_trained_weights_in_its_model_updates() -> None:
    """SPFL-w uploads its trained weights and sets ``w_i <- S~ w^end`` per stage: only the
    softmax rows' product with the uploads (2 n^2 d; no scale, no subtraction), ``2 n^2 P`` =
    18 P after its refresh (the refresh as SPFL's)."""
    steps = ServerCost(SPFLW(SPFLParams(gamma=2, batch_size=4, local_steps=1), MLP)).follow()
    assert [_spfl_round(steps, r) for r in range(2)] == [27 * P + 36, 18 * P]


def test_a_task_dispatched_during_the_server_step_uploads_as_the_state_before_it() -> None:
    """While a step takes its time the server still sends the state before it: a task
    dispatched then (after one step fewer than followed) is told that state's upload (SPFL's
    refresh round is due again only after Gamma updates); further back is refused."""
    steps = ServerCost(SPFL(SPFLParams(gamma=2, batch_size=4, local_steps=1), MLP)).follow()
    first = steps.upload_kind(0, 0)
    _spfl_round(steps, 0)
    assert steps.upload_kind(0, 0) == first != steps.upload_kind(0, 1)
    assert [k for k, _, _ in first] == ["refresh_from", "weights"]
    assert [k for k, _, _ in steps.upload_kind(0, 1)] == ["weights"]
    _spfl_round(steps, 1)
    with pytest.raises(ValueError, match="server_steps: 0"):
        steps.upload_kind(0, 0)


def test_lga_and_plga_upload_alike_in_every_task() -> None:
    """LGA and PLGA (Xie et al.): every task uploads its update ``d`` (one model-sized
    ``delta``), whatever it was sent: PLGA's payload gains the client's personalized model
    once the server holds one (a second payload kind), its upload does not."""
    for cls in (LGA, PLGA):
        cost = ServerCost(cls(cls.Params(batch_size=4, local_steps=1), MLP))
        steps = cost.follow()
        kinds = [steps.upload_kind(c, 0) for c in range(3)]
        steps.step([ArrivalInfo(client=c, num_samples=8, version_dispatched=0, staleness=0, upload=k)
                    for c, k in enumerate(kinds)])
        kinds += [steps.upload_kind(c, 1) for c in range(3)]
        assert len(set(kinds)) == (2 if cls is PLGA else 1)
        assert all({k: tuple(v.shape) for k, v in cost.upload_of(kind).items()} == {"delta": (P,)} for kind in kinds)
