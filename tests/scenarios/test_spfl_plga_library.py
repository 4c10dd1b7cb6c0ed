"""The shipped SPFL/PLGA library files.

* table2_plga_quick: with scripted lateness every method's stragglers (clients 0..4) are late
  by exactly 1..5 rounds; the emergent run gets the same lateness from slow devices; the *-mix
  runs' drawn phones give stale arrivals, on which LGA's Taylor term acts.
* Every full-size file runs a few rounds on small generated MNIST written in the real on-disk
  format (gzipped IDX), shrunk by overrides, and its personalized models move.
"""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedclock.actors.runtime import Runtime
from fedclock.scenarios.claims import load_claim_set
from fedclock.scenarios.experiment import run_scenario
from fedclock.scenarios.loader import load_suite

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "spfl_plga"
# a small MLP instead of the CNN keeps the schedule tests fast; durations stay in the same windows
FAST = ["stop.versions=12", "evaluation.every=1000", "model.name=mlp", "evaluation.personalized=false"]


def run_quick(name: str, tmp_path: Path, extra: list[str] | None = None) -> pd.DataFrame:
    suite = load_suite(LIBRARY / "table2_plga_quick.yaml", FAST + (extra or []))
    s = next(r for r in suite.runs if r.name == name)
    run_scenario(s, Runtime("inline"), tmp_path)
    return pd.read_parquet(tmp_path / "events.parquet")


@pytest.mark.parametrize("name", ["plga", "perfedavg", "fedavg-sync"])
def test_scripted_stragglers_are_late_one_to_five_rounds_for_every_method(name: str, tmp_path: Path) -> None:
    events = run_quick(name, tmp_path)
    applied = events[events.status == "applied"]
    for client in range(10):
        mine = applied[applied.client == client]
        assert len(mine) >= 1
        want = client + 1 if client < 5 else 0  # clients 0..4 are 1..5 rounds late, every time
        assert set(mine.staleness) == {want}, (client, sorted(mine.staleness))
        assert sorted(mine["round"]) == list(range(0, 12 - want, want + 1))[:len(mine)]


def test_emergent_stragglers_give_the_same_lateness_from_slow_devices(tmp_path: Path) -> None:
    events = run_quick("plga-emergent", tmp_path)
    applied = events[events.status == "applied"]
    for client in range(10):
        want = max(0, client - 4)  # slow devices 5..9: 1..5 windows late
        assert set(applied[applied.client == client].staleness) == {want}


def test_device_mix_has_stale_arrivals_and_lga_taylor_term_acts_on_them(tmp_path: Path) -> None:
    """The *-mix runs draw phone-class devices (GFLOP/s, charged the model's counted FLOPs) and
    aggregate in short windows: with the MLP of the reproduction (its windows: the claim set's
    overrides, 0.15 s) the low-end and mid-range phones miss windows, so arrivals are stale
    (with the 10 s window the file had before, every arrival was punctual and lga-mix equalled
    fedavg-async-mix). On those stale arrivals LGA's Taylor term acts: lga-mix and
    lga-no-taylor-mix (taylor: false) end with different global models, so a different global
    loss; with no stale arrival (a 10 s window) or the term off in both runs this test fails.
    About 3 s of CPU (two runs of 12 windows)."""
    claim_set, _ = load_claim_set("spfl_plga")
    taylor = next(c for c in claim_set.claims if c.id == "t2-mix-taylor")
    windows = [f"{k}={v}" for k, v in taylor.overrides.items() if k.startswith("runs.")]
    stale = []
    losses = []
    for name in ("lga-mix", "lga-no-taylor-mix"):
        events = run_quick(name, tmp_path / name, windows)
        applied = events[events.status == "applied"]
        stale.append(int((applied.staleness > 0).sum()))
        assert stale[-1] >= len(applied) // 4, (name, applied.staleness.value_counts().to_dict())
        assert set(applied[applied.staleness > 0].client) != set(range(10))  # some clients are punctual
        losses.append(float(pd.read_parquet(tmp_path / name / "metrics.parquet").global_loss.iloc[-1]))
    assert stale[0] == stale[1]  # the same schedule: only the Taylor term differs
    assert losses[0] != losses[1], losses


# --------------------------------------------------------------------------- full-size files
def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">I", 0x00000800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def write_mnist(root: Path, n_train: int, n_test: int) -> None:
    """MNIST in its on-disk format (gzipped IDX under <root>/MNIST/raw), learnable: class c is
    a bright 8x8 block at its own place on a noisy background."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 60, size=(n, 28, 28))
        for i, c in enumerate(labels):
            r, q = divmod(int(c), 4)
            images[i, 2 + 8 * r:10 + 8 * r, 1 + 7 * q:8 + 7 * q] = 250
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)


FULL_SIZE = {  # file -> (MNIST run, overrides that shrink it)
    "table1_spfl.yaml": ("mnist-noniid-spfl", ["stop.versions=3"]),
    "table7_spfl_ablation.yaml": ("mnist-noniid-gamma5", ["stop.versions=3"]),
    "table8_spfl_finetune.yaml": ("mnist-noniid-b128-lr0.01-steps10",
                                  ["stop.versions=3", "algorithm.finetune_steps=3"]),
    "table2_plga.yaml": ("mnist-plga", ["stop.versions=6", "algorithm.lr=0.05", "algorithm.local_steps=3"]),
    "table6_fedavg_vs_local.yaml": ("mnist-noniid-local", ["stop.versions=3"]),
}


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_mnist(root, 1200, 100)
    return root


@pytest.mark.parametrize("file", sorted(FULL_SIZE))
def test_full_size_file_runs_and_its_personalized_models_move(file: str, mnist_root: Path, tmp_path: Path) -> None:
    """One MNIST run of each full-size file, shrunk (fewer versions; PLGA: fewer, larger local
    steps), on generated MNIST: the clients' personalized accuracy rises from the initial
    model's (evaluations at version 0 and at the end)."""
    run_name, shrink = FULL_SIZE[file]
    versions = next(int(o.split("=")[1]) for o in shrink if o.startswith("stop.versions="))
    suite = load_suite(LIBRARY / file, [f"dataset.root={mnist_root}", "runtime.backend=inline", "seeds=[0]",
                                        "output.progress=false", f"evaluation.every={versions}", *shrink])
    assert load_suite(LIBRARY / file).seeds == tuple(range(10))  # the paper's ten seeds
    s = next(r for r in suite.runs if r.name == run_name)
    assert s.model.name == "spfl_cnn" and s.dataset.name == "mnist"
    run_scenario(s, Runtime("inline"), tmp_path)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    assert list(metrics.version) == [0, versions]
    first, last = metrics.personal_accuracy_mean
    assert last > first + 0.05, (first, last)
    if s.algorithm.name == "spfl":
        assert len(pd.read_parquet(tmp_path / "diagnostics.parquet")) > 0
