"""Paired-seed learning tests of orderings that hold in docs/reproductions/fedreco.md, each
against its own ablation (the component off), in a small label-skewed digits setting (pure
algorithm API, no runtime).

Setting: 10 clients, client c holding classes c and c + 1 (mod 10), each class split evenly
between its two holders, 70/30 train/test per client (about 126 training digits a client);
MLP 64-32-10 (body: the hidden layer), lr 0.05, batch 16, gradients clipped to 10, every
client in every round, the paper's local work (2 epochs; FedReCo and FedPAC 1 head + 1 body
epoch). Seeds 0-2 share the split and the initial model of each algorithm pair.

* ``t1-fedreco-vs-fedavg`` / ``-fedpac`` / ``-fedrep`` / ``-fedbabu`` (fedreco.md) and
  ``fm2-fedreco-vs-fedavg_ft`` / ``-fedrep`` / ``-fedavg`` / ``-fedbabu`` / ``-fedpac``
  (fedreco_fmnist.md, 2 classes per client, this module's split; the consensus rows against
  lambda = 0, ``fm-`` / ``fm-full-`` / ``fm2-fedreco-vs-fedreco_lam0``, are
  tests/algorithms/test_fedreco_personal_accuracy.py's): FedReCo's personal
  models above FedAvg's global model, FedPAC's and FedRep's personal models and FedAvg-FT's and
  FedBABU's fine-tuned models after RECO_ROUNDS rounds. Ablation: the same
  trained FedReCo scored without its personal models (u_0 with the shared initial head, its
  global model), which must fall below both: the ordering comes from the personal models.
* ``t1-fedreco-vs-fedcr`` (fedreco.md) and ``fm2-fedreco-vs-fedcr`` (fedreco_fmnist.md):
  FedReCo's personal models above FedCR's after RECO_ROUNDS rounds; ablation as above
  (without its personal models FedReCo falls below FedCR).
* ``t2-fedreco-vs-fedcr`` / ``-fedpac`` / ``-fedbabu`` (fedreco.md, Table 2): FedReCo's personal
  models reach 85 % in fewer counted FLOPs than the baseline's; ablation as above (without its
  personal models FedReCo never reaches 85 %).
* ``t2-ditto-vs-fedreco`` (fedreco.md, Table 2): Ditto's personal models reach 85 % in fewer
  counted FLOPs than FedReCo's, on the report's partition (4 sliding classes per client) and
  batch (48); checked by hand to fail with Ditto's personal models off (test docstring).
* ``fm-t3-dp0.05-vs-fedreco`` (fedreco_fmnist.md): FedReCo-DP at (0.05, 0.05) equals FedReCo;
  ablation as above.
* ``t3-fedreco_dp-vs-fedavg_ft_dp``, ``t3-fedreco_dp-vs-fedavg_dp``,
  ``fm-t3-fedreco_dp-vs-fedavg_dp`` and the equality ``t3-dp0.2-vs-fedreco`` (fedreco.md):
  FedReCo-DP at (0.2, 0.1) keeps FedReCo's accuracy (the noise reaches only u_0) where
  FedAvg-FT-DP loses almost all of it; ablation: FedReCo-DP scored without its personal models.
* ``t3-fedavg_ft_dp-vs-fedavg_dp`` (fine-tuning recovers part of what FedAvg-DP loses): one
  trained FedAvg-DP state at (0.2, 0.1), scored with and without FT_EPOCHS of local
  fine-tuning (paired: the same state); off (0 epochs) the two scores are one, gain 0.

Measured numbers are in each test's docstring.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ServerState, Tensors
from fedclock.algorithms.ditto import Ditto, DittoParams
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_dp import FedAvgDP, FedAvgDPParams
from fedclock.algorithms.fedavg_ft import FedAvgFT, FedAvgFTParams
from fedclock.algorithms.fedbabu import FedBABU, FedBABUParams
from fedclock.algorithms.fedcr import FedCR, FedCRParams, GaussianEncoderFactory
from fedclock.algorithms.fedpac import FedPAC, FedPACParams
from fedclock.algorithms.fedreco import FedReCo, FedReCoDP, FedReCoDPParams, FedReCoParams
from fedclock.algorithms.fedrep import FedRep, FedRepParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scenarios.claim_stats import HOLDS, IDENTICAL, assess
from tests.algorithms.every_client import rounds_with_every_client

pytestmark = pytest.mark.usefixtures("one_thread")

FACTORY = ModelFactory("mlp", (64,), 10, hidden=(32,))
CLIENTS, ROUNDS, SEEDS = 10, 6, (0, 1, 2)
RECO_ROUNDS = 4
SGD = dict(lr=0.05, batch_size=16, max_grad_norm=10.0)


def skewed_clients(seed: int) -> list[ClientData]:
    """Client c holds classes c and c + 1 (mod 10), half of each class's digits (shuffled by
    ``seed``), 70 % of them for training; pixels / 16."""
    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    halves: dict[int, list[np.ndarray]] = {}
    for k in range(10):
        idx = rng.permutation(np.flatnonzero(y == k))
        halves[k] = [idx[: len(idx) // 2], idx[len(idx) // 2:]]
    out = []
    for c in range(CLIENTS):
        # class c's second half and class c + 1's first half
        idx = rng.permutation(np.concatenate([halves[c][1], halves[(c + 1) % 10][0]]))
        cut = int(0.7 * len(idx))
        xs = torch.tensor(x[idx] / 16.0, dtype=torch.float32)
        ys = torch.tensor(y[idx], dtype=torch.int64)
        out.append(ClientData(c, xs[:cut], ys[:cut], xs[cut:], ys[cut:]))
    return out


def accuracy(alg: Algorithm, state: ServerState, kept: list[Tensors | None], clients: list[ClientData]) -> float:
    """Accuracy (%) over every client's test split of the model ``alg`` scores for it."""
    correct = sum(alg.evaluate_client(alg.payload_for(state, c), kept[c], data, 256).correct
                  for c, data in enumerate(clients))
    return 100.0 * correct / sum(len(d.y_test) for d in clients)


