"""FedStyle: what travels, the server rule, generator infusion shapes, style extraction."""
from __future__ import annotations

import math

import pytest
import torch

from fedclock.algorithms.base import Arrival, ClientData
from fedclock.algorithms.fedstyle import FedStyle, FedStyleParams, Generator, StyleInfusion
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.ssl import sobel, supcon

FACTORY = ModelFactory("mlp", (1, 8, 8), 10, hidden=(32,))
D = 32  # the MLP encoder's feature width


def _data(n: int = 16) -> ClientData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return ClientData(0, x, y, x[:4], y[:4])


def _alg(objective: str = "simclr") -> FedStyle:
    return FedStyle(FedStyleParams(objective=objective, batch_size=8, local_steps=1, style_epochs=1), FACTORY)


def test_generator_infusion_shapes() -> None:
    gen = Generator(D, 32)
    content, style = torch.randn(5, D), torch.randn(5, D)
    assert gen(content, style).shape == (5, D)
    z = torch.cat([content, style], dim=1)
    out = StyleInfusion(gen, D)(z)
    assert out.shape == (5, 2 * D) and torch.equal(out[:, :D], content)
    assert torch.allclose(out[:, D:], gen(content, style))


@pytest.mark.parametrize("objective", ["simclr", "simsiam"])
def test_only_the_content_encoder_is_uploaded(objective: str) -> None:
    alg = _alg(objective)
    body = alg.model_factory.body
    n_body = body.stop - body.start
    state = alg.init_server(torch.Generator().manual_seed(0))
    payload = alg.payload_for(state, 0)
    assert set(payload) == {"body"} and payload["body"].numel() == n_body
    result = alg.client_update(payload, None, _data(), torch.Generator().manual_seed(1))
    assert set(result.upload) == {"delta"} and result.upload["delta"].numel() == n_body
    assert alg.upload_bytes() == alg.download_bytes() == n_body * 4
    assert set(result.state) == {"head", "generator", "style", "local_body"}
    n_head = alg.model_factory.head.stop - alg.model_factory.head.start
    assert result.state["head"].numel() == n_head
    assert result.state["style"].numel() == alg.style_factory.body.stop  # the style encoder f_s
    assert result.metrics["style_extracted"] == 1.0 and math.isfinite(result.metrics["train_loss"])
    # the second task reuses the style model unchanged (it is frozen after extraction)
    again = alg.client_update(payload, result.state, _data(), torch.Generator().manual_seed(2))
    assert torch.equal(again.state["style"], result.state["style"]) and "style_extracted" not in again.metrics
    assert not torch.equal(again.state["generator"], result.state["generator"])  # G trains locally
    # representation for personalization: [f_c, G(f_c, f_s)]
    feats = alg.representation(payload, again.state)(torch.randn(3, 1, 8, 8))
    assert feats.shape == (3, 2 * D)
    frozen, adapter = alg.personal_probe(payload, again.state)
    assert frozen(torch.randn(3, 1, 8, 8)).shape == (3, 2 * D) and adapter is not None


def test_server_averages_only_the_body() -> None:
    alg = _alg()
    state = alg.init_server(torch.Generator().manual_seed(0))
    body = alg.model_factory.body
    n = body.stop - body.start
    d1, d2 = torch.full((n,), 1.0), torch.full((n,), 4.0)
    arrivals = [Arrival(0, {"delta": d1}, 30, 0, 0), Arrival(1, {"delta": d2}, 10, 0, 0)]
    new, changed = alg.receive(state, arrivals, torch.Generator())
    w, w2 = state.tensors["weights"], new.tensors["weights"]
    assert changed and new.version == 1
    assert torch.allclose(w2[body] - w[body], torch.full((n,), 0.75 * 1.0 + 0.25 * 4.0))
    assert torch.equal(w2[body.stop:], w[body.stop:])


def test_client_update_is_deterministic() -> None:
    alg = _alg()
    state = alg.init_server(torch.Generator().manual_seed(0))
    p = alg.payload_for(state, 0)
    a = alg.client_update(p, None, _data(), torch.Generator().manual_seed(7))
    b = alg.client_update(p, None, _data(), torch.Generator().manual_seed(7))
    assert torch.equal(a.upload["delta"], b.upload["delta"]) and torch.equal(a.state["style"], b.state["style"])


