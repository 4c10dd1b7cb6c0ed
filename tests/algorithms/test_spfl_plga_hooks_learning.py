"""Paired-seed learning tests of SPFL/PLGA components, driven through the algorithms' hooks in
a plain-Python protocol loop (no clock, no run directory: as ``tests/algorithms/test_learning.py``
does), so that each test costs one to three seconds of CPU.

Each test runs a component and its ablation (the component off, everything else equal) on the
same seeds: a seed fixes the clients' classes and samples, their train/test split, the initial
model and every task's batches, so the two arms differ only in the component. The assertion is
the verdict rule of ``fedclock reproduce`` (:mod:`fedclock.scenarios.claim_stats`): the 95 %
paired t interval of the personalized accuracy's difference excludes 0 on the claimed side.
Data: scikit-learn's digits, each of 6 clients holding a few of the 10 classes (80 % of its
samples to train, 20 % to test), a 32-unit MLP stopped after a few rounds: far from the digits
ceiling (the personalized accuracies below are 40-90 %). With 3 seeds the detectable
difference is 5.4 paired standard errors; each docstring gives the effect it finds.
"""
from __future__ import annotations

from typing import Callable, Iterator

import pytest
import torch
from sklearn.datasets import load_digits

from fedclock.algorithms.base import Algorithm, ClientData, ServerState
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.plga import PLGA, PLGAParams
from fedclock.algorithms.spfl import SPFL, SPFLW, SPFLParams, SPFLWOneStep
from fedclock.scenarios.claim_stats import HOLDS, paired, verdict
from tests.algorithms.straggled_rounds import run_straggled_rounds

