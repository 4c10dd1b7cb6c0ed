"""``privacy:`` in whole runs: central DP with FedBuff (async) and with Oort selection
(per-client composition), uniform sync cohorts (amplification by sampling), local DP, each
with per-client epsilon in ``clients.parquet`` and the run's in ``metrics.parquet``."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.algorithms.dp import classical_multiplier, cumulative_epsilon
from fedclock.algorithms.privacy import sampled_epsilon
from fedclock.scenarios.compare import compare_runs, comparison_table
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.plots import participation_figure
from fedclock.scenarios.rundirs import read_run
from tests.conftest import scenario
from tests.scenarios.runs import assert_resume_is_bit_identical

Z, CLIP, DELTA = 1.1, 0.5, 1e-4
POPULATION = {"num_clients": 6, "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200}}}


def tables(tmp_path: Path, **sections: object) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    run_scenario(scenario(**{"population": POPULATION, "dataset": {"name": "digits"}, "evaluation": {"every": 2},
                             **sections}), Runtime("inline"), tmp_path)
    return (pd.read_parquet(tmp_path / "metrics.parquet"), pd.read_parquet(tmp_path / "clients.parquet"),
            pd.read_parquet(tmp_path / "events.parquet"))


def assert_per_client(metrics: pd.DataFrame, clients: pd.DataFrame) -> None:
    """Each client's epsilon is its own releases composed (PLD) and its releases are its
    applied tasks; the run's epsilon is the largest."""
    assert clients.dp_releases.tolist() == clients.tasks_applied.tolist()
    for k, eps in zip(clients.dp_releases, clients.dp_epsilon):
        assert eps == cumulative_epsilon(Z, int(k), DELTA)
    last = metrics.iloc[-1]
    assert last.dp_epsilon == clients.dp_epsilon.max() > 0
    assert last.dp_delta == DELTA and last.dp_uploads_max == clients.dp_releases.max()


def test_central_dp_with_fedbuff_composes_each_clients_uploads(tmp_path: Path) -> None:
    metrics, clients, _ = tables(
        tmp_path, algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3, "buffer_size": 2},
        mode={"type": "async", "concurrency": 3}, stop={"versions": 6},
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "delta": DELTA})
    assert_per_client(metrics, clients)
    assert clients.dp_releases.nunique() > 1  # heterogeneous devices: unequal participation, unequal epsilon
    assert set(metrics.dp_noise_std.dropna()) == {Z * CLIP}
    assert metrics.dp_clipped_fraction.dropna().between(0, 1).all()


def test_central_dp_with_oort_claims_no_amplification(tmp_path: Path) -> None:
    metrics, clients, _ = tables(
        tmp_path, algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 3}, selection={"name": "oort"},
        mode={"type": "sync", "cohort_size": 2}, stop={"rounds": 4},
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "delta": DELTA})
    assert_per_client(metrics, clients)
    assert clients.dp_releases.sum() == 8


def test_uniform_sync_cohorts_amplify_by_sampling(tmp_path: Path) -> None:
    """2 of 6 clients a round, 4 rounds: every client's epsilon is that of 4 sampled steps
    (RDP, without replacement), picked or not."""
    metrics, clients, _ = tables(
        tmp_path, algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 3}, mode={"type": "sync", "cohort_size": 2},
        stop={"rounds": 4}, privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "delta": DELTA})
    eps = sampled_epsilon(Z, 6, 2, 4, DELTA)
    assert clients.dp_epsilon.tolist() == [eps] * 6
    assert metrics.iloc[-1].dp_epsilon == eps and metrics.iloc[-1].dp_amplified == 1.0
    rule = json.loads((tmp_path / "privacy.json").read_text())
    assert rule == {"rule": "sampled_fixed_size", "reason": "uniform cohorts of 2 of 6 clients without replacement",
                    "population": 6, "cohort": 2, "delta": DELTA}
    # under the same replace-one relation (multiplier z / 2), less than 4 releases without sampling
    assert eps < cumulative_epsilon(Z / 2, 4, DELTA)


@pytest.mark.parametrize("clip,fraction", [(1e-4, 1.0), (1e4, 0.0)])
def test_local_dp_clipped_fraction_and_noise(tmp_path: Path, clip: float, fraction: float) -> None:
    """One round from the initial model: every update is longer than 1e-4 and shorter than 1e4."""
    metrics, clients, _ = tables(
        tmp_path, algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 3}, stop={"rounds": 1},
        privacy={"mode": "local", "clip": clip, "noise_multiplier": Z, "delta": DELTA})
    assert set(metrics.dp_clipped_fraction.dropna()) == {fraction}
    assert set(metrics.dp_noise_std.dropna()) == {Z * 2 * clip}
    assert set(metrics.dp_amplified.dropna()) == {0.0}
    assert clients.dp_releases.tolist() == [1] * 6


