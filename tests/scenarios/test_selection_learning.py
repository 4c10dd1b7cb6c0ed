"""Learning tests of the selectors and of over-commitment, each with three paired seeds (0,
1, 2: the same data split, devices and initial model for both arms) against its own ablation,
on the library's quick files (digits with Dirichlet-by-class(0.3) labels, compute speeds
log-uniform over a 100x range, target accuracy 0.9: not at ceiling, the runs take 15-40
rounds to reach it).

* Oort vs uniform (``oort_uniform_poc_quick``): time to the target accuracy. Oort must be
  faster on every seed and at least 25 % faster in total; without its system penalty
  (``round_penalty: 0``) the same check fails, so the test detects the penalty's effect, not
  exploration alone. Virtual seconds to the target, seeds 0 / 1 / 2 (total), since Oort's
  exploration is drawn by rank (issue 50): uniform 168.8 / 131.3 / 136.9 (437.0), Oort 78.6 /
  70.3 / 66.9 (215.9, 49 % of uniform's), without the penalty 150.8 / 92.3 / 95.4 (338.6, 77 %:
  faster on every seed, short of the 25 %); with the earlier exploration draw
  (``rng.choice`` over the listed unexplored candidates) Oort took 211.0 and the ablation
  449.3, above uniform's.
* Power-of-choice vs uniform (same file, 30 rounds, no target): the global objective of
  Cho et al. (AISTATS 2022, Sec. 2, Eq. 1), ``F(w) = sum_k p_k F_k(w)`` with ``p_k`` the
  client's share of the data, must be lower on every seed; with ``d = K`` (the plain
  size-weighted draw) it is not. See that test for why this is the reading of "the mean
  loss of the cohort".
* Over-commitment 1.3 vs 1.0 (``overcommit_quick``, 3 s deadline): time to the target must
  be shorter on every seed and at least 25 % shorter in total.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite
from fedclock.scenarios.run_costs import CountedCosts

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "selection"
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def costs() -> CountedCosts:
    """The module's counted FLOPs, shared by its runs as a session shares them between the runs
    and seeds of a file (the runs differ in how clients are selected, not in their tasks)."""
    return CountedCosts()


def _runs(file: str, seed: int, *extra: Any) -> dict[str, Any]:
    suite = load_suite(LIBRARY / file, [("seed", seed), *extra])
    return {s.name.split("/")[-1]: s for s in suite.runs}


def _time_to_target(tmp_path: Path, costs: CountedCosts, file: str, names: tuple[str, ...]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {n: [] for n in names}
    for seed in SEEDS:
        runs = _runs(file, seed)
        for name in names:
            run = runs[next(k for k in runs if k.endswith(name))]
            summary = run_scenario(run, Runtime("inline"), tmp_path / f"{name}-{seed}", costs=costs)
            assert summary.stop_reason == "target_accuracy", (name, seed, summary.stop_reason)
            out[name].append(summary.virtual_time)
    return out


def _faster(fast: list[float], slow: list[float]) -> bool:
    return all(a < b for a, b in zip(fast, slow)) and sum(fast) <= 0.75 * sum(slow)


@pytest.mark.slow
def test_oort_reaches_the_target_sooner_than_uniform_and_not_without_its_penalty(tmp_path: Path,
                                                                                costs: CountedCosts) -> None:
    t = _time_to_target(tmp_path, costs, "oort_uniform_poc_quick.yaml", ("uniform", "oort", "oort-no-penalty"))
    assert _faster(t["oort"], t["uniform"]), t
    assert not _faster(t["oort-no-penalty"], t["uniform"]), t  # the ablation: the test would fail


def _global_objective(out: Path) -> float:
    """``F(w) = sum_k p_k F_k(w)`` of the last evaluated global model ``w``: each client's
    loss of ``w`` on its own held-out split (``client_metrics.parquet``), weighted by the
    split's size (20 % of the client's samples, so proportional to ``p_k``)."""
    rows = pd.read_parquet(out / "client_metrics.parquet")
    rows = rows[rows.version == rows.version.max()]
    return float((rows.loss * rows.num_test).sum() / rows.num_test.sum())


@pytest.mark.slow
def test_power_of_choice_lowers_the_clients_global_loss_and_not_with_d_equal_k(tmp_path: Path,
                                                                             costs: CountedCosts) -> None:
    """The reading: power-of-choice picks, among ``d`` candidates, the ``K`` whose reported
    loss is highest, so the loss a cohort reports when it is picked is higher than under
    uniform by construction (it measures the bias, not learning). Cho et al. measure what
    the bias buys with the global training objective ``F(w) = sum_k p_k F_k(w)``, the mean
    over *all* clients, weighted by data, of the current global model's loss (Sec. 2,
    Eq. 1; Sec. 6 plots it). That is what is compared here, after 30 rounds, each client's
    ``F_k`` measured on its own held-out 20 % (an unbiased estimate of its local loss;
    the training samples would be the paper's exact ``F_k``, but the run does not evaluate
    on them).

    Paired seeds 0, 1, 2 (same split, devices, initial model): power-of-choice must be
    lower than uniform on every seed. Measured when written (uniform / power-of-choice /
    d = K): 0.335 / 0.329 / 0.434, 0.425 / 0.411 / 0.492, 0.386 / 0.359 / 0.377. The test
    detects a difference of sign on each seed (the smallest gap, seed 0, is 2 % of the
    loss); with the choice switched off (``d = K``: the same size-weighted draw without
    keeping the highest losses) the check fails on two seeds of three."""
    losses: dict[str, list[float]] = {"uniform": [], "power_of_choice": [], "poc-d-eq-k": []}
    evaluation = {"every": 30, "personalized": True, "per_client": True}
    for seed in SEEDS:
        runs = _runs("oort_uniform_poc_quick.yaml", seed, ("stop", {"rounds": 30}), ("evaluation", evaluation))
        for name in losses:
            run = runs[next(k for k in runs if k.endswith(name))]
            run_scenario(run, Runtime("inline"), tmp_path / f"{name}-{seed}", costs=costs)
            losses[name].append(_global_objective(tmp_path / f"{name}-{seed}"))
    assert all(p < u for p, u in zip(losses["power_of_choice"], losses["uniform"])), losses
    assert not all(p < u for p, u in zip(losses["poc-d-eq-k"], losses["uniform"])), losses  # the ablation


@pytest.mark.slow
def test_overcommit_reaches_the_target_sooner(tmp_path: Path, costs: CountedCosts) -> None:
    t = _time_to_target(tmp_path, costs, "overcommit_quick.yaml", ("overcommit-1.0", "overcommit-1.3"))
    assert _faster(t["overcommit-1.3"], t["overcommit-1.0"]), t
