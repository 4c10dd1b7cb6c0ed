"""The ``privacy:`` layer (:mod:`fedclock.algorithms.privacy`): clipping and noise on tiny
tensors by hand, the accountants against ``dp_accounting`` called directly, FedAvg-DP as
FedAvg + ``privacy:`` bit for bit, the accounting rule a scenario gets, and the one-line
errors."""
from __future__ import annotations

import math
import pickle

import dp_accounting
import pytest
import torch
from dp_accounting.pld import pld_privacy_accountant

from fedclock.algorithms.base import Arrival, ServerState
from fedclock.algorithms.dp import PLD_DISCRETIZATION, classical_multiplier
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_dp import FedAvgDP, FedAvgDPParams
from fedclock.algorithms.fedbuff import FedBuff, FedBuffParams
from fedclock.algorithms.dp import cumulative_epsilon
from fedclock.algorithms.privacy import CLIP, CLIPPED, RELEASES, Accounting, AdaptiveClip, PrivacyBudget, \
    PrivacyConfig, client_epsilons, sampled_epsilon, uploads_within, with_privacy
from fedclock.scenarios.loader import ScenarioError, parse_suite
from fedclock.scenarios.privacy_accounting import choose_accounting
from tests.algorithms.tiny import DATA, FACTORY, W, gen

PER_CLIENT = Accounting("per_client", "test")


def private(algorithm, mode: str, clip: float, z: float, delta: float = 1e-5):  # type: ignore[no-untyped-def]
    algorithm.num_clients = 3
    return with_privacy(algorithm, PrivacyConfig(mode=mode, clip=clip, noise_multiplier=z, delta=delta), PER_CLIENT)


def test_local_mode_clips_then_adds_noise_of_std_z_2c() -> None:
    """Replace-one local DP: the upload is Delta * C/||Delta|| + z * 2C * N(0, I), the noise
    drawn from the task's generator after training; the flag says the clip bound."""
    params = FedAvgParams(lr=0.5, batch_size=4, local_steps=2)
    g_plain, g_priv = gen(3), gen(3)
    delta = FedAvg(params, FACTORY).client_update({"weights": W}, None, DATA, g_plain).upload["delta"]
    result = private(FedAvg(params, FACTORY), "local", 0.01, 2.0).client_update({"weights": W}, None, DATA, g_priv)
    assert float(delta.norm()) > 0.01
    expected = delta * (0.01 / float(delta.norm())) + 2.0 * 2 * 0.01 * torch.randn(10, generator=g_plain)
    assert torch.allclose(result.upload["delta"], expected, atol=1e-7)
    assert result.upload[CLIPPED].tolist() == [1]
    # a clip larger than the update leaves it whole (flag 0); central mode adds no client noise
    unclipped = private(FedAvg(params, FACTORY), "central", 100.0, 2.0).client_update(
        {"weights": W}, None, DATA, gen(3)).upload
    assert torch.equal(unclipped["delta"], delta) and unclipped[CLIPPED].tolist() == [0]


def test_noise_std_per_mode() -> None:
    assert PrivacyConfig(mode="local", clip=0.5, noise_multiplier=3.0).noise_std == 3.0
    assert PrivacyConfig(mode="central", clip=0.5, noise_multiplier=3.0).noise_std == 1.5
    assert PrivacyConfig(mode="local", clip=0.5, noise_multiplier=3.0).sensitivity == 1.0