def trained(alg: Algorithm, clients: list[ClientData], seed: int, rounds: int = ROUNDS
            ) -> tuple[ServerState, list[Tensors | None]]:
    return rounds_with_every_client(alg, clients, rounds, seed)


MARGIN = 3.0  # points per seed


def test_fedreco_personal_models_beat_fedavg_fedpac_fedavg_ft_fedrep_fedbabu_and_not_without_them() -> None:
    """Measured (% after 4 rounds, seeds 0 / 1 / 2): FedReCo personal 96.2 / 94.5 / 98.0; FedAvg
    global 50.0 / 51.3 / 54.6; FedPAC personal 75.6 / 79.7 / 88.3; FedAvg-FT (1 epoch of
    fine-tuning) 85.7 / 85.2 / 78.9; FedRep 75.8 / 82.2 / 87.9 and FedBABU (1 epoch of
    fine-tuning) 77.1 / 69.4 / 78.6 (``t1-fedreco-vs-fedrep`` / ``-fedbabu``, fedreco.md at 6
    seeds); FedReCo without its personal
    models (u_0 with the initial head) 12.8 / 13.0 / 11.0 (after 6 rounds: 97.4 / 97.3 / 97.6
    against FedPAC's 92.5 / 87.9 / 93.0). The test asks for MARGIN points per seed over the
    best baseline (the smallest measured gap is 8.8), and for the ablation to fall below it."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    fedavg = FedAvg(FedAvgParams(**SGD, local_epochs=2), FACTORY)  # type: ignore[arg-type]
    fedpac = FedPAC(FedPACParams(**SGD, lam=1.0), FACTORY)  # type: ignore[arg-type]
    fedavg_ft = FedAvgFT(FedAvgFTParams(**SGD, local_epochs=2, finetune_epochs=1), FACTORY)  # type: ignore[arg-type]
    fedrep = FedRep(FedRepParams(**SGD, head_epochs=1), FACTORY)  # type: ignore[arg-type]
    fedbabu = _fedbabu()
    for seed in SEEDS:
        clients = skewed_clients(seed)
        state, kept = trained(reco_alg, clients, seed, RECO_ROUNDS)
        reco = accuracy(reco_alg, state, kept, clients)
        without = accuracy(reco_alg, state, [None] * CLIENTS, clients)  # the ablation: no personal models
        s, k = trained(fedavg, clients, seed, RECO_ROUNDS)
        avg = accuracy(fedavg, s, [None] * CLIENTS, clients)
        s, k = trained(fedpac, clients, seed, RECO_ROUNDS)
        pac = accuracy(fedpac, s, k, clients)
        s, k = trained(fedavg_ft, clients, seed, RECO_ROUNDS)
        ft = accuracy(fedavg_ft, s, k, clients)
        s, k = trained(fedrep, clients, seed, RECO_ROUNDS)
        rep = accuracy(fedrep, s, k, clients)
        s, k = trained(fedbabu, clients, seed, RECO_ROUNDS)
        babu = accuracy(fedbabu, s, k, clients)
        best = max(avg, pac, ft, rep, babu)
        assert reco - best > MARGIN, (seed, reco, avg, pac, ft, rep, babu)
        assert without < best, (seed, without, best)


FT_EPOCHS, FT_MARGIN = 1.0, 0.0


def test_fine_tuning_recovers_part_of_what_fedavg_dp_loses() -> None:
    """Measured (% after 6 rounds at (0.2, 0.1), dp_clip 1, seeds 0 / 1 / 2): the global model
    6.8 / 11.4 / 13.4, after one epoch of fine-tuning 7.7 / 11.7 / 20.3 (gains +0.9 / +0.3 /
    +6.9: as in the report, a small gain near chance, where the noise has wiped the model
    out). The test asks that the fine-tuning of the same trained state raise every seed's
    accuracy (paired: one state, two scorings); off (FT_EPOCHS 0) the gain is 0 and it fails."""
    plain = FedAvgDP(FedAvgDPParams(**SGD, local_epochs=2, epsilon=0.2, delta=0.1, dp_clip=1.0),  # type: ignore[arg-type]
                     FACTORY)
    tuned = FedAvgDP(plain.params.model_copy(update={"finetune_epochs": FT_EPOCHS}), FACTORY)
    gains = []
    for seed in SEEDS:
        clients = skewed_clients(seed)
        state, kept = trained(plain, clients, seed)
        gains.append(accuracy(tuned, state, kept, clients) - accuracy(plain, state, kept, clients))
    assert min(gains) > FT_MARGIN, gains


CR_MARGIN = 0.9  # points, mean over the test seeds


def test_fedreco_beats_fedcr_and_not_without_its_personal_models() -> None:
    """Measured (% after 4 rounds, FedReCo / FedCR per seed): 96.15 / 92.31, 94.51 / 93.04,
    97.99 / 96.89 (seeds 0-2: mean gap 2.14); on seeds 3-8 (not tested) gaps 1.10 0.73 3.66 |
    3.48 2.38 2.39, block means 1.83 and 2.75: CR_MARGIN is half the worse block. FedCR with
    its Gaussian layer of width 256 (the authors' z_dim) and beta 0.001 (table1_quick)."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    fedcr = FedCR(FedCRParams(**SGD, local_epochs=2, beta=0.001),  # type: ignore[arg-type]
                  GaussianEncoderFactory.wrapping(FACTORY, 256))
    gaps = []
    for seed in SEEDS:
        clients = skewed_clients(seed)
        state, kept = trained(reco_alg, clients, seed, RECO_ROUNDS)
        s, k = trained(fedcr, clients, seed, RECO_ROUNDS)
        cr = accuracy(fedcr, s, k, clients)
        gaps.append(accuracy(reco_alg, state, kept, clients) - cr)
        assert accuracy(reco_alg, state, [None] * CLIENTS, clients) < cr, seed  # the ablation
    assert sum(gaps) / len(gaps) >= CR_MARGIN, gaps