def test_style_extraction_lowers_the_sobel_contrast_loss() -> None:
    """Eq. (2) on the model extraction actually trained (its encoder f_s and projector g_s),
    against the same model at the weights extraction started from."""
    alg = FedStyle(FedStyleParams(batch_size=16, style_epochs=4, lr=0.1), FACTORY)
    data = _data(32)
    start = alg.style_factory.initial_weights(torch.Generator().manual_seed(3))  # what extraction draws first

    def style_loss(flat: torch.Tensor) -> float:
        model = alg.style_factory.build()
        alg.style_factory.load_flat(model, flat)
        x = data.x_train
        with torch.no_grad():
            z = model.head.projector(model.body(torch.cat([x, sobel(x)])))
        return float(supcon(z, torch.cat([torch.zeros(32), torch.ones(32)]).long(), 0.5))

    trained = alg.extract_style(data, torch.Generator().manual_seed(3))
    assert trained.numel() == start.numel()
    assert style_loss(trained) < style_loss(start) - 0.05
    # the client keeps the encoder part of exactly this model
    result = alg.client_update(alg.payload_for(alg.init_server(torch.Generator().manual_seed(0)), 0), None, data,
                               torch.Generator().manual_seed(4))
    assert result.state["style"].numel() == alg.style_factory.body.stop


def test_objective_must_be_self_supervised() -> None:
    with pytest.raises(ValueError, match="objective"):
        FedStyleParams(objective="supervised")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the loss by hand
class _FixedViews:
    """A stand-in for the augmentation: alternately view a (an affine change of every
    image) and view b (every image mirrored); image by image, so batch order is free."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        self.calls += 1
        return 0.8 * x + 0.1 if self.calls % 2 else x.flip(-1)


def _nt_xent_by_hand(z_a: torch.Tensor, z_b: torch.Tensor, t: float) -> torch.Tensor:
    z = torch.cat([z_a, z_b])
    z = z / z.norm(dim=1, keepdim=True)
    n, b = z.shape[0], z_a.shape[0]
    terms = []
    for i in range(n):
        j = (i + b) % n
        denominator = sum(torch.exp(z[i] @ z[k] / t) for k in range(n) if k != i)
        terms.append(-torch.log(torch.exp(z[i] @ z[j] / t) / denominator))
    return torch.stack(terms).mean()


def _simsiam_by_hand(head, h: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    b = h.shape[0] // 2
    z = head.projector(h)
    p = head.predictor(z)

    def d(p_: torch.Tensor, z_: torch.Tensor) -> torch.Tensor:
        z_ = z_.detach()
        return -((p_ * z_).sum(1) / (p_.norm(dim=1) * z_.norm(dim=1))).mean()

    return 0.5 * d(p[:b], z[b:]) + 0.5 * d(p[b:], z[:b])


def _parts(alg: FedStyle, body: torch.Tensor, state: dict[str, torch.Tensor]):  # type: ignore[no-untyped-def]
    content = alg.model_factory.build()
    ModelFactory.load_flat(content, torch.cat([body, state["head"]]))
    gen = Generator(D, alg.params.generator_hidden)
    ModelFactory.load_flat(gen, state["generator"])
    style = alg.style_factory.build().body
    ModelFactory.load_flat(style, state["style"])
    return content, gen, style


def _loss_by_hand(alg: FedStyle, content, gen, style, x: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Eq. (3): L_u(views) + lambda * L_u(views infused with the styles of their own images)."""
    x_a, x_b = 0.8 * x + 0.1, x.flip(-1)
    c_a, c_b = content.body(x_a), content.body(x_b)
    with torch.no_grad():
        s_a, s_b = style(x_a), style(x_b)  # two different local styles, one per view
    i_a, i_b = gen(c_a, s_a), gen(c_b, s_b)
    p = alg.params
    if p.objective == "simclr":
        plain = _nt_xent_by_hand(*content.head.projector(torch.cat([c_a, c_b])).chunk(2), p.temperature)
        infused = _nt_xent_by_hand(*content.head.projector(torch.cat([i_a, i_b])).chunk(2), p.temperature)
    else:
        plain = _simsiam_by_hand(content.head, torch.cat([c_a, c_b]))
        infused = _simsiam_by_hand(content.head, torch.cat([i_a, i_b]))
    return plain + p.style_weight * infused


def _start_state(alg: FedStyle, seed: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"head": alg.model_factory.initial_weights(g)[alg.model_factory.head],
            "generator": ModelFactory.flatten(Generator(D, alg.params.generator_hidden)),
            "style": alg.style_factory.initial_weights(g)[alg.style_factory.body],
            "local_body": torch.zeros(alg.model_factory.body.stop)}


