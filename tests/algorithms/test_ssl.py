"""SSL pieces: losses on hand-made tensors, Sobel, augmentation determinism, k-NN, the
FedAvg objective plug-in and linear probing."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedclock.algorithms.base import ClientData
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.linear_eval import linear_probe
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.ssl import Augment, SSLModelFactory, knn_accuracy, nt_xent, simsiam_loss, sobel, supcon


def test_supcon_by_hand() -> None:
    z = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])  # normalized: e1, e1, e2
    loss = supcon(z, torch.tensor([0, 0, 1]), temperature=1.0)
    # anchors 0 and 1: positive similarity 1, negative 0; anchor 2 has no positive
    assert float(loss) == pytest.approx(math.log(1 + math.e) - 1, abs=1e-6)
    loss_t = supcon(z, torch.tensor([0, 0, 1]), temperature=0.5)
    assert float(loss_t) == pytest.approx(math.log(math.exp(2) + 1) - 2, abs=1e-6)


def test_nt_xent_by_hand_and_against_cross_entropy() -> None:
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # each anchor: positive similarity 1, two negatives with similarity 0; t = 0.5
    assert float(nt_xent(z, z.clone(), 0.5)) == pytest.approx(math.log(1 + 2 * math.exp(-2)), abs=1e-6)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    zz = F.normalize(torch.cat([a, b]), dim=1)
    sim = zz @ zz.t() / 0.3
    sim.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(5, 10), torch.arange(0, 5)])
    assert float(nt_xent(a, b, 0.3)) == pytest.approx(float(F.cross_entropy(sim, target)), abs=1e-5)


def test_simsiam_by_hand_and_stop_gradient() -> None:
    p_a = torch.tensor([[1.0, 0.0]], requires_grad=True)
    p_b = torch.tensor([[1.0, 1.0]], requires_grad=True)
    z_a = torch.tensor([[1.0, 0.0]], requires_grad=True)
    z_b = torch.tensor([[0.0, 1.0]], requires_grad=True)
    loss = simsiam_loss(p_a, p_b, z_a, z_b)
    assert float(loss.detach()) == pytest.approx(0.5 * 0.0 - 0.5 / math.sqrt(2), abs=1e-6)
    loss.backward()
    assert z_a.grad is None and z_b.grad is None
    assert p_a.grad is not None and p_b.grad is not None


def test_sobel_on_a_step_image() -> None:
    img = torch.tensor([[0.0, 0.0, 1.0]] * 3).reshape(1, 1, 3, 3)
    expected = torch.tensor([[0.0, 4.0, 4.0]] * 3).reshape(1, 1, 3, 3)
    assert torch.allclose(sobel(img), expected)
    # transposed step: the vertical gradient, same magnitude; channels kept apart
    two = torch.cat([img, img.transpose(2, 3)], dim=1)
    out = sobel(two)
    assert out.shape == (1, 2, 3, 3)
    assert torch.allclose(out[:, 1:], expected.transpose(2, 3)) and torch.allclose(out[:, :1], expected)
    assert torch.equal(sobel(torch.full((2, 3, 4, 4), 5.0)), torch.zeros(2, 3, 4, 4))


def test_augment_is_seeded_and_leaves_the_global_generator_alone() -> None:
    aug = Augment((1, 8, 8))
    x = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    before = torch.get_rng_state()
    a = aug(x, torch.Generator().manual_seed(3))
    b = aug(x, torch.Generator().manual_seed(3))
    c = aug(x, torch.Generator().manual_seed(4))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a, b) and not torch.equal(a, c) and a.shape == x.shape


def test_knn_accuracy_by_hand() -> None:
    bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    bank_y = torch.tensor([0, 0, 1, 1])
    query = torch.tensor([[1.0, 0.05], [0.05, 1.0], [1.0, 0.0]])
    res = knn_accuracy(bank, bank_y, query, torch.tensor([0, 1, 1]), k=1)
    assert (res.correct, res.count) == (2.0, 3)
    loo = knn_accuracy(bank, bank_y, bank, bank_y, k=1, leave_one_out=True)
    assert loo.accuracy == 1.0


FACTORY = ModelFactory("mlp", (1, 8, 8), 10, hidden=(32,))


def _data(n: int = 24) -> ClientData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return ClientData(0, x, y, x[:6], y[:6])


@pytest.mark.parametrize("objective", ["simclr", "simsiam"])
def test_fedavg_objective_plug_in(objective: str) -> None:
    sup = FedAvg(FedAvgParams(batch_size=8, local_steps=2), FACTORY)
    alg = FedAvg(FedAvgParams(objective=objective, batch_size=8, local_steps=2), FACTORY)
    assert isinstance(alg.model_factory, SSLModelFactory) and not isinstance(sup.model_factory, SSLModelFactory)
    assert alg.model_factory.body == slice(0, FACTORY.body.stop)  # the encoder is the same body
    model = alg.model_factory.build()
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 128)
    assert (model.head.predictor is not None) == (objective == "simsiam")
    state = alg.init_server(torch.Generator().manual_seed(0))
    r1 = alg.client_update(alg.payload_for(state, 0), None, _data(), torch.Generator().manual_seed(5))
    r2 = alg.client_update(alg.payload_for(state, 0), None, _data(), torch.Generator().manual_seed(5))
    assert torch.equal(r1.upload["delta"], r2.upload["delta"]) and float(r1.upload["delta"].abs().sum()) > 0
    assert math.isfinite(r1.metrics["train_loss"])
    ev = alg.evaluate_client(alg.payload_for(state, 0), None, _data(), 64)
    assert ev.count == 6 and ev.loss_sum == 0.0  # k-NN monitor


def test_supervised_default_is_unchanged() -> None:
    alg = FedAvg(FedAvgParams(batch_size=8, local_steps=2), FACTORY)
    assert alg.objective_loss(torch.Generator()) is None
    assert alg.model_factory == FACTORY


def test_linear_probe_on_a_separable_toy_set() -> None:
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[3.0, 0.0], [-3.0, 0.0], [0.0, 3.0]])
    y = torch.arange(3).repeat(40)
    x = centers[y] + 0.3 * torch.randn(120, 2, generator=g)
    res = linear_probe(lambda t: t, x[:90], y[:90], x[90:], y[90:], 3, None, torch.Generator().manual_seed(1),
                       epochs=15, lr=0.1)
    assert res.accuracy == 1.0 and res.count == 30
    with torch.random.fork_rng(devices=[]):  # the adapter's initialization, independent of earlier tests
        torch.manual_seed(0)
        adapter = torch.nn.Linear(2, 4)
    res2 = linear_probe(lambda t: t, x[:90], y[:90], x[90:], y[90:], 3, adapter, torch.Generator().manual_seed(1),
                        epochs=15, lr=0.1)
    assert res2.accuracy == 1.0
    # the features' labels shuffled: a linear probe cannot beat chance by much
    perm = torch.randperm(120, generator=g)
    bad = linear_probe(lambda t: t, x[:90], y[perm][:90], x[90:], y[perm][90:], 3, None,
                       torch.Generator().manual_seed(1), epochs=15, lr=0.1)
    assert bad.accuracy < 0.7



@pytest.mark.parametrize("name, objective, factory, samples", [
    ("fedavg", "simclr", ModelFactory("conv_gn", (3, 8, 8), 10), 10),
    ("fedstyle", "simsiam", ModelFactory("mlp", (1, 8, 8), 10, (8,)), 4)], ids=["three-channels", "one-channel"])
def test_a_counted_task_is_the_same_without_running_the_augmentations(monkeypatch: pytest.MonkeyPatch, name: str,
                                                                      objective: str, factory: ModelFactory,
                                                                      samples: int) -> None:
    """On meta tensors :class:`Augment` gives an empty view of the batch's shape instead of
    running its pipeline image by image: the counted FLOPs, activations and messages of a
    task (FedAvg's two steps, FedStyle's steady task) are those of a count that runs the
    pipeline (three channels: crop, flip, colour jitter, grayscale; one channel: crop, flip,
    brightness and contrast). About 3 s: the reference count must run the pipeline image by
    image on meta tensors, which is the cost the shortcut removes."""
    from fedclock.algorithms.flop_count import count_task
    from fedclock.algorithms.registry import get_algorithm

    cls = get_algorithm(name)
    params = {"fedavg": {"local_steps": 2}, "fedstyle": {"style_epochs": 1}}[name]
    alg = cls(cls.Params(objective=objective, batch_size=4, **params), factory)
    steps = 2 if alg.partial_work else None
    shortcut = count_task(alg, samples, steps, steady=not alg.partial_work)

    def run_pipeline(self: Augment, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        return self.apply(x, int(torch.randint(0, 2**62, (1,), generator=rng))) if x.dim() == 4 else x

    monkeypatch.setattr(Augment, "__call__", run_pipeline)
    assert count_task(alg, samples, steps, steady=not alg.partial_work) == shortcut