def test_a_spent_budget_retires_the_client_for_good(tmp_path: Path) -> None:
    """Budget between the epsilon of 2 and of 3 releases: every client retires at its second
    applied upload (faster devices sooner), is never dispatched again, and the retirement is
    a ``retired`` row of timeline.parquet and ``retired_at`` in clients.parquet; the run ends
    when no client is left."""
    budget = (cumulative_epsilon(Z, 2, DELTA) + cumulative_epsilon(Z, 3, DELTA)) / 2
    metrics, clients, events = tables(
        tmp_path, algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3, "buffer_size": 2},
        mode={"type": "async", "concurrency": 3}, stop={"versions": 20},
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "budget": {"epsilon": budget, "delta": DELTA}})
    timeline = pd.read_parquet(tmp_path / "timeline.parquet")
    assert clients.tasks.tolist() == [2] * 6 and clients.tasks_applied.tolist() == [2] * 6
    assert (clients.dp_epsilon <= budget).all() and metrics.iloc[-1].dp_delta == DELTA
    retired = timeline[timeline.type == "retired"]
    assert sorted(c for cs in retired.clients for c in cs) == list(range(6))
    for row in retired.itertuples():
        for c in row.clients:
            assert clients.retired_at[c] == row.time
            assert events[events.client == c].finished_at.max() == row.time  # retired as its 2nd upload lands
    assert clients.retired_at.nunique() > 1  # heterogeneous devices spend their budgets at different times
    frame = compare_runs([read_run(tmp_path)])
    assert frame.dp_epsilon.tolist() == [clients.dp_epsilon.max()] and frame.dp_delta.tolist() == [DELTA]
    assert "epsilon" in [c.header for c in comparison_table(frame).columns]
    legend = participation_figure([read_run(tmp_path)]).axes[0].get_legend()
    assert any(t.get_text().endswith(": 6 retired by their privacy budget") for t in legend.get_texts())