@pytest.mark.parametrize("objective", ["simclr", "simsiam"])
def test_fedstyle_loss_by_hand(objective: str) -> None:
    alg = FedStyle(FedStyleParams(objective=objective, batch_size=8, local_steps=1, style_weight=0.7,
                                  temperature=0.3), FACTORY)
    alg._augment = _FixedViews()  # type: ignore[assignment]
    body = alg.init_server(torch.Generator().manual_seed(0)).tensors["weights"][alg.model_factory.body]
    state = _start_state(alg)
    x = _data(8).x_train
    local = alg._load_personal({"body": body}, state)
    got = alg.fedstyle_loss(torch.Generator())(local, x, torch.zeros(8, dtype=torch.long))
    want = _loss_by_hand(alg, *_parts(alg, body, state), x)
    assert torch.allclose(got, want, atol=1e-5), (got.item(), want.item())


@pytest.mark.parametrize("objective", ["simclr", "simsiam"])
def test_three_local_steps_by_hand(objective: str) -> None:
    """Three full-batch SGD steps (momentum 0.5) on Eq. (3): f_c, g_c and G move, f_s does
    not; the upload is the change of f_c and the client keeps its local f_c."""
    lr, mom = 0.05, 0.5
    alg = FedStyle(FedStyleParams(objective=objective, batch_size=8, local_steps=3, lr=lr, momentum=mom,
                                  style_weight=0.5), FACTORY)
    alg._augment = _FixedViews()  # type: ignore[assignment]
    body = alg.init_server(torch.Generator().manual_seed(0)).tensors["weights"][alg.model_factory.body]
    state = _start_state(alg)
    data = _data(8)
    result = alg.client_update({"body": body}, state, data, torch.Generator().manual_seed(1))
    content, gen, style = _parts(alg, body, state)
    moving = list(content.parameters()) + list(gen.parameters())
    buffers = [torch.zeros_like(p) for p in moving]
    for _ in range(3):
        loss = _loss_by_hand(alg, content, gen, style, data.x_train)
        grads = torch.autograd.grad(loss, moving)
        with torch.no_grad():
            for p, g, buf in zip(moving, grads, buffers):
                buf.mul_(mom).add_(g)
                p.sub_(lr * buf)
    new_body = ModelFactory.flatten(content.body)
    assert torch.allclose(result.upload["delta"], new_body - body, atol=1e-5)
    assert torch.allclose(result.state["local_body"], new_body, atol=1e-5)
    assert torch.allclose(result.state["head"], ModelFactory.flatten(content.head), atol=1e-5)
    assert torch.allclose(result.state["generator"], ModelFactory.flatten(gen), atol=1e-5)
    assert torch.equal(result.state["style"], state["style"])


def test_the_two_views_get_different_styles() -> None:
    """The infused loss sees f_s(x_a) for view a and f_s(x_b) for view b: replacing both by
    f_s(x) (one style for both views) changes it."""
    alg = FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_weight=1.0), FACTORY)
    alg._augment = _FixedViews()  # type: ignore[assignment]
    body = alg.init_server(torch.Generator().manual_seed(0)).tensors["weights"][alg.model_factory.body]
    state = _start_state(alg)
    x = _data(8).x_train
    local = alg._load_personal({"body": body}, state)
    got = float(alg.fedstyle_loss(torch.Generator())(local, x, torch.zeros(8, dtype=torch.long)))
    content, gen, style = _parts(alg, body, state)
    with torch.no_grad():
        h = content.body(torch.cat([0.8 * x + 0.1, x.flip(-1)]))
        s = style(x)
        plain = float(_nt_xent_by_hand(*content.head.projector(h).chunk(2), alg.params.temperature))
        same = gen(h, torch.cat([s, s]))
        one_style = plain + float(_nt_xent_by_hand(*content.head.projector(same).chunk(2),
                                                   alg.params.temperature))
    assert abs(got - one_style) > 1e-3


# --------------------------------------------------------------------------- personalization features
def test_personal_probe_uses_the_clients_local_models() -> None:
    """Personalization fixes the client's *local* content model and style model (not the
    received global f_c): frozen features are [f_c,local(x), f_s(x)] and G is the adapter."""
    alg = _alg()
    state = alg.init_server(torch.Generator().manual_seed(0))
    payload = alg.payload_for(state, 0)
    result = alg.client_update(payload, None, _data(), torch.Generator().manual_seed(1))
    local_body = payload["body"] + result.upload["delta"]
    assert torch.allclose(result.state["local_body"], local_body)
    other = {"body": torch.randn_like(payload["body"])}  # a later global model: must not matter
    frozen, adapter = alg.personal_probe(other, result.state)
    x = torch.randn(5, 1, 8, 8)
    content, _, style = _parts(alg, local_body, result.state)
    with torch.no_grad():
        want = torch.cat([content.body(x), style(x)], dim=1)
        got = frozen(x)
    assert torch.allclose(got, want, atol=1e-6) and isinstance(adapter, StyleInfusion)


