"""Vectorized clients give the sequential loop's numbers (float tolerance; counts exact),
on the CPU and, where a GPU is visible, on it (``device`` parameters marked ``cuda``: both
paths on the GPU, so the batched kernels are checked against the per-client path there). As
in an executor, the clients' data are on the device and payloads, start weights and client
states arrive as CPU tensors."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from fedclock.algorithms.base import AlgorithmParams, ClientData
from fedclock.algorithms.fedasync import FedAsync, FedAsyncParams
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_async import FedAvgAsync, FedAvgAsyncParams
from fedclock.algorithms.fedbuff import FedBuff, FedBuffParams
from fedclock.algorithms.fedexp import FedExp, FedExpParams
from fedclock.algorithms.fednova import FedNova, FedNovaParams
from fedclock.algorithms.fedsam import FedSAM
from fedclock.algorithms.local import Local, LocalParams
from fedclock.algorithms.fedprox import FedProx, FedProxParams
from fedclock.algorithms.ditto import Ditto, DittoParams
from fedclock.algorithms.fedavg_ft import FedAvgFT, FedAvgFTParams
from fedclock.algorithms.fedcm import FedCM, FedCMParams
from fedclock.algorithms.scaffold import Scaffold, ScaffoldParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.mofedsam import MoFedSAM
from fedclock.algorithms.training import local_sgd
from fedclock.algorithms.vectorized import SGDTask, VECTOR_MODELS, check_model, client_updates, is_vectorizable, \
    vectorize_problem, vectorized_local_sgd
from fedclock.scheduling.rng import Stream, torch_rng
from tests.devices import DEVICES, on_device
from tests.numerics import sgd_atol

MLP = ModelFactory("mlp", (6,), 3, hidden=(8,))
"""The tests' MLP (6 -> 8 -> 3)."""
ATOL = sgd_atol(MLP.build(), (6,), 8, 14, scale=10.0)
"""Sequential and vectorized SGD sum in other orders (:mod:`tests.numerics`): the longest chain
here is two tasks of at most 4 local steps and Ditto's 3 personal steps each (14 steps) of
the MLP on batches of at most 8, on values of order 1; SCAFFOLD's control divides a
difference of weights by lr x steps >= 0.1 (x 10). The CNN cases derive their own bound."""