DP_EQUAL, DP_LEAD = 1.0, 50.0  # points per seed


def test_fedreco_dp_keeps_fedreco_accuracy_where_fedavg_ft_dp_loses_it() -> None:
    """Measured (% after 6 rounds at (0.2, 0.1), dp_clip 1, seeds 0-8): FedReCo-DP equals
    FedReCo on 8 seeds and is 0.18 above it on one (98.90 / 98.72); FedAvg-FT-DP reaches 5.5 to
    20.9 (the lead is 77 points or more) and the same FedAvg-DP state unfine-tuned 6.8 to 13.4
    on seeds 0-2. The test asks, per seed, FedReCo-DP within DP_EQUAL of FedReCo, DP_LEAD points
    over FedAvg-FT-DP and over FedAvg-DP (rows t3-fedreco_dp-vs-fedavg_dp of fedreco.md and
    fm-t3-fedreco_dp-vs-fedavg_dp of fedreco_fmnist.md), and the same FedReCo-DP scored without its
    personal models (u_0, which the noise reaches, with the initial head) DP_LEAD below its
    personal models: the personal models keep the accuracy."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    reco_dp = FedReCoDP(FedReCoDPParams(**SGD, lam=0.01, server_lr=0.005, epsilon=0.2, delta=0.1,  # type: ignore[arg-type]
                                        dp_clip=1.0), FACTORY)
    ft_dp = FedAvgDP(FedAvgDPParams(**SGD, local_epochs=2, epsilon=0.2, delta=0.1, dp_clip=1.0,  # type: ignore[arg-type]
                                    finetune_epochs=1), FACTORY)
    plain_dp = FedAvgDP(ft_dp.params.model_copy(update={"finetune_epochs": 0}), FACTORY)
    for seed in SEEDS:
        clients = skewed_clients(seed)
        state, kept = trained(reco_dp, clients, seed)
        dp = accuracy(reco_dp, state, kept, clients)
        s, k = trained(reco_alg, clients, seed)
        assert abs(dp - accuracy(reco_alg, s, k, clients)) <= DP_EQUAL, seed
        s, k = trained(ft_dp, clients, seed)
        assert dp - accuracy(ft_dp, s, k, clients) > DP_LEAD, seed
        assert dp - accuracy(plain_dp, s, k, clients) > DP_LEAD, seed  # the same state, not fine-tuned
        assert dp - accuracy(reco_dp, state, [None] * CLIENTS, clients) > DP_LEAD, seed


def flops_to_target(alg: Algorithm, clients: list[ClientData], seed: int, target: float, rounds: int,
                    ablation: bool = False) -> tuple[float, float]:
    """The counted FLOPs (:class:`~fedclock.algorithms.task_cost.TaskCost`) a synchronous run
    spends before the first round after which the mean accuracy (%) reaches ``target``, scored
    with the personal models and, with ``ablation``, in the same run without them (the global
    model only; else +inf); each round costs its largest client's task, as the clock charges a round when
    compute alone counts (the report's t2 rows: infinite bandwidth, no latency); +inf if no
    round of ``rounds`` reaches it. The rounds and their generators are :func:`trained`'s."""
    round_flops = float(TaskCost(alg).flops(max(d.num_train for d in clients)))  # counts grow with the size
    state = alg.init_server(torch.Generator().manual_seed(seed))
    kept: list[Tensors | None] = [None] * len(clients)
    reached = [math.inf, math.inf]
    for t in range(rounds):
        arrivals = []
        for c, data in enumerate(clients):
            result = alg.client_update(alg.payload_for(state, c), kept[c], data,
                                       torch.Generator().manual_seed(seed * 100_003 + t * 101 + c))
            kept[c] = result.state
            arrivals.append(Arrival(c, result.upload, result.num_samples, state.version, 0))
        state, _ = alg.server_receive(state, arrivals, torch.Generator().manual_seed(t))
        for k, scored in enumerate((kept, [None] * len(clients)) if ablation else (kept,)):
            if math.isinf(reached[k]) and accuracy(alg, state, scored, clients) >= target:
                reached[k] = (t + 1) * round_flops
        if math.isfinite(reached[0]) and (math.isfinite(reached[1]) or not ablation):
            break
    return reached[0], reached[1]


TARGET, TARGET_ROUNDS = 85.0, 5


def _fedcr() -> Algorithm:
    return FedCR(FedCRParams(**SGD, local_epochs=2, beta=0.001),  # type: ignore[arg-type]
                 GaussianEncoderFactory.wrapping(FACTORY, 256))


def _fedpac() -> Algorithm:
    return FedPAC(FedPACParams(**SGD, lam=1.0), FACTORY)  # type: ignore[arg-type]


def _fedbabu() -> Algorithm:
    return FedBABU(FedBABUParams(**SGD, local_epochs=2, finetune_epochs=1), FACTORY)  # type: ignore[arg-type]


SLOWER = {"t2-fedreco-vs-fedcr": _fedcr, "t2-fedreco-vs-fedpac": _fedpac, "t2-fedreco-vs-fedbabu": _fedbabu}


@pytest.mark.parametrize("row", list(SLOWER))
def test_fedreco_reaches_85_percent_in_fewer_flops_and_not_without_its_personal_models(row: str) -> None:
    """The Table 2 rows of fedreco.md (FedReCo reaches 85 % in less computation time than FedCR,
    FedPAC and FedBABU): FedReCo's personal models reach TARGET % in fewer counted FLOPs than
    the baseline's. Measured (seeds 0-2, the first round at or above 85 %): FedReCo rounds 3 / 3
    / 3 (88.6, 91.4, 95.6 %) of 2.62e6 FLOPs each (7.9e6); FedCR rounds 3 / 3 / 3 (89.4, 93.2,
    91.6 %) of 9.2e7 FLOPs each (its Gaussian layer of width 256 and its statistics over the
    whole train split: 35 times FedReCo's round), 2.8e8; FedPAC rounds 5 / 5 / 4 (86.8, 87.9,
    88.3 %) of 3.1e6 (1.2e7 to 1.6e7); FedBABU never within TARGET_ROUNDS (77.1 to 81.5 % after
    6 rounds; the report's FedBABU misses 85 % on 2 of 6 seeds). Ablation: the same FedReCo
    run scored without its personal models (u_0 with the initial head, 12 to 13 %) never
    reaches the target, so the report's rule (:func:`~fedclock.scenarios.claim_stats.assess`;
    censored seeds: one side reaching on every seed and the other on none decides, else the
    sign rule) does not say *holds*."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    baseline = SLOWER[row]()
    reco, without, other = [], [], []
    for seed in SEEDS:
        clients = skewed_clients(seed)
        personal, global_only = flops_to_target(reco_alg, clients, seed, TARGET, TARGET_ROUNDS, ablation=True)
        reco.append(personal)
        without.append(global_only)
        other.append(flops_to_target(baseline, clients, seed, TARGET, TARGET_ROUNDS)[0])
    assert assess(reco, other, "less", 1.0).verdict == HOLDS, (row, reco, other)
    assert assess(without, other, "less", 1.0).verdict != HOLDS, (row, without, other)  # the ablation


DP005_EQUAL = 1.0  # points, the report's margin for fm-t3-dp0.05-vs-fedreco


def test_fedreco_dp_at_the_smaller_budget_equals_fedreco_and_not_without_its_personal_models() -> None:
    """``fm-t3-dp0.05-vs-fedreco`` (fedreco_fmnist.md, Table 3: 93.15 against 93.09): FedReCo-DP at
    (0.05, 0.05) per upload keeps FedReCo's accuracy, by the report's equality rule (the 95 %
    paired interval inside +-DP005_EQUAL points). Measured (% after RECO_ROUNDS rounds, dp_clip 1,
    seeds 0 / 1 / 2): FedReCo-DP 96.15 / 94.69 / 97.99 against FedReCo 96.15 / 94.51 / 97.99
    (the noise reaches only u_0, which the personal models feel through lambda = 0.01 alone;
    detectable at 80 % power with 3 paired seeds: 5.4 x SE, 0.33 points here). Ablation (the
    noise reaching the scored model): the same FedReCo-DP scored without its personal models
    (u_0 with the initial head: 6.4 / 11.2 / 7.3 %), which the rule finds not equal to FedReCo."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    reco_dp = FedReCoDP(FedReCoDPParams(**SGD, lam=0.01, server_lr=0.005, epsilon=0.05, delta=0.05,  # type: ignore[arg-type]
                                        dp_clip=1.0), FACTORY)
    dp, plain, without = [], [], []
    for seed in SEEDS:
        clients = skewed_clients(seed)
        state, kept = trained(reco_dp, clients, seed, RECO_ROUNDS)
        dp.append(accuracy(reco_dp, state, kept, clients))
        without.append(accuracy(reco_dp, state, [None] * CLIENTS, clients))
        s, k = trained(reco_alg, clients, seed, RECO_ROUNDS)
        plain.append(accuracy(reco_alg, s, k, clients))
    assert assess(dp, plain, "equal", DP005_EQUAL).verdict in (HOLDS, IDENTICAL), (dp, plain)
    assert assess(without, plain, "equal", DP005_EQUAL).verdict != HOLDS, (without, plain)  # the ablation


