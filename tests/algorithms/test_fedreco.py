"""FedReCo's update rules (both server variants) and FedReCo-DP on the tiny model, against
hand-written formulas (one full-batch step, and several mini-batch steps with clipping
active and the fresh batch of the uploaded gradient); parameter validation."""
from __future__ import annotations

import pydantic
import pytest
import torch

from fedclock.algorithms.base import Arrival, ServerState
from fedclock.algorithms.dp import classical_multiplier
from fedclock.algorithms.fedreco import FedReCo, FedReCoDP, FedReCoDPParams, FedReCoParams
from fedclock.scenarios.loader import ScenarioError, parse_suite
from tests.algorithms.tiny import BODY, DATA, FACTORY, HEAD, V, W, X, Y, ce, features, gen, grad, logits, masked

LAM, LR_V, LR_U = 0.5, 0.3, 0.2


def params(**kw: object) -> FedReCoParams:
    base = dict(lr=0.1, head_lr=LR_V, body_lr=LR_U, batch_size=4, local_steps=1, head_steps=1, lam=LAM,
                max_grad_norm=None, server_lr=0.1)
    return FedReCoParams(**{**base, **kw})  # type: ignore[arg-type]


def penalty(u: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """mean over samples of ||h(x; u) - h(x; anchor)||^2."""
    return ((features(u) - features(anchor)) ** 2).sum(dim=1).mean()


def hand_pair(start: torch.Tensor, anchor: torch.Tensor, lr_u: float = LR_U) -> torch.Tensor:
    """One head step (eta_v) on CE, then one body step (``lr_u``) on CE + lam/2 H(u, anchor);
    the batch is the whole 4-sample set."""
    headed = start - LR_V * masked(grad(ce, start), HEAD)
    objective = lambda u: ce(u) + LAM / 2 * penalty(u, anchor.detach())  # noqa: E731
    return headed - lr_u * masked(grad(objective, headed), BODY)


def test_gradient_variant_client_step() -> None:
    alg = FedReCo(params(), FACTORY)
    result = alg.client_update({"weights": W}, {"weights": V}, DATA, gen())
    personal = hand_pair(V, W)
    assert torch.allclose(result.state["weights"], personal, atol=1e-6)
    # g_p = grad_{u_0} H(u_p^{t+1}, u_0): in the active ReLU region h = W1 x + b1, so
    # dH/dW1 = mean 2 (h0 - hp) x and dH/db1 = mean 2 (h0 - hp).
    diff = 2 * (features(W) - features(personal))
    expected = torch.cat([(diff * X).mean(dim=0), diff.mean(dim=0)])
    assert torch.allclose(result.upload["grad"], expected, atol=1e-6)
    assert set(result.upload) == {"grad"} and result.upload["grad"].numel() == 4


def test_first_task_starts_from_the_download() -> None:
    alg = FedReCo(params(), FACTORY)
    result = alg.client_update({"weights": W}, None, DATA, gen())
    assert torch.allclose(result.state["weights"], hand_pair(W, W), atol=1e-6)


def test_gradient_server_step() -> None:
    alg = FedReCo(params(server_lr=0.5), FACTORY)
    state = ServerState(tensors={"weights": W.clone()}, version=3)
    arrivals = [Arrival(0, {"grad": torch.tensor([1.0, 2.0, 3.0, 4.0])}, 10, 3, 0),
                Arrival(1, {"grad": torch.tensor([3.0, 0.0, -1.0, 0.0])}, 90, 3, 0)]
    new, changed = alg.receive(state, arrivals, gen())
    expected = W.clone()
    expected[BODY] -= 0.5 * torch.tensor([2.0, 1.0, 1.0, 2.0])  # unweighted mean
    assert changed and new.version == 4 and torch.allclose(new.tensors["weights"], expected)
    assert alg.receive(state, [], gen()) == (state, False)


def test_average_variant_client_and_server() -> None:
    """The copy of the global body trains at server_lr (the workshop's 0.001 "for the global
    feature extractor"), its head and the personal pair at eta_v / eta_u."""
    alg = FedReCo(params(server_update="average", server_lr=0.05), FACTORY)
    v0 = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])[HEAD]
    result = alg.client_update({"weights": W}, {"weights": V, "global_head": v0}, DATA, gen())
    start = W.clone()
    start[HEAD] = v0
    copy = hand_pair(start, V, lr_u=0.05)  # global copy: penalty towards the personal body u_p^t
    assert torch.allclose(result.upload["body"], copy[BODY], atol=1e-6)
    assert torch.allclose(result.state["global_head"], copy[HEAD], atol=1e-6)
    assert torch.allclose(result.state["weights"], hand_pair(V, W), atol=1e-6)
    assert result.metrics["steps"] == 4  # (1 head + 1 body) for the copy and for the personal pair
    assert not torch.allclose(copy, hand_pair(start, V), atol=1e-4)  # server_lr is used, not eta_u
    state = ServerState(tensors={"weights": W.clone()})
    arrivals = [Arrival(0, {"body": torch.ones(4)}, 5, 0, 0), Arrival(1, {"body": torch.zeros(4)}, 50, 0, 0)]
    new, _ = alg.receive(state, arrivals, gen())
    assert torch.allclose(new.tensors["weights"][BODY], torch.full((4,), 0.5))
    assert torch.equal(new.tensors["weights"][HEAD], W[HEAD])


