"""FedAsync: staleness functions and the model mix."""
from __future__ import annotations

import pydantic
import pytest
import torch

from fedclock.algorithms.base import Arrival, ClientData, ServerState
from fedclock.algorithms.fedasync import FedAsync, FedAsyncParams, mixing_weight
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import local_sgd, proximal_loss
from tests.algorithms.server_rules import TINY, gen


@pytest.mark.parametrize(("fn", "s", "a", "b", "expected"), [
    ("constant", 0, 0.5, 4, 0.5),
    ("constant", 7, 0.5, 4, 0.5),
    ("polynomial", 0, 0.5, 4, 0.5),
    ("polynomial", 3, 0.5, 4, 0.25),          # 0.5 * 4 ** -0.5
    ("polynomial", 1, 1.0, 4, 0.25),          # 0.5 * 2 ** -1
    ("hinge", 1, 1.0, 2, 0.5),                # s <= b
    ("hinge", 2, 1.0, 2, 0.5),                # s == b
    ("hinge", 4, 1.0, 2, 0.5 / 3),            # 1 / (1 * (4 - 2) + 1)
    ("hinge", 6, 0.5, 4, 0.5 / 2),            # 1 / (0.5 * 2 + 1)
])
def test_mixing_weight(fn: str, s: int, a: float, b: float, expected: float) -> None:
    assert mixing_weight(0.5, fn, s, a, b) == pytest.approx(expected)  # type: ignore[arg-type]


def test_mixing_weight_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        mixing_weight(0.5, "polynomial", -1, 0.5, 4)
    with pytest.raises(ValueError):
        mixing_weight(0.5, "linear", 1, 0.5, 4)  # type: ignore[arg-type]


def test_server_mixes_each_arrival() -> None:
    alg = FedAsync(FedAsyncParams(alpha=0.5, staleness_fn="polynomial", a=0.5), TINY)
    w = torch.tensor([1.0, -2.0, 4.0])
    state = ServerState(tensors={"weights": w}, version=9)
    new_model = torch.tensor([3.0, 2.0, 0.0])
    arrival = Arrival(client=2, upload={"weights": new_model}, num_samples=10, version_dispatched=6, staleness=3)
    new, changed = alg.receive(state, [arrival], gen())
    # a_t = 0.5 * 4 ** -0.5 = 0.25: 0.75 w + 0.25 w_new
    torch.testing.assert_close(new.tensors["weights"], torch.tensor([1.5, -1.0, 3.0]))
    assert changed and new.version == 10 and new.extra["last_mixing_weight"] == pytest.approx(0.25)
    assert torch.equal(w, torch.tensor([1.0, -2.0, 4.0]))
    # a fresh arrival, constant function: a_t = alpha
    alg2 = FedAsync(FedAsyncParams(alpha=1.0, staleness_fn="constant"), TINY)
    fresh = Arrival(client=0, upload={"weights": new_model}, num_samples=1, version_dispatched=9, staleness=0)
    newer, _ = alg2.receive(state, [fresh], gen())
    torch.testing.assert_close(newer.tensors["weights"], new_model)
    same, changed = alg.receive(state, [], gen())
    assert not changed and same.version == 9


def test_params_validation() -> None:
    p = FedAsyncParams()
    assert (p.alpha, p.staleness_fn, p.a, p.b, p.rho) == (0.6, "polynomial", 0.5, 4, 0.0)
    for bad in ({"alpha": 0.0}, {"alpha": 1.5}, {"staleness_fn": "linear"}, {"rho": -1.0}, {"a": -1.0}):
        with pytest.raises(pydantic.ValidationError):
            FedAsyncParams(**bad)  # type: ignore[arg-type]
    assert FedAsync.modes == frozenset({"async"}) and FedAsync.name == "fedasync"


def test_client_proximal_term() -> None:
    factory = ModelFactory("logistic", (3,), 2)
    params = FedAsyncParams(lr=0.1, batch_size=4, local_steps=2, rho=5.0)
    alg = FedAsync(params, factory)
    state = alg.init_server(gen())
    x, y = torch.randn(4, 3, generator=gen(1)), torch.tensor([0, 1, 1, 0])
    data = ClientData(0, x, y, x[:0], y[:0])
    result = alg.client_update(alg.payload_for(state, 0), None, data, gen(2))
    start = state.tensors["weights"]
    model = factory.build()
    expected, _ = local_sgd(model, factory, start, data, params, gen(2), steps=2,
                            extra_loss=proximal_loss(start, 5.0, model))
    plain, _ = local_sgd(model, factory, start, data, params, gen(2), steps=2)
    torch.testing.assert_close(result.upload["weights"], expected)
    assert not torch.allclose(expected, plain)
    assert float((expected - start).norm()) < float((plain - start).norm())


def _arrival(client: int, weights: list[float], staleness: int, n: int = 10) -> Arrival:
    return Arrival(client=client, upload={"weights": torch.tensor(weights)}, num_samples=n, version_dispatched=0,
                   staleness=staleness)


def test_stale_mix_mean_equal_punctual_arrivals_give_their_mean() -> None:
    """Three punctual arrivals of equal size: the new model is their plain mean
    ((1 + 3 + 5) / 3 = 3, (0 + 0 + 6) / 3 = 2), whatever alpha; sequential mixing at alpha 0.8
    instead gives the last arrival 0.8 and the first 0.8 x 0.2 x 0.2 = 0.032."""
    alg = FedAsync(FedAsyncParams(alpha=0.8, window="stale_mix_mean"), TINY)
    state = ServerState(tensors={"weights": torch.tensor([100.0, 100.0])}, version=4)
    arrivals = [_arrival(0, [1.0, 0.0], 0), _arrival(1, [3.0, 0.0], 0), _arrival(2, [5.0, 6.0], 0)]
    new, changed = alg.server_receive(state, arrivals, gen())
    assert changed
    assert torch.allclose(new.tensors["weights"], torch.tensor([3.0, 2.0]))
    seq = FedAsync(FedAsyncParams(alpha=0.8, staleness_fn="constant"), TINY)
    mixed = seq.server_receive(state, arrivals, gen())[0].tensors["weights"]
    # 100 * 0.2^3 + 1 * 0.8 * 0.2^2 + 3 * 0.8 * 0.2 + 5 * 0.8 = 0.8 + 0.032 + 0.48 + 4
    assert mixed[0].item() == pytest.approx(5.312)


def test_stale_mix_mean_mixes_only_the_stale_then_weights_by_samples() -> None:
    """Global w = (2, 2). A punctual model (4, 0) of 30 samples; a model (0, 8) 3 versions
    stale of 10 samples, mixed at a = 0.8 * 4^-0.5 = 0.4: 0.4 (0, 8) + 0.6 (2, 2) = (1.2, 4.4).
    Mean by samples: 0.75 (4, 0) + 0.25 (1.2, 4.4) = (3.3, 1.1)."""
    alg = FedAsync(FedAsyncParams(alpha=0.8, staleness_fn="polynomial", a=0.5, window="stale_mix_mean"), TINY)
    state = ServerState(tensors={"weights": torch.tensor([2.0, 2.0])}, version=7)
    new, _ = alg.server_receive(state, [_arrival(0, [4.0, 0.0], 0, n=30), _arrival(1, [0.0, 8.0], 3, n=10)], gen())
    assert torch.allclose(new.tensors["weights"], torch.tensor([3.3, 1.1]))
    assert new.extra["last_mixing_weight"] == pytest.approx(0.4)