def test_generalized_feature_only_ablation() -> None:
    """``personal_features: content``: the probe sees f_c,local(x) alone, no generator."""
    alg = FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_epochs=1, personal_features="content"),
                   FACTORY)
    payload = alg.payload_for(alg.init_server(torch.Generator().manual_seed(0)), 0)
    result = alg.client_update(payload, None, _data(), torch.Generator().manual_seed(1))
    frozen, adapter = alg.personal_probe(payload, result.state)
    x = torch.randn(5, 1, 8, 8)
    content, _, _ = _parts(alg, result.state["local_body"], result.state)
    with torch.no_grad():
        assert adapter is None and torch.allclose(frozen(x), content.body(x), atol=1e-6)


def test_no_style_extraction_leaves_the_style_model_untrained() -> None:
    """E_s = 0 (the paper's ablation): the style model keeps its random initialization
    ("only biased noise infused with the content feature")."""
    alg = FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_epochs=0), FACTORY)
    data = _data()
    flat = alg.extract_style(data, torch.Generator().manual_seed(3))
    assert torch.equal(flat, alg.style_factory.initial_weights(torch.Generator().manual_seed(3)))
    trained = FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_epochs=1), FACTORY)
    assert not torch.equal(trained.extract_style(data, torch.Generator().manual_seed(3)), flat)


def test_probe_style_controls_swap_or_zero_the_style() -> None:
    """``probe_style`` (a control, not in the paper): ``swapped`` feeds the donor client's f_s,
    ``zero`` feeds zeros; the content part and the adapter (the client's own G) are unchanged."""
    data = _data()
    own_alg = _alg()
    payload = own_alg.payload_for(own_alg.init_server(torch.Generator().manual_seed(0)), 0)
    mine = own_alg.client_update(payload, None, data, torch.Generator().manual_seed(1)).state
    donor = own_alg.client_update(payload, None, data, torch.Generator().manual_seed(2)).state
    assert not torch.equal(mine["style"], donor["style"])
    x = torch.randn(5, 1, 8, 8)
    content, _, _ = _parts(own_alg, mine["local_body"], mine)
    _, _, donor_style = _parts(own_alg, donor["local_body"], donor)
    with torch.no_grad():
        c, s_donor = content.body(x).clone(), donor_style(x).clone()
    for probe_style, want_style in (("swapped", s_donor), ("zero", torch.zeros(5, D))):
        alg = FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_epochs=1, probe_style=probe_style), FACTORY)
        assert alg.probe_uses_donor == (probe_style == "swapped")
        frozen, adapter = alg.personal_probe(payload, mine, donor)
        with torch.no_grad():
            torch.testing.assert_close(frozen(x), torch.cat([c, want_style], dim=1))
        assert isinstance(adapter, StyleInfusion)
        torch.testing.assert_close(torch.cat([q.reshape(-1) for q in adapter.generator.parameters()]),
                                   mine["generator"])
    with pytest.raises(ValueError, match="probe_style swapped needs another client's state"):
        FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_epochs=1, probe_style="swapped"),
                 FACTORY).personal_probe(payload, mine)


def test_lambda_zero_makes_the_same_draws() -> None:
    """lambda = 0 (style infusion off) consumes the same random numbers as lambda > 0, so a
    paired run differs only by the infused term: the style model, G's initialization and the
    augmentations are identical, and the loss is the plain part alone."""
    data = _data()
    results = {}
    for lam in (0.0, 0.5):
        alg = FedStyle(FedStyleParams(batch_size=8, local_steps=1, style_epochs=1, style_weight=lam), FACTORY)
        payload = alg.payload_for(alg.init_server(torch.Generator().manual_seed(0)), 0)
        rng = torch.Generator().manual_seed(1)
        results[lam] = (alg.client_update(payload, None, data, rng), torch.randint(0, 2**30, (1,), generator=rng))
    (off, after_off), (on, after_on) = results[0.0], results[0.5]
    assert torch.equal(off.state["style"], on.state["style"]) and torch.equal(after_off, after_on)
    assert not torch.equal(off.upload["delta"], on.upload["delta"])