def test_dp_variant_privatizes_the_gradient() -> None:
    plain = FedReCo(params(), FACTORY)
    dp = FedReCoDP(FedReCoDPParams(**params().model_dump(), epsilon=0.5, delta=0.05, dp_clip=1e-3), FACTORY)
    g_plain, g_dp = gen(5), gen(5)
    g = plain.client_update({"weights": W}, {"weights": V}, DATA, g_plain).upload["grad"]
    noisy = dp.client_update({"weights": W}, {"weights": V}, DATA, g_dp).upload["grad"]
    sigma = classical_multiplier(0.5, 0.05) * 2 * 1e-3  # sensitivity 2C
    expected = g * (1e-3 / float(g.norm())) + sigma * torch.randn(4, generator=g_plain)
    assert torch.allclose(noisy, expected, atol=1e-7)


# ---------------------------------------------------------------- several mini-batch steps
CLIP = 0.08  # max_grad_norm small enough that local steps are clipped


def batch_ce(flat: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits(flat, X[idx]), Y[idx])


def batch_penalty(u: torch.Tensor, anchor: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return ((features(u, X[idx]) - features(anchor, X[idx])) ** 2).sum(dim=1).mean()


def clipped(g: torch.Tensor, clip: float, record: list[bool]) -> torch.Tensor:
    """torch's clip_grad_norm_ rule: scale by min(1, clip / (||g|| + 1e-6))."""
    n = float(g.norm())
    record.append(n > clip)
    return g * min(1.0, clip / (n + 1e-6))


def hand_batches(seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Generator]:
    """The batches of K_v = 2 head steps, K_u = 3 body steps and the fresh gradient batch,
    batch size 2 over 4 samples, from consecutive permutations of the task generator: a
    permutation gives two batches; a new one is drawn as soon as one is used up."""
    g = gen(seed)
    p1 = torch.randperm(4, generator=g)
    torch.randperm(4, generator=g)  # drawn when the head phase's permutation runs out
    p3 = torch.randperm(4, generator=g)
    p4 = torch.randperm(4, generator=g)
    p5 = torch.randperm(4, generator=g)
    return [p1[:2], p1[2:]], [p3[:2], p3[2:], p4[:2]], p5[:2], g


def hand_multi_step(start: torch.Tensor, anchor: torch.Tensor, head: list[torch.Tensor], body: list[torch.Tensor],
                    record: list[bool]) -> torch.Tensor:
    w = start
    for idx in head:
        w = w - LR_V * clipped(masked(grad(lambda f, idx=idx: batch_ce(f, idx), w), HEAD), CLIP, record)
    for idx in body:
        objective = lambda f, idx=idx: batch_ce(f, idx) + LAM / 2 * batch_penalty(f, anchor, idx)  # noqa: E731
        w = w - LR_U * clipped(masked(grad(objective, w), BODY), CLIP, record)
    return w


def hand_upload(personal: torch.Tensor, anchor: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """grad_{u_0} H on the fresh batch, in closed form: both ReLU units are active, so
    h = W1 x + b1, dH/dW1 = mean 2 (h0 - hp) x and dH/db1 = mean 2 (h0 - hp)."""
    x = X[idx]
    assert (x @ anchor[0:2].view(2, 1).T + anchor[2:4] > 0).all()
    assert (x @ personal[0:2].view(2, 1).T + personal[2:4] > 0).all()
    diff = 2 * (features(anchor, x) - features(personal, x))
    return torch.cat([(diff * x).mean(dim=0), diff.mean(dim=0)])


MULTI = dict(batch_size=2, head_steps=2, local_steps=3, max_grad_norm=CLIP)


@pytest.mark.parametrize("seed", [0, 11])
def test_several_clipped_steps_and_the_fresh_gradient_batch(seed: int) -> None:
    alg = FedReCo(params(**MULTI), FACTORY)
    result = alg.client_update({"weights": W}, {"weights": V}, DATA, gen(seed))
    head, body, fresh, _ = hand_batches(seed)
    record: list[bool] = []
    personal = hand_multi_step(V, W, head, body, record)
    assert any(record) and len(record) == 5  # clipping was active in some of the 5 steps
    assert torch.allclose(result.state["weights"], personal, atol=1e-6)
    assert torch.allclose(result.upload["grad"], hand_upload(personal, W, fresh), atol=1e-6)
    # the uploaded gradient's batch is fresh: not the batch of the last body step
    assert not torch.allclose(result.upload["grad"], hand_upload(personal, W, body[-1]), atol=1e-4)
    assert result.metrics["steps"] == 5


@pytest.mark.parametrize("granularity", ["batch", "example"])
def test_dp_clipping_granularity_after_several_steps(granularity: str) -> None:
    """Batch: the fresh batch's gradient is clipped to C as a whole. Example: each sample's
    gradient 2 (h0_j - hp_j) (x_j, 1) is clipped to C before the mean. Then noise z * 2C."""
    clip = 0.01
    alg = FedReCoDP(FedReCoDPParams(**params(**MULTI).model_dump(), epsilon=0.5, delta=0.05, dp_clip=clip,
                                    dp_clip_granularity=granularity), FACTORY)
    result = alg.client_update({"weights": W}, {"weights": V}, DATA, gen(3))
    head, body, fresh, g = hand_batches(3)
    personal = hand_multi_step(V, W, head, body, [])
    if granularity == "batch":
        whole = hand_upload(personal, W, fresh)
        assert float(whole.norm()) > clip
        expected = whole * (clip / float(whole.norm()))
    else:
        per_sample = torch.stack([hand_upload(personal, W, fresh[j:j + 1]) for j in range(2)])
        norms = per_sample.norm(dim=1)
        assert (norms > clip).all()
        expected = (per_sample * (clip / norms)[:, None]).mean(dim=0)
    expected = expected + classical_multiplier(0.5, 0.05) * 2 * clip * torch.randn(4, generator=g)
    assert torch.allclose(result.upload["grad"], expected, atol=1e-6)


def test_per_example_clipping_without_a_binding_clip_is_the_batch_gradient() -> None:
    alg = FedReCoDP(FedReCoDPParams(**params(**MULTI).model_dump(), epsilon=0.5, delta=0.05, dp_clip=1e6,
                                    dp_clip_granularity="example"), FACTORY)
    plain = FedReCo(params(**MULTI), FACTORY)
    personal = plain.client_update({"weights": W}, {"weights": V}, DATA, gen(4)).state["weights"]
    per_example = alg.per_example_clipped_gradient(personal, W, DATA, gen(9), 1e6)
    assert torch.allclose(per_example, plain.penalty_gradient(personal, W, DATA, gen(9)), atol=1e-6)


def test_dp_server_reports_cumulative_privacy() -> None:
    alg = FedReCoDP(FedReCoDPParams(**params().model_dump(), epsilon=0.2, delta=0.1, accounting_delta=1e-5),
                    FACTORY)
    state = alg.init_server(gen())
    for _ in range(4):
        state, _ = alg.server_receive(state, [Arrival(c, {"grad": torch.zeros(4)}, 4, 0, 0) for c in (0, 1)], gen())
    report = alg.server_metrics(state)
    assert report["dp_uploads_max"] == 4 and report["dp_delta"] == 1e-5
    assert 0 < report["dp_epsilon"] < alg.server_metrics(
        alg.server_receive(state, [Arrival(0, {"grad": torch.zeros(4)}, 4, 0, 0)], gen())[0])["dp_epsilon"]


def test_costs_and_bytes() -> None:
    alg = FedReCo(params(), FACTORY)
    assert alg.upload_bytes() == 4 * 4 and alg.download_bytes() == 10 * 4


def test_gradient_step_reports_head_plus_body_steps() -> None:
    result = FedReCo(params(head_steps=3, local_steps=2), FACTORY).client_update({"weights": W}, None, DATA, gen())
    assert result.metrics["steps"] == 5


def test_defaults_are_the_paper_setup() -> None:
    p = FedReCoParams()
    assert (p.lr, p.batch_size, p.max_grad_norm, p.lam, p.server_lr, p.server_update) == \
        (0.01, 48, 10.0, 0.01, 0.001, "gradient")


def test_dp_rejects_the_average_variant() -> None:
    with pytest.raises(pydantic.ValidationError):
        FedReCoDPParams(server_update="average")
    data = {"name": "t", "algorithm": {"name": "fedreco_dp", "server_update": "average"}, "stop": {"rounds": 1}}
    with pytest.raises(ScenarioError, match=r"algorithm.server_update: FedReCo-DP privatizes .* only 'gradient'"):
        parse_suite(data, "f")
    data["algorithm"] = {"name": "fedreco", "server_update": "mean"}
    with pytest.raises(ScenarioError, match=r"algorithm.server_update: .*'gradient' or 'average'"):
        parse_suite(data, "f")


# ---------------------------------------------------------------- the authors' code's options
def test_summed_penalty_is_lambda_times_batch_in_the_mean_form() -> None:
    """penalty_reduction: sum on the whole 4-sample batch: the body step on CE + lam/2 x 4 H
    (sum = 4 x mean), i.e. the mean form at lambda = 4 lam; the upload is 4 x the mean one."""
    alg = FedReCo(params(penalty_reduction="sum"), FACTORY)
    result = alg.client_update({"weights": W}, {"weights": V}, DATA, gen())
    headed = V - LR_V * masked(grad(ce, V), HEAD)
    objective = lambda u: ce(u) + LAM / 2 * 4 * penalty(u, W)  # noqa: E731
    personal = headed - LR_U * masked(grad(objective, headed), BODY)
    assert torch.allclose(result.state["weights"], personal, atol=1e-6)
    mean_form = FedReCo(params(lam=4 * LAM), FACTORY).client_update({"weights": W}, {"weights": V}, DATA, gen())
    assert torch.allclose(result.state["weights"], mean_form.state["weights"], atol=1e-6)
    diff = 2 * (features(W) - features(personal))
    assert torch.allclose(result.upload["grad"], 4 * torch.cat([(diff * X).mean(dim=0), diff.mean(dim=0)]),
                          atol=1e-6)
    assert not torch.allclose(result.state["weights"], hand_pair(V, W), atol=1e-4)


@pytest.mark.parametrize("reduction,scale", [("mean", 1.0), ("sum", 4.0)])
def test_server_gradient_on_the_whole_training_split(reduction: str, scale: float) -> None:
    """server_gradient_data: all with batch size 2: g_p on all 4 samples (mean, or 4 x the
    mean with the sum), drawing no batch from the task generator."""
    alg = FedReCo(params(**MULTI, server_gradient_data="all", penalty_reduction=reduction), FACTORY)
    result = alg.client_update({"weights": W}, {"weights": V}, DATA, gen(0))
    head, body, fresh, _ = hand_batches(0)
    lam = LAM * (2 if reduction == "sum" else 1)  # the body batches hold 2 samples
    personal = hand_multi_step_lam(V, W, head, body, lam)
    assert torch.allclose(result.state["weights"], personal, atol=1e-6)
    everything = torch.arange(4)
    assert torch.allclose(result.upload["grad"], scale * hand_upload(personal, W, everything), atol=1e-6)
    assert not torch.allclose(result.upload["grad"], scale * hand_upload(personal, W, fresh), atol=1e-4)
    g, reference = gen(0), gen(0)
    alg.client_update({"weights": W}, {"weights": V}, DATA, g)
    for _ in range(4):  # the training phases' permutations (hand_batches); no fifth for a fresh batch
        torch.randperm(4, generator=reference)
    assert torch.equal(g.get_state(), reference.get_state())


def hand_multi_step_lam(start: torch.Tensor, anchor: torch.Tensor, head: list[torch.Tensor],
                        body: list[torch.Tensor], lam: float) -> torch.Tensor:
    """:func:`hand_multi_step` with penalty weight ``lam`` (mean form)."""
    w = start
    for idx in head:
        w = w - LR_V * clipped(masked(grad(lambda f, idx=idx: batch_ce(f, idx), w), HEAD), CLIP, [])
    for idx in body:
        objective = lambda f, idx=idx: batch_ce(f, idx) + lam / 2 * batch_penalty(f, anchor, idx)  # noqa: E731
        w = w - LR_U * clipped(masked(grad(objective, w), BODY), CLIP, [])
    return w


def test_server_clips_the_cohort_mean_gradient() -> None:
    """Mean gradient (2, 1, 1, 2) has norm sqrt(10); server_clip 1 scales it to norm 1."""
    alg = FedReCo(params(server_lr=0.5, server_clip=1.0), FACTORY)
    state = ServerState(tensors={"weights": W.clone()}, version=0)
    arrivals = [Arrival(0, {"grad": torch.tensor([1.0, 2.0, 3.0, 4.0])}, 10, 0, 0),
                Arrival(1, {"grad": torch.tensor([3.0, 0.0, -1.0, 0.0])}, 90, 0, 0)]
    new, _ = alg.receive(state, arrivals, gen())
    expected = W.clone()
    expected[BODY] -= 0.5 * torch.tensor([2.0, 1.0, 1.0, 2.0]) / 10 ** 0.5
    assert torch.allclose(new.tensors["weights"], expected)
    loose = FedReCo(params(server_lr=0.5, server_clip=4.0), FACTORY).receive(state, arrivals, gen())[0]
    assert torch.allclose(loose.tensors["weights"][BODY], W[BODY] - 0.5 * torch.tensor([2.0, 1.0, 1.0, 2.0]))


def test_head_fine_tuning_before_the_personalized_test() -> None:
    """finetune_head_epochs 2 at batch 4: two full-batch head steps at eta_v on CE from the
    personal model, then the test; the kept state is not changed."""
    alg = FedReCo(params(finetune_head_epochs=2.0), FACTORY)
    state = {"weights": V.clone()}
    result = alg.evaluate_client({"weights": W}, state, DATA, 4)
    tuned = V
    for _ in range(2):
        tuned = tuned - LR_V * masked(grad(ce, tuned), HEAD)
    with torch.no_grad():
        out = logits(tuned)
        loss = float(torch.nn.functional.cross_entropy(out, Y, reduction="sum"))
        correct = float((out.argmax(dim=1) == Y).sum())
    assert result.count == 4 and result.correct == correct
    assert result.loss_sum == pytest.approx(loss, rel=1e-5)
    plain = FedReCo(params(), FACTORY).evaluate_client({"weights": W}, state, DATA, 4)
    assert plain.loss_sum != pytest.approx(loss, rel=1e-3)
    assert torch.equal(state["weights"], V)


def test_the_global_body_motion_metrics() -> None:
    """u_0 = (3, 0, 4, 0) at initialization (norm 5); two server steps of eta_0 = 0.5 with the
    cohort-mean gradient (2, 0, 0, 0) move it to (2, 0, 4, 0), then (1, 0, 4, 0): drift 1/5 = 0.2
    then 2/5 = 0.4; per-step change 1/5 = 0.2 then 1/sqrt(20) = 0.2236."""
    alg = FedReCo(params(server_lr=0.5), FACTORY)
    start = alg.init_server(gen())
    first = alg.server_metrics(start)
    assert first["global_body_drift"] == 0.0 and first["global_body_change"] != first["global_body_change"]  # NaN
    weights = W.clone()
    weights[BODY] = torch.tensor([3.0, 0.0, 4.0, 0.0])
    state = ServerState(tensors={"weights": weights, "body_init": weights[BODY].clone()})
    arrivals = [Arrival(0, {"grad": torch.tensor([4.0, 0.0, 0.0, 0.0])}, 10, 0, 0),
                Arrival(1, {"grad": torch.zeros(4)}, 90, 0, 0)]
    state, _ = alg.receive(state, arrivals, gen())
    m = alg.server_metrics(state)
    assert m["global_body_drift"] == pytest.approx(0.2) and m["global_body_change"] == pytest.approx(0.2)
    state, _ = alg.receive(state, arrivals, gen())
    m = alg.server_metrics(state)
    assert m["global_body_drift"] == pytest.approx(0.4) and m["global_body_change"] == pytest.approx(20 ** -0.5)
    # the workshop variant: u_0 is the mean of the uploaded bodies, (0, 0, 4, 0): change 3/5
    avg = FedReCo(params(server_update="average"), FACTORY)
    state = ServerState(tensors={"weights": weights, "body_init": weights[BODY].clone()})
    state, _ = avg.receive(state, [Arrival(c, {"body": torch.tensor([0.0, 0.0, 4.0, 0.0])}, 5, 0, 0)
                                   for c in (0, 1)], gen())
    assert avg.server_metrics(state)["global_body_change"] == pytest.approx(0.6)
    assert avg.server_metrics(state)["global_body_drift"] == pytest.approx(0.6)
    # FedReCo-DP reports the same motion beside the privacy spent
    dp = FedReCoDP(FedReCoDPParams(**params(server_lr=0.5).model_dump(), epsilon=0.2, delta=0.1), FACTORY)
    state = ServerState(tensors={"weights": weights, "body_init": weights[BODY].clone()})
    state, _ = dp.server_receive(state, arrivals, gen())
    report = dp.server_metrics(state)
    assert report["global_body_drift"] == pytest.approx(0.2) and report["dp_uploads_max"] == 1