SEEDS = (0, 1, 2)
NUM_CLIENTS = 6
FACTORY = ModelFactory("mlp", (64,), 10, hidden=(32,))
_DIGITS = load_digits()
X = torch.tensor(_DIGITS.data, dtype=torch.float32) / 16.0
Y = torch.tensor(_DIGITS.target, dtype=torch.long)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One PyTorch thread, as the measurements in the docstrings used (several threads on a
    busy 2-core machine multiply these tests' time many fold)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def clients(seed: int, classes: int, shared: bool = False) -> list[ClientData]:
    """Every client draws ``classes`` of the 10 classes and a disjoint share of each class's
    samples (the paper's class sampling, App. B), then splits them 80/20 into train and test.
    ``shared``: one draw for every client (the IID partition, App. B step 2; the library's
    ``partition.shared``)."""
    gen = torch.Generator().manual_seed(seed)
    draws = 1 if shared else NUM_CLIENTS
    picks = [torch.randperm(10, generator=gen)[:classes].tolist() for _ in range(draws)] * (NUM_CLIENTS // draws)
    holders = {k: [c for c in range(NUM_CLIENTS) if k in picks[c]] for k in range(10)}
    parts: list[list[torch.Tensor]] = [[] for _ in range(NUM_CLIENTS)]
    for k, owners in holders.items():
        idx = torch.nonzero(Y == k).flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        for owner, chunk in zip(owners, idx.chunk(len(owners)) if owners else []):
            parts[owner].append(chunk)
    out = []
    for c, chunks in enumerate(parts):
        idx = torch.cat(chunks)
        idx = idx[torch.randperm(len(idx), generator=gen)]
        cut = int(0.8 * len(idx))
        out.append(ClientData(c, X[idx[:cut]], Y[idx[:cut]], X[idx[cut:]], Y[idx[cut:]]))
    return out


def task_rng(seed: int, client: int, task: int) -> torch.Generator:
    return torch.Generator().manual_seed(100_000 * seed + 1000 * client + task)


def personal_accuracy(alg: Algorithm, state: ServerState, data: list[ClientData]) -> float:
    """Mean over clients of the client's own model (its payload) on its test split."""
    accs = [alg.evaluate_client(alg.payload_for(state, d.client), None, d, 512).accuracy for d in data]
    return sum(accs) / len(accs)


def run(alg: Algorithm, seed: int, classes: int, rounds: int, delay: dict[int, int] | None = None,
        shared: bool = False) -> tuple[ServerState, list[ClientData]]:
    """``rounds`` server rounds over every idle client; client c's result arrives ``delay[c]``
    rounds late (0: punctual) and joins the round it arrives in, with its staleness (the
    windowed async mode with ``late_windows``, as the library's table2_plga_quick scripts it;
    ``shared``: :func:`clients`'s IID partition)."""
    data = clients(seed, classes, shared)
    state = alg.init_server(torch.Generator().manual_seed(seed))
    state = run_straggled_rounds(alg, state, data, rounds, delay or {},
                                 lambda client, task: task_rng(seed, client, task))
    return state, data


def holds(arm_a: Callable[[int], float], arm_b: Callable[[int], float]) -> tuple[bool, list[float], list[float]]:
    a = [arm_a(s) for s in SEEDS]
    b = [arm_b(s) for s in SEEDS]
    return verdict(paired(a, b), "greater", 0.01) == HOLDS, a, b


def test_plga_leap_eq11_beats_eq10() -> None:
    """PLGA's leap from the current global model (eq. 11) against the leap from the straggler's
    own start model (eq. 10), Sec. 4.2 ("w_k computed by (11) is better than by (10)"; the
    paper gives no number; MNIST-1D, docs/reproductions/spfl_plga.md, claim t2-eq11-vs-eq10:
    +3.5 points). Three of 6 clients (6 classes each) are 3, 4 and 5 rounds late; eq. 10 puts
    their stale start models back into every mean, so the global model, and with it the
    personalized ones, lag. Measured after 12 rounds: 66.5, 44.7, 62.8 % against 58.0, 37.1,
    51.4 % on seeds 0-2 (+7.6 to +11.4 points). With ``leap: eq10`` on both sides the runs are
    identical and the test fails. About 2.5 s of CPU (24 PLGA rounds per seed)."""
    late = {0: 3, 1: 4, 2: 5}

    def arm(leap: str) -> Callable[[int], float]:
        def measure(seed: int) -> float:
            alg = PLGA(PLGAParams(lr=0.05, batch_size=32, local_steps=10, leap=leap), FACTORY)
            return personal_accuracy(alg, *run(alg, seed, classes=6, rounds=12, delay=late))
        return measure

    ok, eq11, eq10 = holds(arm("eq11"), arm("eq10"))
    assert ok, (eq11, eq10)


def test_spfl_w_twice_local_update_beats_one_step() -> None:
    """SPFL-w's twice local update (two SGD steps per batch, the gradient recomputed at the
    moved weights) against SPFL-w (1-step), weight fusion kept: Table 1's ablation (97.22
    against 96.52 on MNIST non-IID; MNIST-1D, docs/reproductions/spfl_plga.md, claim
    t1-spfl_w-twice-vs-1step: +7 points). Clients of 6 classes, 6 rounds (4 model updates
    and 2 similarity rounds, Gamma 2) of 5 steps: 51.1, 43.1, 40.4 % against 31.1, 34.6,
    23.7 % on seeds 0-2 (+8.5 to +20.0 points). With SPFL-w (1-step) on both sides the runs
    are identical and the test fails. About 1.3 s of CPU."""
    params = SPFLParams(lr=0.05, gamma=2, batch_size=32, local_steps=5)

    def arm(cls: type[SPFL]) -> Callable[[int], float]:
        def measure(seed: int) -> float:
            alg = cls(params, FACTORY)
            return personal_accuracy(alg, *run(alg, seed, classes=6, rounds=6))
        return measure

    ok, twice, one = holds(arm(SPFLW), arm(SPFLWOneStep))
    assert ok, (twice, one)


IID_SEEDS = tuple(range(40))
"""The IID fusion test's seeds: two blocks of 20, each measured on its own (test docstring)."""
IID_PARAMS = SPFLParams(lr=0.1, gamma=10, batch_size=32, local_steps=5)


def iid_personal(cls: type[SPFL], seed: int) -> float:
    """Personalized accuracy of ``cls`` on IID clients (one draw of all 10 classes, App. B step
    2) after 11 rounds: one similarity round and 10 model updates (Gamma 10, the quick file's)."""
    alg = cls(IID_PARAMS, FACTORY)
    return personal_accuracy(alg, *run(alg, seed, classes=10, rounds=11, shared=True))


def test_spfl_w_weight_fusion_beats_spfl_on_iid_clients() -> None:
    """SPFL-w (the server fuses the clients' trained weights with the softmax rows) against
    SPFL (it moves each client's own model by the rows' mix of updates), twice local update and
    refreshes kept: Table 1's IID column (98.90 against 98.82 on MNIST; MNIST-1D,
    docs/reproductions/spfl_plga.md, claim t1-iid-spfl-w-vs-spfl: +2.44 points). The two rules
    agree on the first update after a refresh (every model is then the mean); afterwards SPFL
    keeps each model's own offset from the rows' mix of models, which IID clients do not need.
    The effect is small on digits (80-86 % accuracy, far from the ceiling; one client's test
    digit is 0.46 points of its accuracy), so the test pairs 40 seeds. Measured, SPFL-w - SPFL
    in points: seeds 0-19 +0.48 on average (standard deviation 0.65, interval [+0.17, +0.78],
    14 of 20 above 0, 3 below); seeds 20-39, run after, +0.42 (sd 0.71, [+0.09, +0.76]); all
    40: +0.45, interval about [+0.23, +0.67]. With 40 pairs the test detects 0.31 points at
    80 % power (2.9 paired standard errors at sd 0.68). With SPFL on both sides the runs are
    identical and it fails. About 11 s alone on the shared 2-core box, 27 s beside another
    worker at ``-n 2`` (80 runs of 11 rounds).
    The Gamma 10 against 5 IID row (t7-iid-gamma10-vs-5) has no test: in this test's setting
    Gamma 10 - Gamma 5 (10 updates each) is -0.73 points on seeds 0-19 (sd 1.58, interval
    [-1.46, +0.01]) and -0.65 on seeds 20-39 ([-1.47, +0.18]), -0.69 over all 40 ([-1.21,
    -0.16], detectable 0.75: under 80 % power), and in a first measurement on the same IID
    partition (8 seeds each) it turned positive at 20 updates (+0.24, sd 0.35) and at lr 0.05
    with 30 updates (+0.74, sd 0.95): its sign depends on the setting."""
    fused = [iid_personal(SPFLW, s) for s in IID_SEEDS]
    plain = [iid_personal(SPFL, s) for s in IID_SEEDS]
    assert verdict(paired(fused, plain), "greater", 0.01) == HOLDS, (fused, plain)


def test_spfl_finetuning_before_the_test_helps() -> None:
    """SPFL's fine-tuning (App. E, Table 8: each client runs SGD steps on its own train split
    before its personalized test) against none, on the same trained models: 20 steps at twice
    the training step size after 4 rounds (3 model updates) on clients of 6 classes, where the
    personalized models are still far from their clients' data (Table 8: +0.1 points on MNIST
    at 98.3 %; MNIST-1D, docs/reproductions/spfl_plga.md, claim t8-finetune: +0.35). Measured:
    48.7, 49.2, 54.9 % against 39.3, 38.6, 42.1 % on seeds 0-2 (+9.4 to +12.7 points); 10
    steps at the training step size or below move it by -6 to +14 points, too noisy for 3
    seeds. With ``finetune_steps: 0`` the two arms are equal and the test fails. About 0.9 s
    of CPU."""
    common = {"lr": 0.05, "gamma": 10, "batch_size": 32, "local_steps": 5}
    tuned_alg = SPFL(SPFLParams(**common, finetune_steps=20, finetune_lr=0.1), FACTORY)
    plain_alg = SPFL(SPFLParams(**common), FACTORY)
    trained = {s: run(plain_alg, s, classes=6, rounds=4) for s in SEEDS}  # fine-tuning acts at the test only

    ok, tuned, plain = holds(lambda s: personal_accuracy(tuned_alg, *trained[s]),
                             lambda s: personal_accuracy(plain_alg, *trained[s]))
    assert ok, (tuned, plain)