def sliding_clients(seed: int, classes: int = 4) -> list[ClientData]:
    """Client c holds the classes ``order[c], .., order[c + classes - 1]`` (mod 10) of a random
    class order, each class split evenly among its holders, 70 % of a client's digits for
    training (the report's ``label_sets: sliding``, FedReCo's code's rule); pixels / 16."""
    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(10)
    sets = [{int(order[(c + j) % 10]) for j in range(classes)} for c in range(CLIENTS)]
    parts: list[list[np.ndarray]] = [[] for _ in range(CLIENTS)]
    for k in range(10):
        holders = [c for c in range(CLIENTS) if k in sets[c]]
        for holder, chunk in zip(holders, np.array_split(rng.permutation(np.flatnonzero(y == k)), len(holders))):
            parts[holder].append(chunk)
    out = []
    for c in range(CLIENTS):
        idx = rng.permutation(np.concatenate(parts[c]))
        cut = int(0.7 * len(idx))
        xs = torch.tensor(x[idx] / 16.0, dtype=torch.float32)
        ys = torch.tensor(y[idx], dtype=torch.int64)
        out.append(ClientData(c, xs[:cut], ys[:cut], xs[cut:], ys[cut:]))
    return out


DITTO_SGD = {**SGD, "batch_size": 48}
DITTO_SEEDS, DITTO_ROUNDS = tuple(range(12, 28)), 30