def test_a_resumed_budgeted_run_equals_an_uninterrupted_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Central noise from the server's stream, release counts in the server state and the
    retirements replayed by the clock: a run crashed at version 3 and resumed writes the same
    tables (retired rows included) as one that was not interrupted."""
    budget = (cumulative_epsilon(Z, 2, DELTA) + cumulative_epsilon(Z, 3, DELTA)) / 2
    plain = assert_resume_is_bit_identical(dict(
        population=POPULATION, dataset={"name": "digits"}, evaluation={"every": 1},
        algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3, "buffer_size": 2},
        mode={"type": "async", "concurrency": 3}, stop={"versions": 20},
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z,
                 "budget": {"epsilon": budget, "delta": DELTA}}), tmp_path, monkeypatch, every=2, crash=3)
    assert (pd.read_parquet(plain / "timeline.parquet").type == "retired").sum() >= 2


def test_adaptive_clipping_finds_the_median_update_norm(tmp_path: Path) -> None:
    """From a clip of 5 (no update is that long) the clip shrinks geometrically until about
    half the updates are clipped (target quantile 0.5), then stays there: over the last ten
    rounds the clipped fraction averages 0.3-0.7 (measured at the time of writing: 0.48), and
    every row's noise is z_Delta times its step's clip."""
    metrics, _, _ = tables(
        tmp_path, population={"num_clients": 10}, evaluation={"every": 1},
        algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 4, "batch_size": 16}, stop={"rounds": 24},
        privacy={"mode": "central", "clip": 5.0, "noise_multiplier": 0.8,
                 "adaptive": {"bit_noise": 1.0, "learning_rate": 0.5, "target_quantile": 0.5}})
    clips = metrics.dp_clip.tolist()
    assert clips[0] == 5.0 and clips[-1] < 1.0
    z_delta = (0.8 ** -2 - 2.0 ** -2) ** -0.5
    assert ((metrics.dp_noise_std - z_delta * metrics.dp_clip).abs() < 1e-9).all()
    assert 0.3 <= metrics.dp_clipped_fraction.iloc[-10:].mean() <= 0.7


@pytest.mark.slow
def test_same_tables_on_ray_and_inline(ray_runtime: Runtime, tmp_path: Path) -> None:
    """The private algorithm travels to Ray actors (pickled as its class plus settings), the
    clip with the payload, the noise from seeded generators: adaptive central DP with FedBuff
    and a budget writes the same tables on Ray as inline."""
    sections = dict(
        population=POPULATION, dataset={"name": "digits"}, evaluation={"every": 2},
        algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3, "buffer_size": 2},
        mode={"type": "async", "concurrency": 3}, stop={"versions": 8},
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "adaptive": {"bit_noise": 2.0},
                 "budget": {"epsilon": cumulative_epsilon(Z, 3, DELTA), "delta": DELTA}})
    run_scenario(scenario(**sections, runtime={"backend": "ray", "num_actors": 2}), ray_runtime, tmp_path / "ray")
    run_scenario(scenario(**sections), Runtime("inline"), tmp_path / "inline")
    for table in ("metrics", "events", "clients", "timeline"):
        a = pd.read_parquet(tmp_path / "ray" / f"{table}.parquet")
        b = pd.read_parquet(tmp_path / "inline" / f"{table}.parquet")
        if table == "metrics":
            a, b = a.drop(columns=["wall_time"]), b.drop(columns=["wall_time"])
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert (pd.read_parquet(tmp_path / "inline" / "timeline.parquet").type == "retired").any()


def test_budgets_per_client_group(tmp_path: Path) -> None:
    """Clients 0-2 may spend between epsilon(1) and epsilon(2), the others between epsilon(3)
    and epsilon(4): one applied upload each for the first, three for the rest."""
    eps = [cumulative_epsilon(Z, k, DELTA) for k in (1, 2, 3, 4)]
    small, large = (eps[0] + eps[1]) / 2, (eps[2] + eps[3]) / 2
    _, clients, _ = tables(
        tmp_path, algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3, "buffer_size": 2},
        mode={"type": "async", "concurrency": 3}, stop={"versions": 30},
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z,
                 "budget": {"epsilon": large, "delta": DELTA, "clients": [{"ids": [0, 1, 2], "epsilon": small}]}})
    assert clients.tasks_applied.tolist() == [1, 1, 1, 3, 3, 3]
    assert clients.dp_epsilon.tolist() == [eps[0]] * 3 + [eps[2]] * 3
    assert clients.retired_at.notna().all()


def test_fedavg_dp_runs_as_fedavg_with_local_privacy(tmp_path: Path) -> None:
    """Whole runs: ``fedavg_dp`` at (epsilon 0.5, delta 0.05, C 0.3) and ``fedavg`` with
    ``privacy: {mode: local, clip: 0.3, noise_multiplier: the classical multiplier of (0.5,
    0.05), delta: 0.05}`` write the same events and the same accuracies and epsilons."""
    z = classical_multiplier(0.5, 0.05)
    common = dict(mode={"type": "sync", "cohort_size": 3}, stop={"rounds": 3}, evaluation={"every": 1})
    m_dp, _, e_dp = tables(tmp_path / "dp", algorithm={"name": "fedavg_dp", "lr": 0.1, "local_steps": 3,
                                                       "epsilon": 0.5, "delta": 0.05, "dp_clip": 0.3}, **common)
    m_layer, _, e_layer = tables(tmp_path / "layer", algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 3},
                                 privacy={"mode": "local", "clip": 0.3, "noise_multiplier": z, "delta": 0.05}, **common)
    pd.testing.assert_frame_equal(e_dp, e_layer, check_exact=True)
    for column in ("global_accuracy", "global_loss", "dp_epsilon", "dp_delta", "dp_uploads_max"):
        assert m_dp[column].tolist() == m_layer[column].tolist(), column


def test_clients_that_cannot_fit_the_task_end_the_amplification(tmp_path: Path) -> None:
    """Client 0's device is too small for the task: cohorts are uniform over the other five
    only, so the run composes per client and privacy.json says why."""
    _, clients, _ = tables(
        tmp_path, population={**POPULATION, "clients": [{"ids": [0], "memory_gb": 1e-6}]},
        algorithm={"name": "fedavg", "lr": 0.1, "local_steps": 3}, mode={"type": "sync", "cohort_size": 2},
        stop={"rounds": 3}, privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "delta": DELTA})
    rule = json.loads((tmp_path / "privacy.json").read_text())
    assert (rule["rule"], rule["reason"]) == ("per_client", "clients that cannot fit the task (1): cohorts are drawn "
                                              "from the others only")
    assert clients.dp_epsilon[0] == 0.0 and clients.dp_releases[0] == 0


def test_an_online_event_does_not_bring_a_retired_client_back(tmp_path: Path) -> None:
    """The budget retires every client at its second applied upload; an ``online`` event for
    all of them every second until 30 s dispatches none of them again."""
    budget = (cumulative_epsilon(Z, 2, DELTA) + cumulative_epsilon(Z, 3, DELTA)) / 2
    _, clients, events = tables(
        tmp_path, algorithm={"name": "fedbuff", "lr": 0.1, "local_steps": 3, "buffer_size": 2},
        mode={"type": "async", "concurrency": 3}, stop={"versions": 20},
        timeline=[{"every_s": 1.0, "until_s": 30.0, "type": "online", "clients": {"range": [0, 6]}}],
        privacy={"mode": "central", "clip": CLIP, "noise_multiplier": Z, "budget": {"epsilon": budget, "delta": DELTA}})
    assert clients.tasks.tolist() == [2] * 6 and clients.retired_at.notna().all()
    timeline = pd.read_parquet(tmp_path / "timeline.parquet")
    assert (timeline.type == "online").sum() >= 1 and (timeline.type == "retired").any()
    for c in range(6):
        assert (events[events.client == c].dispatched_at < clients.retired_at[c]).all()