def client(c: int, n: int, shape: tuple[int, ...], classes: int = 3) -> ClientData:
    gen = torch.Generator().manual_seed(100 + c)
    x = torch.randn(n, *shape, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    return ClientData(c, x, y, x[:0], y[:0])


def rng(c: int, task: int = 0) -> torch.Generator:
    return torch_rng(7, Stream.TASK, c, task)


def sequential(factory: ModelFactory, tasks: list[SGDTask], device: str = "cpu"
               ) -> list[tuple[torch.Tensor, dict[str, float]]]:
    """Each task through the shared loop, from a copy of its generator."""
    from fedclock.algorithms.training import proximal_loss

    model = factory.build().to(device)
    out = []
    for t in tasks:
        extra = proximal_loss(t.start, t.prox_mu, model) if t.prox_mu > 0 else None
        out.append(local_sgd(model, factory, t.start, t.data, t.params, t.rng, t.steps, extra))
    return out


def run_both(factory: ModelFactory, make: Any, device: str = "cpu") -> tuple[list[Any], list[Any]]:
    """``make()`` builds the same tasks (fresh generators) for each side, on ``device``."""
    return sequential(factory, make(), device), vectorized_local_sgd(factory.build().to(device), factory, make())


def assert_same(seq: list[Any], vec: list[Any], atol: float = ATOL) -> None:
    assert len(seq) == len(vec)
    for (w_s, m_s), (w_v, m_v) in zip(seq, vec):
        assert w_v.dtype == torch.float32 and w_v.shape == w_s.shape
        torch.testing.assert_close(w_v.cpu(), w_s.cpu(), atol=atol, rtol=0)
        assert m_v["steps"] == m_s["steps"]
        if m_s["steps"]:
            assert m_v["train_loss"] == pytest.approx(m_s["train_loss"], abs=atol)
        else:
            assert m_v["train_loss"] != m_v["train_loss"]  # NaN like the loop


@pytest.mark.numerics
@pytest.mark.parametrize("device", DEVICES)
def test_mlp_different_sizes_short_batches_partial_steps_and_hyperparameters(device: str) -> None:
    factory = ModelFactory("mlp", (6,), 3, hidden=(8,))
    start = factory.initial_weights(torch.Generator().manual_seed(0))
    sizes = [23, 5, 40, 0, 12]  # 23 % 8 and 40 % 8: batches straddle epochs; 5 < batch: short batches
    steps = [7, 3, 2, 4, 0]  # partial work and zero steps
    params = [AlgorithmParams(lr=0.1, batch_size=8), AlgorithmParams(lr=0.05, batch_size=8, momentum=0.9),
              AlgorithmParams(lr=0.2, batch_size=8, weight_decay=0.01, max_grad_norm=0.5),
              AlgorithmParams(batch_size=8), AlgorithmParams(batch_size=8)]
    data = [on_device(client(c, n, (6,)), device) for c, n in enumerate(sizes)]

    def make() -> list[SGDTask]:
        return [SGDTask(start + 0.01 * c, data[c], params[c], rng(c), steps[c], prox_mu=0.3 if c == 0 else 0.0)
                for c in range(len(sizes))]

    seq, vec = run_both(factory, make, device)
    assert [m["steps"] for _, m in vec] == [7, 3, 2, 0, 0]
    assert_same(seq, vec)
    assert not torch.equal(vec[0][0].cpu(), start)  # it trained


@pytest.mark.numerics
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["cnn5", "spfl_cnn_padded", "conv_gn", "logistic", "pfl_cnn"])
def test_other_models(name: str, device: str) -> None:
    factory = ModelFactory(name, (1, 8, 8), 4)
    start = factory.initial_weights(torch.Generator().manual_seed(1))
    data = [on_device(client(c, n, (1, 8, 8), 4), device) for c, n in enumerate([9, 4, 6])]
    p = AlgorithmParams(lr=0.05, batch_size=4, momentum=0.5)

    def make() -> list[SGDTask]:
        return [SGDTask(start, data[c], p, rng(c), s) for c, s in enumerate([3, 2, 1])]

    assert_same(*run_both(factory, make, device), atol=sgd_atol(factory.build(), (1, 8, 8), 4, 3))


def test_leaf_cnn_is_the_layer_chain_cnn5_is() -> None:
    """leaf_cnn has cnn5's layer types (two padded conv + pool blocks, dense layers), so the
    batched kernels run it as they run cnn5 (whose results test_other_models checks)."""
    from fedclock.algorithms.batched_net import BatchedNet

    assert BatchedNet.plan(ModelFactory("leaf_cnn", (1, 8, 8), 4).build()) is not None
    check_model(ModelFactory("leaf_cnn", (1, 8, 8), 4).build())


def test_rejects_models_with_batchnorm() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    with pytest.raises(ValueError, match="buffers"):
        check_model(model)
    with pytest.raises(ValueError, match="Dropout only as a layer of a FedModel"):
        check_model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout()))
    with pytest.raises(ValueError, match="AlphaDropout"):
        check_model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.AlphaDropout()))


# ---------------------------------------------------------------- dropout (pfl_cnn)

PFL = ModelFactory("pfl_cnn", (3, 8, 8), 4)
"""pfl-research's CNN (dropout 0.25 after the pool, 0.5 after the dense layer) on 8x8 images."""