def test_central_fedavg_averages_equally_and_noises_the_sum_with_std_z_c() -> None:
    """Two clipped updates (num_samples 1 and 9 are ignored: equal weights); the server adds
    z C / sqrt(2) N(0, I) to each, so their sum gets z C N(0, I): w + (d0 + d1 + noise) / 2."""
    algo = private(FedAvg(FedAvgParams(), FACTORY), "central", 0.5, 4.0)
    d0, d1 = torch.full((10,), 0.1), torch.linspace(-0.1, 0.1, 10)
    arrivals = [Arrival(0, {"delta": d0, CLIPPED: torch.tensor([1], dtype=torch.uint8)}, 1, 0, 0),
                Arrival(2, {"delta": d1, CLIPPED: torch.tensor([0], dtype=torch.uint8)}, 9, 0, 0)]
    state, changed = algo.receive(ServerState(tensors={"weights": W.clone()}), arrivals, gen(5))
    g = gen(5)
    share = 4.0 * 0.5 / math.sqrt(2)
    xi0, xi1 = torch.randn(10, generator=g), torch.randn(10, generator=g)
    expected = W + 0.5 * (d0 + share * xi0) + 0.5 * (d1 + share * xi1)
    assert changed and state.version == 1
    assert torch.allclose(state.tensors["weights"], expected, atol=1e-7)
    assert state.tensors[RELEASES].tolist() == [1, 0, 1]
    metrics = algo.server_metrics(state)
    assert metrics["dp_clipped_fraction"] == 0.5 and metrics["dp_noise_std"] == 2.0
    assert metrics["dp_uploads_max"] == 1
    assert pickle.loads(pickle.dumps(algo)).privacy == algo.privacy  # the layer survives the trip to an actor


def test_central_fedbuff_splits_the_sum_noise_over_its_buffer() -> None:
    """K = 2: each arrival gets z C / sqrt(2) N(0, I) as it is buffered; the flush applies
    (d0 + d1 + noise) / 2 and counts one global step."""
    algo = private(FedBuff(FedBuffParams(buffer_size=2), FACTORY), "central", 1.0, 1.0)
    state = algo.init_server(gen(0))
    w0 = state.tensors["weights"].clone()
    d0, d1 = torch.full((w0.numel(),), 0.2), torch.full((w0.numel(),), -0.1)
    g = gen(8)
    state, changed = algo.receive(state, [Arrival(1, {"delta": d0}, 5, 0, 0)], g)
    assert not changed and algo.server_metrics(state)["dp_uploads_max"] == 1
    state, changed = algo.receive(state, [Arrival(2, {"delta": d1}, 5, 0, 0)], g)
    ref = gen(8)
    share = 1.0 / math.sqrt(2)
    expected = w0 + 0.5 * ((d0 + share * torch.randn(w0.numel(), generator=ref)) +
                           (d1 + share * torch.randn(w0.numel(), generator=ref)))
    assert changed and torch.allclose(state.tensors["weights"], expected, atol=1e-6)
    assert state.extra["privacy.steps"] == 1


def test_per_client_epsilon_is_the_pld_composition_of_its_own_releases() -> None:
    z, delta = 1.3, 1e-5
    cfg = PrivacyConfig(mode="central", clip=1.0, noise_multiplier=z, delta=delta)

    def direct(k: int) -> float:
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
        acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), k))
        return float(acc.get_epsilon(delta))

    eps = client_epsilons(cfg, PER_CLIENT, [0, 1, 7], steps=7)
    assert eps == [0.0, direct(1), direct(7)]
    assert 0 < eps[1] < eps[2]


def test_sampled_epsilon_is_rdp_of_sampling_without_replacement_at_half_the_multiplier() -> None:
    """Replace-one doubles the sum's sensitivity: the accountant gets z / 2."""
    z, n, k, steps, delta = 2.0, 100, 10, 50, 1e-5
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(n, k, dp_accounting.GaussianDpEvent(1.0)), steps))
    assert sampled_epsilon(z, n, k, steps, delta) == float(acc.get_epsilon(delta))
    cfg = PrivacyConfig(mode="central", clip=1.0, noise_multiplier=z, delta=delta)
    amplified = client_epsilons(cfg, Accounting("sampled_fixed_size", "t", n, k), [5, 0, 9], steps)
    assert amplified == [sampled_epsilon(z, n, k, steps, delta)] * 3  # every client, picked or not
    # sampling 10 % amplifies: well under the composition of 50 unsampled releases at z / 2
    assert amplified[0] < client_epsilons(cfg.model_copy(update={"noise_multiplier": z / 2}), PER_CLIENT,
                                          [steps], steps)[0] / 3
    with pytest.raises(ValueError, match="0 < cohort < population"):
        Accounting("sampled_fixed_size", "t", 10, 10)


