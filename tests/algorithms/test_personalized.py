"""Update rules of the personalized baselines on the tiny model, against hand-written
formulas (one local step on the whole 4-sample batch unless stated)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedclock.algorithms.apfl import APFL, APFLParams
from fedclock.algorithms.base import Arrival, ServerState, evaluate_module
from fedclock.algorithms.ditto import Ditto, DittoParams
from fedclock.algorithms.fedavg_ft import FedAvgFT, FedAvgFTParams
from fedclock.algorithms.fedbabu import FedBABU, FedBABUParams
from fedclock.algorithms.fedper import FedPer
from fedclock.algorithms.fedrep import FedRep, FedRepParams
from fedclock.algorithms.base import AlgorithmParams
from fedclock.algorithms.personal import epoch_steps, finetune_rng
from tests.algorithms.tiny import BODY, DATA, FACTORY, HEAD, V, W, Y, ce, gen, grad, logits, masked

LR = 0.4
ONE_STEP = dict(lr=LR, batch_size=4, local_steps=1)


def test_ditto_global_and_personal_steps() -> None:
    alg = Ditto(DittoParams(**ONE_STEP, lam=0.5), FACTORY)
    result = alg.client_update({"weights": W}, {"personal": V}, DATA, gen())
    assert torch.allclose(result.upload["delta"], -LR * grad(ce, W), atol=1e-6)
    expected = V - LR * (grad(ce, V) + 0.5 * (V - W))
    assert torch.allclose(result.state["personal"], expected, atol=1e-6)
    first = alg.client_update({"weights": W}, None, DATA, gen())
    assert torch.allclose(first.state["personal"], W - LR * grad(ce, W), atol=1e-6)


def test_fedrep_head_then_body() -> None:
    alg = FedRep(FedRepParams(**ONE_STEP, head_epochs=1), FACTORY)
    result = alg.client_update({"weights": W}, {"head": V[HEAD]}, DATA, gen())
    start = W.clone()
    start[HEAD] = V[HEAD]
    headed = start - LR * masked(grad(ce, start), HEAD)
    local = headed - LR * masked(grad(ce, headed), BODY)
    assert torch.allclose(result.state["head"], local[HEAD], atol=1e-6)
    assert torch.allclose(result.upload["body_delta"], (local - W)[BODY], atol=1e-6)
    assert set(result.upload) == {"body_delta"} and alg.upload_bytes() == 4 * 4


def test_fedper_joint_step_body_up_head_kept() -> None:
    alg = FedPer(AlgorithmParams(**ONE_STEP), FACTORY)
    result = alg.client_update({"weights": W}, {"head": V[HEAD]}, DATA, gen())
    start = W.clone()
    start[HEAD] = V[HEAD]
    local = start - LR * grad(ce, start)
    assert torch.allclose(result.upload["body_delta"], (local - W)[BODY], atol=1e-6)
    assert torch.allclose(result.state["head"], local[HEAD], atol=1e-6)


def test_fedbabu_trains_only_the_body() -> None:
    alg = FedBABU(FedBABUParams(**ONE_STEP), FACTORY)
    result = alg.client_update({"weights": W}, None, DATA, gen())
    assert torch.allclose(result.upload["body_delta"], -LR * grad(ce, W)[BODY], atol=1e-6)
    assert result.state is None


def test_body_averaging_server() -> None:
    alg = FedRep(FedRepParams(), FACTORY)
    state = ServerState(tensors={"weights": W.clone()}, version=1)
    arrivals = [Arrival(0, {"body_delta": torch.ones(4)}, 1, 1, 0),
                Arrival(1, {"body_delta": torch.tensor([5.0, 5.0, -3.0, 1.0])}, 3, 1, 0)]
    new, changed = alg.receive(state, arrivals, gen())
    expected = W.clone()
    expected[BODY] += torch.tensor([4.0, 4.0, -2.0, 1.0])  # (1 * 1 + 3 * d) / 4
    assert changed and new.version == 2 and torch.allclose(new.tensors["weights"], expected)


def test_apfl_step_updates_w_v_and_alpha() -> None:
    alpha = 0.3
    alg = APFL(APFLParams(**ONE_STEP, alpha=alpha), FACTORY)
    result = alg.client_update({"weights": W}, {"personal": V, "alpha": torch.tensor([alpha])}, DATA, gen())
    vbar = alpha * V + (1 - alpha) * W
    g_bar = grad(ce, vbar)
    assert torch.allclose(result.upload["delta"], -LR * grad(ce, W), atol=1e-6)
    assert torch.allclose(result.state["personal"], V - LR * alpha * g_bar, atol=1e-6)
    expected_alpha = min(1.0, max(0.0, alpha - LR * float((V - W) @ g_bar)))
    assert abs(float(result.state["alpha"][0]) - expected_alpha) < 1e-6
    # evaluation uses the mixture with the latest global model
    fixed = APFL(APFLParams(**ONE_STEP, alpha=alpha, adapt_alpha=False), FACTORY)
    frozen = fixed.client_update({"weights": W}, {"personal": V, "alpha": torch.tensor([alpha])}, DATA, gen())
    assert float(frozen.state["alpha"][0]) == float(torch.tensor(alpha))
    mix = fixed.mixture({"weights": W}, {"personal": V, "alpha": torch.tensor([0.25])})
    assert torch.allclose(mix, 0.25 * V + 0.75 * W)


def test_apfl_alpha_is_clipped_to_the_unit_interval() -> None:
    alg = APFL(APFLParams(lr=100.0, batch_size=4, local_steps=1, alpha=0.5), FACTORY)
    result = alg.client_update({"weights": W}, {"personal": V, "alpha": torch.tensor([0.5])}, DATA, gen())
    assert float(result.state["alpha"][0]) in (0.0, 1.0)


def test_finetune_evaluation_of_fedavg_ft_and_fedbabu() -> None:
    ft = FedAvgFT(FedAvgFTParams(lr=LR, batch_size=4, finetune_epochs=1), FACTORY)
    tuned = W - LR * grad(ce, W)  # one epoch = one step of the whole batch
    model = FACTORY.build()
    FACTORY.load_flat(model, tuned)
    expected = evaluate_module(model, DATA.x_test, DATA.y_test, 8)
    got = ft.evaluate_client({"weights": W}, None, DATA, 8)
    assert got.loss_sum == expected.loss_sum and got.correct == expected.correct
    loss = float(F.cross_entropy(logits(tuned), Y, reduction="sum"))
    assert abs(got.loss_sum - loss) < 1e-5
    babu_head = FedBABU(FedBABUParams(lr=LR, batch_size=4, finetune_part="head"), FACTORY)
    head_only = W - LR * masked(grad(ce, W), HEAD)
    assert abs(babu_head.evaluate_client({"weights": W}, None, DATA, 8).loss_sum
               - float(F.cross_entropy(logits(head_only), Y, reduction="sum"))) < 1e-5
    untuned = FedAvgFT(FedAvgFTParams(lr=LR, batch_size=4, finetune_epochs=0), FACTORY)
    assert abs(untuned.evaluate_client({"weights": W}, None, DATA, 8).loss_sum
               - float(F.cross_entropy(logits(W), Y, reduction="sum"))) < 1e-5


def test_helpers() -> None:
    assert epoch_steps(10, 4, 1) == 3 and epoch_steps(10, 4, 0.1) == 1 and epoch_steps(10, 4, 2) == 6
    a, b = finetune_rng(3), finetune_rng(3)
    assert torch.equal(torch.randperm(5, generator=a), torch.randperm(5, generator=b))