def test_ditto_reaches_85_percent_in_fewer_flops_than_fedreco() -> None:
    """``t2-ditto-vs-fedreco`` (fedreco.md, Table 2: Ditto reaches 85 % in 52 min 41 s, FedReCo in
    61 min 56 s): Ditto's personal models reach TARGET % in fewer counted FLOPs than FedReCo's,
    by the report's rule (:func:`~fedclock.scenarios.claim_stats.assess`, direction less, margin
    1 FLOP), on the report's partition (:func:`sliding_clients`, 4 classes) and batch 48 with
    the report's settings (Ditto: 2 local epochs, lambda 0.01; FedReCo: lambda 0.01, server_lr
    0.005). A Ditto round counts more FLOPs (5.8e6 against 3.3e6: two epochs on
    the global model besides the personal steps), but Ditto needs 9 to 13 rounds, FedReCo 16 to 25.
    Measured (Ditto / FedReCo FLOPs to 85 %): seeds 0-2 ratios 0.975, 0.878, 0.920;
    seeds 3-11 0.975 0.951 0.913 0.920 1.016 0.988 0.913 1.003 0.992 (Ditto - FedReCo -2.8e6
    FLOPs on average, sd 3.2e6, interval [-5.3e6, -0.3e6], 7 of 9 seeds below 0); then, with
    the test fixed at 16 seeds, the tested seeds 12-27: -6.8e6 (sd 3.6e6, [-8.7e6, -4.9e6]);
    16 pairs detect 2.7e6 FLOPs at 80 % power. The ordering depends on the batch: at this
    module's batch 16 FedReCo reaches first on every one of seeds 0-5 (ratios 1.13 to 1.23).
    Checked by hand (not run here: it needs every one of DITTO_ROUNDS rounds): with Ditto's
    personal models off (its global model scored) Ditto reaches 85 % within 30 rounds on 1 of
    seeds 12-27 (1.6e8 FLOPs; on seeds 3-11 on 2 of 9), and the rule does not say *holds*; with
    FedReCo on both sides the arms are identical and it does not either. About 23 s on the
    shared 2-core box (16 seeds x 2 runs of 9 to 25 rounds)."""
    ditto = Ditto(DittoParams(**DITTO_SGD, local_epochs=2, lam=0.01), FACTORY)  # type: ignore[arg-type]
    reco_alg = FedReCo(FedReCoParams(**DITTO_SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    first, second = [], []
    for seed in DITTO_SEEDS:
        clients = sliding_clients(seed)
        first.append(flops_to_target(ditto, clients, seed, TARGET, DITTO_ROUNDS)[0])
        second.append(flops_to_target(reco_alg, clients, seed, TARGET, DITTO_ROUNDS)[0])
    assert assess(first, second, "less", 1.0).verdict == HOLDS, (first, second)