def test_fedavg_dp_is_fedavg_with_local_privacy_bit_for_bit() -> None:
    """The same uploads (same generator draws) and the same server states over three rounds."""
    params = dict(lr=0.3, batch_size=2, local_steps=3)
    dp = FedAvgDP(FedAvgDPParams(**params, epsilon=0.7, delta=0.05, dp_clip=0.02), FACTORY)
    layered = private(FedAvg(FedAvgParams(**params), FACTORY), "local", 0.02, classical_multiplier(0.7, 0.05),
                      delta=0.05)
    s_dp = s_layer = ServerState(tensors={"weights": W.clone()})
    for round_index in range(3):
        arrivals_dp, arrivals_layer = [], []
        for client in (0, 2):
            payload_dp, payload_layer = dp.payload_for(s_dp, client), layered.payload_for(s_layer, client)
            up_dp = dp.client_update(payload_dp, None, DATA, gen(10 * round_index + client))
            up_layer = layered.client_update(payload_layer, None, DATA, gen(10 * round_index + client))
            assert torch.equal(up_dp.upload["delta"], up_layer.upload["delta"])
            arrivals_dp.append(Arrival(client, up_dp.upload, up_dp.num_samples, round_index, 0))
            arrivals_layer.append(Arrival(client, up_layer.upload, up_layer.num_samples, round_index, 0))
        s_dp, _ = dp.receive(s_dp, arrivals_dp, gen(99))
        s_layer, _ = layered.receive(s_layer, arrivals_layer, gen(99))
        assert torch.equal(s_dp.tensors["weights"], s_layer.tensors["weights"])
    # the same accountant on the same uploads: the same epsilon at FedAvg-DP's delta
    assert dp.server_metrics(s_dp)["dp_epsilon"] == layered.server_metrics(s_layer)["dp_epsilon"] > 0


BASE = {"name": "t", "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1},
        "population": {"num_clients": 10}}
CENTRAL = {"mode": "central", "clip": 1.0, "noise_multiplier": 1.0}


def _parse(**changes):  # type: ignore[no-untyped-def]
    return parse_suite({**BASE, **changes}, "f").runs[0]


def test_accounting_rule_follows_how_clients_are_chosen() -> None:
    rule = choose_accounting(_parse(privacy=CENTRAL, mode={"type": "sync", "cohort_size": 3}))
    assert (rule.rule, rule.population, rule.cohort) == ("sampled_fixed_size", 10, 3)
    assert choose_accounting(_parse(privacy=CENTRAL, mode={"type": "sync", "cohort_size": 3},
                                    selection={"name": "oort"})).reason == "selection 'oort' is not a uniform sample"
    assert choose_accounting(_parse(privacy={**CENTRAL, "mode": "local"},
                                    mode={"type": "sync", "cohort_size": 3})).rule == "per_client"
    assert choose_accounting(_parse(privacy=CENTRAL, algorithm={"name": "fedbuff"}, mode={"type": "async"},
                                    stop={"versions": 2})).reason.startswith("async mode")
    assert choose_accounting(_parse(privacy=CENTRAL)).reason == "every client joins every round: no sampling"
    assert choose_accounting(_parse(privacy=CENTRAL, mode={"type": "sync", "cohort_size": 3, "deadline_s": 5})
                             ).reason.startswith("a round deadline")