def _pfl_tasks(sizes: list[int], steps: list[int], momentum: float = 0.0, task: int = 0) -> list[SGDTask]:
    start = PFL.initial_weights(torch.Generator().manual_seed(1))
    p = AlgorithmParams(lr=0.05, batch_size=4, momentum=momentum)
    return [SGDTask(start, client(c, n, (3, 8, 8), 4), p, rng(c, task), s)
            for c, (n, s) in enumerate(zip(sizes, steps))]


def _drop_p(model: torch.nn.Module, p: float) -> torch.nn.Module:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p
    return model


def test_pfl_cnn_on_the_vmap_path_matches_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vmap path (other devices; here forced on the CPU) runs the dropout chain layer by
    layer with the same stored masks: the sequential weights up to float rounding."""
    from fedclock.algorithms import batched_net

    monkeypatch.setattr(batched_net.BatchedNet, "plan", staticmethod(lambda model: None))

    def make() -> list[SGDTask]:
        return _pfl_tasks([9, 4, 6], [3, 2, 1], momentum=0.5)

    assert_same(*run_both(PFL, make), atol=sgd_atol(PFL.build(), (3, 8, 8), 4, 3))


def test_dropout_masks_are_the_loops_and_independent_across_clients() -> None:
    """Each client's stored masks are those its sequential task draws (recorded by calling
    each dropout layer of the loop's model on ones with the generator state it had, which
    dropout's output on any input multiplies by); a client's masks depend on its own task
    seed only; across clients and layers the kept fraction is 1 - p and two clients' masks
    agree as often as independent draws do."""
    from fedclock.algorithms.vectorized import _dropout_plan

    tasks = _pfl_tasks([40] * 6, [5] * 6)
    model = PFL.build()
    plan = _dropout_plan(model, tasks, [4] * 6, [5] * 6, (5, 6, 4), torch.device("cpu"))
    assert [tuple(keep.shape) for keep, _ in plan] == [(5, 6, 4, 64, 2, 2), (5, 6, 4, 128)]
    assert [factor for _, factor in plan] == [pytest.approx(1 / 0.75), pytest.approx(2.0)]

    loop = PFL.build()
    drawn: list[list[torch.Tensor]] = []

    def recording(module: torch.nn.Module, forward: Any) -> Any:
        def wrapped(x: torch.Tensor) -> torch.Tensor:
            noise = forward(torch.ones_like(x))
            drawn[-1].append(noise != 0)
            return x * noise
        return wrapped

    for m in loop.modules():
        if isinstance(m, torch.nn.Dropout):
            m.forward = recording(m, m.forward)  # type: ignore[method-assign]
    for j, t in enumerate(_pfl_tasks([40] * 6, [5] * 6)):
        drawn.append([])
        local_sgd(loop, PFL, t.start, t.data, t.params, t.rng, t.steps)
        for step in range(5):
            for i, (keep, _) in enumerate(plan):
                assert torch.equal(keep[step, j], drawn[j][2 * step + i])
    for (keep, _), p in zip(plan, (0.25, 0.5)):
        assert float(keep.float().mean()) == pytest.approx(1 - p, abs=0.02)
        flat = keep.transpose(0, 1).reshape(6, -1).float()
        agree = float((flat[0] == flat[1]).float().mean())
        assert agree == pytest.approx((1 - p) ** 2 + p ** 2, abs=0.02)  # independent draws agree this often
    # a client's masks are the same whatever the group it is trained in
    alone = _dropout_plan(model, tasks[3:4], [4], [5], (5, 1, 4), torch.device("cpu"))
    assert all(torch.equal(a[0][:, 0], b[0][:, 3]) for a, b in zip(alone, plan))
    # another task seed, other masks
    other = _dropout_plan(model, _pfl_tasks([40] * 6, [5] * 6, task=1), [4] * 6, [5] * 6, (5, 6, 4),
                          torch.device("cpu"))
    assert not torch.equal(other[1][0], plan[1][0])


def test_dropout_p0_is_the_model_without_dropout_exactly() -> None:
    """With p = 0 the stored noise is all ones and the vectorized weights equal, bit for bit,
    those of the same network without its dropout layers; with pfl_cnn's p they differ by far
    more than the tolerance the loop is matched within (so the match above tests the masks)."""
    from fedclock.algorithms.models import FedModel

    def make() -> list[SGDTask]:
        return _pfl_tasks([9, 4, 6], [3, 2, 1])

    with_p0 = vectorized_local_sgd(_drop_p(PFL.build(), 0.0), PFL, make())
    model = PFL.build()
    plain = FedModel(torch.nn.Sequential(*[m for m in model.body if not isinstance(m, torch.nn.Dropout)]),
                     model.head, {})
    without = vectorized_local_sgd(plain, PFL, make())
    for (w0, m0), (w1, m1) in zip(with_p0, without):
        assert torch.equal(w0, w1) and m0 == m1
    dropped = vectorized_local_sgd(PFL.build(), PFL, make())
    atol = sgd_atol(PFL.build(), (3, 8, 8), 4, 3)
    assert all(float((w0 - w1).abs().max()) > 5 * atol for (w0, _), (w1, _) in zip(dropped, without))


ALGORITHMS = [(FedAvg, FedAvgParams(lr=0.1, batch_size=5, lr_decay=0.9)),
              (FedProx, FedProxParams(batch_size=5, mu=0.5)),
              (FedAsync, FedAsyncParams(batch_size=5, rho=0.2)), (FedBuff, FedBuffParams(batch_size=5)),
              (FedAvgAsync, FedAvgAsyncParams(batch_size=5)), (FedAvgFT, FedAvgFTParams(lr=0.1, batch_size=5)),
              (FedExp, FedExpParams(lr=0.1, batch_size=5, lr_decay=0.9)),
              (FedNova, FedNovaParams(lr=0.1, batch_size=5, momentum=0.5, server_lr=1.5))]


@pytest.mark.numerics
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,params", ALGORITHMS, ids=[c.name for c, _ in ALGORITHMS])
def test_client_updates_match_client_update(cls: Any, params: Any, device: str) -> None:
    factory = ModelFactory("mlp", (6,), 3, hidden=(8,))
    alg = cls(params, factory).to(device)
    state = alg.init_server(torch.Generator().manual_seed(0))
    payload = alg.payload_for(dataclasses.replace(state, version=3), 0)
    data = [on_device(dataclasses.replace(client(c, n, (6,)), steps=s), device)
            for c, (n, s) in enumerate([(12, None), (3, 2), (17, 1)])]
    seq = [alg.client_update(payload, None, d, rng(c, 2)) for c, d in enumerate(data)]
    vec = client_updates(alg, [payload] * 3, [None] * 3, data, [rng(c, 2) for c in range(3)])
    for s, v in zip(seq, vec):
        assert s.upload.keys() == v.upload.keys() and s.state is v.state is None
        assert s.num_samples == v.num_samples and s.metrics.keys() == v.metrics.keys()
        for key in s.upload:
            torch.testing.assert_close(v.upload[key].cpu(), s.upload[key].cpu(), atol=ATOL, rtol=0)
        assert v.metrics["steps"] == s.metrics["steps"]
        assert v.metrics["train_loss"] == pytest.approx(s.metrics["train_loss"], abs=ATOL)


def test_opt_in_is_per_class_and_checked() -> None:
    assert all(is_vectorizable(cls) for cls, _ in ALGORITHMS) and all(is_vectorizable(c) for c, _, _ in STATEFUL)
    assert not is_vectorizable(MoFedSAM)  # FedCM's SAM sibling: not vectorized
    assert not is_vectorizable(FedSAM)  # a FedAvg subclass does not inherit the flag
    assert vectorize_problem(FedAvg, FedAvgParams(), "mlp") is None
    assert "does not support vectorized clients" in str(vectorize_problem(FedSAM, FedSAM.Params(), "mlp"))
    assert "resnet18_gn" in str(vectorize_problem(FedAvg, FedAvgParams(), "resnet18_gn"))
    assert "resnet18_gn" not in VECTOR_MODELS
    assert "algorithm.objective is 'simclr'" in str(vectorize_problem(FedAvg, FedAvgParams(objective="simclr"), "mlp"))
    alg = FedSAM(FedSAM.Params(), ModelFactory("mlp", (6,), 3, hidden=(8,)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vectorized"):
        client_updates(alg, [], [], [], [])


STATEFUL = [(Scaffold, ScaffoldParams(lr=0.1, batch_size=5, lr_decay=0.9, momentum=0.5), "control"),
            (FedCM, FedCMParams(lr=0.1, batch_size=5, alpha=0.3, max_grad_norm=1.0), "momentum"),
            (Ditto, DittoParams(lr=0.1, batch_size=5, lam=0.5, personal_steps=3), None),
            (Local, LocalParams(lr=0.1, batch_size=5, momentum=0.5), None)]


def _assert_results_close(seq: Any, vec: Any) -> None:
    for s, v in zip(seq, vec):
        assert s.upload.keys() == v.upload.keys() and s.num_samples == v.num_samples
        assert (s.state is None) == (v.state is None) and s.metrics.keys() == v.metrics.keys()
        for key in s.upload:
            torch.testing.assert_close(v.upload[key].cpu(), s.upload[key].cpu(), atol=ATOL, rtol=0)
        for key in (s.state or {}):
            torch.testing.assert_close(v.state[key].cpu(), s.state[key].cpu(), atol=ATOL, rtol=0)
        assert v.metrics["steps"] == s.metrics["steps"]
        for key in s.metrics:
            assert v.metrics[key] == pytest.approx(s.metrics[key], abs=ATOL, nan_ok=True)


@pytest.mark.numerics
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,params,vector", STATEFUL, ids=[c.name for c, _, _ in STATEFUL])
def test_stateful_client_updates_match_over_two_tasks(cls: Any, params: Any, vector: str | None, device: str) -> None:
    """SCAFFOLD's control shift, FedCM's momentum mix and Ditto's two phases, from a nonzero
    server vector, twice in a row (the second task from the first's client state)."""
    factory = ModelFactory("mlp", (6,), 3, hidden=(8,))
    alg = cls(params, factory).to(device)
    alg.num_clients = 4
    state = alg.init_server(torch.Generator().manual_seed(0))
    payload = dict(alg.payload_for(dataclasses.replace(state, version=2), 0))
    if vector is not None:  # a server vector as after some rounds
        payload[vector] = 0.1 * torch.randn(factory.num_params, generator=torch.Generator().manual_seed(5))
    steps = [None, 2, 1, None] if cls.partial_work else [None] * 4
    data = [on_device(dataclasses.replace(client(c, n, (6,)), steps=s), device)
            for c, (n, s) in enumerate(zip([12, 3, 17, 0], steps))]
    states: list[Any] = [None] * 4
    for task in range(2):
        seq = [alg.client_update(payload, st, d, rng(c, task)) for c, (st, d) in enumerate(zip(states, data))]
        vec = client_updates(alg, [payload] * 4, states, data, [rng(c, task) for c in range(4)])
        _assert_results_close(seq, vec)
        states = [r.state for r in seq]
    if vector is not None:  # the distinctive term was applied: without it the upload differs
        plain = client_updates(alg, [{**payload, vector: torch.zeros(factory.num_params)}], [None], data[:1],
                               [rng(0, 0)])
        first = client_updates(alg, [payload], [None], data[:1], [rng(0, 0)])
        key = next(iter(first[0].upload))
        assert not torch.allclose(plain[0].upload[key].cpu(), first[0].upload[key].cpu(), atol=1e-4)
