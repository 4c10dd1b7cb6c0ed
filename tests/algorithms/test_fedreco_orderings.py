"""Paired-seed learning tests of orderings that hold in docs/reproductions/fedreco.md, each
against its own ablation (the component off), in a small label-skewed digits setting (pure
algorithm API, no runtime).

Setting: 10 clients, client c holding classes c and c + 1 (mod 10), each class split evenly
between its two holders, 70/30 train/test per client (about 126 training digits a client);
MLP 64-32-10 (body: the hidden layer), lr 0.05, batch 16, gradients clipped to 10, every
client in every round, the paper's local work (2 epochs; FedReCo and FedPAC 1 head + 1 body
epoch). Seeds 0-2 share the split and the initial model of each algorithm pair.

* ``t1-fedreco-vs-fedavg`` / ``t1-fedreco-vs-fedpac`` (fedreco.md) and ``fm2-fedreco-vs-fedavg_ft``
  (fedreco_fmnist.md, 2 classes per client): FedReCo's personal models above FedAvg's global
  model, FedPAC's personal models and FedAvg-FT's fine-tuned models after RECO_ROUNDS rounds. Ablation: the same
  trained FedReCo scored without its personal models (u_0 with the shared initial head, its
  global model), which must fall below both: the ordering comes from the personal models.
* ``t1-fedreco-vs-fedcr`` (fedreco.md): FedReCo's personal models above FedCR's after
  RECO_ROUNDS rounds; ablation as above (without its personal models FedReCo falls below FedCR).
* ``t3-fedreco_dp-vs-fedavg_ft_dp`` and the equality ``t3-dp0.2-vs-fedreco`` (fedreco.md):
  FedReCo-DP at (0.2, 0.1) keeps FedReCo's accuracy (the noise reaches only u_0) where
  FedAvg-FT-DP loses almost all of it; ablation: FedReCo-DP scored without its personal models.
* ``t3-fedavg_ft_dp-vs-fedavg_dp`` (fine-tuning recovers part of what FedAvg-DP loses): one
  trained FedAvg-DP state at (0.2, 0.1), scored with and without FT_EPOCHS of local
  fine-tuning (paired: the same state); off (0 epochs) the two scores are one, gain 0.

Measured numbers are in each test's docstring.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from fedclock.algorithms.base import Algorithm, ClientData, ServerState, Tensors
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.fedavg_dp import FedAvgDP, FedAvgDPParams
from fedclock.algorithms.fedavg_ft import FedAvgFT, FedAvgFTParams
from fedclock.algorithms.fedcr import FedCR, FedCRParams, GaussianEncoderFactory
from fedclock.algorithms.fedpac import FedPAC, FedPACParams
from fedclock.algorithms.fedreco import FedReCo, FedReCoDP, FedReCoDPParams, FedReCoParams
from fedclock.algorithms.models import ModelFactory
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


def test_fedreco_personal_models_beat_fedavg_fedpac_fedavg_ft_and_not_without_them() -> None:
    """Measured (% after 4 rounds, seeds 0 / 1 / 2): FedReCo personal 96.2 / 94.5 / 98.0; FedAvg
    global 50.0 / 51.3 / 54.6; FedPAC personal 75.6 / 79.7 / 88.3; FedAvg-FT (1 epoch of
    fine-tuning) 85.7 / 85.2 / 78.9; FedReCo without its personal
    models (u_0 with the initial head) 12.8 / 13.0 / 11.0 (after 6 rounds: 97.4 / 97.3 / 97.6
    against FedPAC's 92.5 / 87.9 / 93.0). The test asks for MARGIN points per seed over the
    best baseline (the smallest measured gap is 8.8), and for the ablation to fall below it."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    fedavg = FedAvg(FedAvgParams(**SGD, local_epochs=2), FACTORY)  # type: ignore[arg-type]
    fedpac = FedPAC(FedPACParams(**SGD, lam=1.0), FACTORY)  # type: ignore[arg-type]
    fedavg_ft = FedAvgFT(FedAvgFTParams(**SGD, local_epochs=2, finetune_epochs=1), FACTORY)  # type: ignore[arg-type]
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
        best = max(avg, pac, ft)
        assert reco - best > MARGIN, (seed, reco, avg, pac, ft)
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
    20.9 (the lead is 77 points or more). The test asks, per seed, FedReCo-DP within DP_EQUAL
    of FedReCo, DP_LEAD points over FedAvg-FT-DP, and the same FedReCo-DP scored without its
    personal models (u_0, which the noise reaches, with the initial head) DP_LEAD below its
    personal models: the personal models keep the accuracy."""
    reco_alg = FedReCo(FedReCoParams(**SGD, lam=0.01, server_lr=0.005), FACTORY)  # type: ignore[arg-type]
    reco_dp = FedReCoDP(FedReCoDPParams(**SGD, lam=0.01, server_lr=0.005, epsilon=0.2, delta=0.1,  # type: ignore[arg-type]
                                        dp_clip=1.0), FACTORY)
    ft_dp = FedAvgDP(FedAvgDPParams(**SGD, local_epochs=2, epsilon=0.2, delta=0.1, dp_clip=1.0,  # type: ignore[arg-type]
                                    finetune_epochs=1), FACTORY)
    for seed in SEEDS:
        clients = skewed_clients(seed)
        state, kept = trained(reco_dp, clients, seed)
        dp = accuracy(reco_dp, state, kept, clients)
        s, k = trained(reco_alg, clients, seed)
        assert abs(dp - accuracy(reco_alg, s, k, clients)) <= DP_EQUAL, seed
        s, k = trained(ft_dp, clients, seed)
        assert dp - accuracy(ft_dp, s, k, clients) > DP_LEAD, seed
        assert dp - accuracy(reco_dp, state, [None] * CLIENTS, clients) > DP_LEAD, seed