@pytest.mark.parametrize("changes,message", [
    ({"privacy": {**CENTRAL, "noise_multiplier": 0}},
     r"^f: privacy\.noise_multiplier: Input should be greater than or equal to 0\.1 \(got 0\)$"),
    ({"privacy": {**CENTRAL, "delta": 1}}, r"^f: privacy\.delta: Input should be less than 1 \(got 1\)$"),
    ({"privacy": {**CENTRAL, "clip": -1}}, r"^f: privacy\.clip: Input should be greater than 0 \(got -1\)$"),
    ({"privacy": CENTRAL, "algorithm": {"name": "fednova"}},
     r"^f: privacy\.mode: central DP noises the sum of a step's updates, but algorithm 'fednova': its server "
     r"step is not an equal-weight mean of the deltas \(allowed: local, or an algorithm that declares"),
    ({"privacy": CENTRAL, "algorithm": {"name": "fedbuff", "staleness_weighting": True}, "mode": {"type": "async"},
      "stop": {"versions": 2}}, r"^f: privacy\.mode: .*'fedbuff': staleness_weighting weights"),
    ({"privacy": {**CENTRAL, "mode": "local"}, "algorithm": {"name": "ditto"}},
     r"^f: privacy: algorithm 'ditto' does not upload a model delta the server aggregates"),
    ({"privacy": CENTRAL, "upload": {"compression": {"type": "fp16"}}},
     r"^f: privacy: does not combine with upload\.compression"),
])
def test_bad_privacy_settings_are_one_line_errors(changes: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as info:
        _parse(**changes)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("z,epsilon", [(1.1, 6.0), (3.0, 2.0), (0.5, 1.0)])
def test_uploads_within_is_the_last_count_inside_the_budget(z: float, epsilon: float) -> None:
    cfg = PrivacyConfig(mode="central", clip=1.0, noise_multiplier=z, budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    k = uploads_within(z, epsilon, 1e-5)
    assert cfg.delta == 1e-5
    if k == 0:
        assert cumulative_epsilon(z, 1, 1e-5) > epsilon
    else:
        assert cumulative_epsilon(z, k, 1e-5) <= epsilon < cumulative_epsilon(z, k + 1, 1e-5)
    assert k == 0 if (z, epsilon) == (0.5, 1.0) else k >= 1


BUDGET = {**CENTRAL, "budget": {"epsilon": 5.0, "delta": 1e-5}}


@pytest.mark.parametrize("changes,message", [
    ({"privacy": {**BUDGET, "budget": {"epsilon": 0, "delta": 1e-5}}},
     r"^f: privacy\.budget\.epsilon: Input should be greater than 0 \(got 0\)$"),
    ({"privacy": {**BUDGET, "budget": {"epsilon": -1, "delta": 1e-5}}},
     r"^f: privacy\.budget\.epsilon: Input should be greater than 0 \(got -1\)$"),
    ({"privacy": {**BUDGET, "budget": {"epsilon": 5, "delta": 1}}},
     r"^f: privacy\.budget\.delta: Input should be less than 1 \(got 1\)$"),
    ({"privacy": {**BUDGET, "delta": 1e-3}}, r"^f: privacy\.delta: with a budget, epsilon is reported at budget"),
    ({"privacy": {**BUDGET, "budget": {"epsilon": 0.1, "delta": 1e-5}}},
     r"^f: privacy\.budget\.epsilon: one upload at noise_multiplier 1 already spends epsilon 4\.\d+ \(got a budget "
     r"of 0\.1\); raise the budget or the noise$"),
    ({"privacy": {**BUDGET, "budget": {**BUDGET["budget"], "clients": [{"ids": [1, 2], "epsilon": 9},
                                                                      {"ids": [2], "epsilon": 3}]}}},
     r"^f: privacy\.budget\.clients\[1\]\.ids: client 2 already has a budget in clients\[0\]$"),
    ({"privacy": {**BUDGET, "budget": {**BUDGET["budget"], "clients": [{"ids": [10], "epsilon": 9}]}}},
     r"^f: privacy\.budget\.clients\[0\]\.ids: client 10 does not exist \(allowed: 0\.\.9\)$"),
    ({"privacy": {**BUDGET, "budget": {**BUDGET["budget"], "clients": [{"ids": [4], "epsilon": 0.2}]}}},
     r"^f: privacy\.budget\.clients\[0\]\.epsilon: one upload at noise_multiplier 1 already spends"),
    ({"privacy": {**CENTRAL, "mode": "local"}, "mode": {"type": "sync", "deadline_s": 5}},
     r"^f: privacy\.mode: local DP counts the uploads the server receives, and with mode\.deadline_s and "
     r"late_results: drop it discards late ones the clients sent \(allowed: central, or late_results: include\)$"),
    ({"privacy": {**CENTRAL, "mode": "local"}, "mode": {"type": "async", "task_timeout_s": 5},
      "algorithm": {"name": "fedbuff"}, "stop": {"versions": 3}},
     r"^f: privacy\.mode: local DP counts the uploads the server receives, and with mode\.task_timeout_s"),
    ({"privacy": BUDGET, "mode": {"type": "sync", "cohort_size": 3}},
     r"^f: privacy\.budget: with uniform cohorts of 3 of 10 clients without replacement every client's epsilon is "
     r"the run's"),
])
def test_bad_budgets_are_one_line_errors(changes: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as info:
        _parse(**changes)
    assert "\n" not in str(info.value)


def test_adaptive_clipping_moves_the_clip_toward_the_quantile_by_hand() -> None:
    """C0 = 0.5, z = 1, sigma_b = 2, gamma = 0.5, eta = 0.2; one of two clients clipped. The
    updates' sum gets z_Delta C0 = 0.5 * 4 / sqrt(15) (split over the two arrivals), then the
    bits count 1 + 2 / sqrt(2) (xi_0 + xi_1), and C1 = C0 exp(-0.2 (count / 2 - 0.5))."""
    adaptive = AdaptiveClip(target_quantile=0.5, learning_rate=0.2, bit_noise=2.0)
    cfg = PrivacyConfig(mode="central", clip=0.5, noise_multiplier=1.0, adaptive=adaptive)
    assert cfg.delta_multiplier == pytest.approx(4 / math.sqrt(15), rel=1e-12)
    algo = FedAvg(FedAvgParams(), FACTORY)
    algo.num_clients = 2
    algo = with_privacy(algo, cfg, PER_CLIENT)
    state = algo.init_server(gen(0))
    w0 = state.tensors["weights"].clone()
    assert algo.payload_for(state, 0)[CLIP].tolist() == [0.5] and algo.server_metrics(state)["dp_clip"] == 0.5
    d0, d1 = torch.full((10,), 0.1), torch.full((10,), -0.05)  # norms 0.316 and 0.158, within C0
    arrivals = [Arrival(0, {"delta": d0, CLIPPED: torch.tensor([1], dtype=torch.uint8)}, 3, 0, 0),
                Arrival(1, {"delta": d1, CLIPPED: torch.tensor([0], dtype=torch.uint8)}, 7, 0, 0)]
    state, _ = algo.receive(state, arrivals, gen(4))
    g = gen(4)
    share = 0.5 * (4 / math.sqrt(15)) / math.sqrt(2)
    xi = [torch.randn(10, generator=g) for _ in range(2)]
    bits = [float(torch.randn(1, generator=g, dtype=torch.float64)) for _ in range(2)]
    count = 0 + bits[0] * 2 / math.sqrt(2) + 1 + bits[1] * 2 / math.sqrt(2)
    c1 = float(torch.tensor(0.5 * math.exp(-0.2 * (count / 2 - 0.5)), dtype=torch.float32))
    assert torch.allclose(state.tensors["weights"], w0 + 0.5 * (d0 + share * xi[0]) + 0.5 * (d1 + share * xi[1]),
                          atol=1e-7)
    assert state.extra[CLIP] == c1 != 0.5
    metrics = algo.server_metrics(state)
    assert metrics["dp_clip"] == c1 and metrics["dp_noise_std"] == pytest.approx(c1 * 4 / math.sqrt(15))
    # the next client clips to the new clip it receives
    upload = algo.client_update(algo.payload_for(state, 0), None, DATA, gen(1)).upload["delta"]
    assert float(upload.norm()) <= c1 * (1 + 1e-6)


@pytest.mark.parametrize("changes,message", [
    ({"privacy": {**CENTRAL, "mode": "local", "adaptive": {"bit_noise": 2}}},
     r"^f: privacy\.adaptive: quantile clipping needs mode: central \(a client's clip would depend"),
    ({"privacy": {**CENTRAL, "adaptive": {"bit_noise": 0.5}}},
     r"^f: privacy\.adaptive\.bit_noise: must exceed noise_multiplier / 2 = 0\.5 \(the bits. share"),
    ({"privacy": {**CENTRAL, "adaptive": {"bit_noise": 2, "target_quantile": 1}}},
     r"^f: privacy\.adaptive\.target_quantile: Input should be less than 1 \(got 1\)$"),
])
def test_bad_adaptive_clipping_settings_are_one_line_errors(changes: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as info:
        _parse(**changes)
    assert "\n" not in str(info.value)
