"""`fedclock plot`: a tiny inline suite is run, plotted, and the PNGs are opened and checked."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from fedclock.scenarios.cli import main
from fedclock.scenarios.plots import (COMM_COLOR, OTHER_COLORS, STATUS_COLORS, accuracy_figure, seed_curve,
                                      timeline_figure)
from fedclock.scenarios.rundirs import RunResults, find_runs

SUITE = {
    "name": "plotsuite", "seed": 3,
    "dataset": {"name": "digits", "max_train_samples": 400, "partition": {"type": "dirichlet_by_class", "alpha": 1.0}},
    "model": {"name": "mlp", "hidden": [8]},
    "population": {"num_clients": 5, "compute_unit": "samples_per_s",
                   "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200}}},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 16},
    "stop": {"virtual_time_s": 12},
    "runtime": {"backend": "inline"},
    "output": {"progress": False},
    "runs": [
        {"name": "sync-deadline", "mode": {"type": "sync", "deadline_s": 1.0}},
        {"name": "fedasync", "algorithm": {"name": "fedasync", "lr": 0.1, "batch_size": 16},
         "mode": {"type": "async", "concurrency": 3}},
    ],
}


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])


def _has_color(pixels: np.ndarray, hex_color: str, tol: int = 6, at_least: int = 50) -> bool:
    return int((np.abs(pixels.astype(int) - _rgb(hex_color)).max(axis=-1) <= tol).sum()) >= at_least


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        assert img.format == "PNG"
        return np.asarray(img.convert("RGB"))


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plots")
    scenario = root / "suite.yaml"
    scenario.write_text(yaml.safe_dump(SUITE))
    out = root / "results"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    return out


def test_plot_writes_readable_pngs(suite_dir: Path) -> None:
    assert main(["plot", str(suite_dir)]) == 0
    plots = suite_dir / "plots"
    expected = {"accuracy_vs_time.png", "accuracy_vs_version.png", "timeline_sync-deadline.png",
                "timeline_fedasync.png", "staleness.png", "bytes_per_client.png", "participation.png"}
    assert {p.name for p in plots.iterdir()} == expected
    for name in expected:
        pixels = _pixels(plots / name)
        height, width, _ = pixels.shape
        assert width >= 600 and height >= 300, name
        assert pixels.std() > 20, f"{name} looks blank"
        non_white = (pixels < 240).any(axis=-1).mean()
        assert non_white > 0.03, f"{name}: only {non_white:.1%} of pixels drawn"
    # the timelines show what happened: drops under the deadline, stale uploads in async
    deadline = _pixels(plots / "timeline_sync-deadline.png")
    assert _has_color(deadline, STATUS_COLORS["dropped"]) and _has_color(deadline, STATUS_COLORS["fresh"])
    assert _has_color(deadline, COMM_COLOR, at_least=20)
    asynchronous = _pixels(plots / "timeline_fedasync.png")
    assert _has_color(asynchronous, STATUS_COLORS["stale"]) and not _has_color(asynchronous, STATUS_COLORS["dropped"])


def test_plot_single_run_and_out(suite_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(suite_dir / "fedasync"), "--out", str(tmp_path / "p"), "--max-clients", "2"]) == 0
    assert "6 figure(s) of 1 run(s)" in capsys.readouterr().out
    assert (tmp_path / "p" / "timeline_fedasync.png").is_file()
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_timeline_renders_any_status_and_cuts_phases_at_the_end() -> None:
    events = pd.DataFrame({
        "client": [0, 0, 1, 2], "dispatched_at": [0.0, 4.0, 0.0, 1.0], "finished_at": [3.0, 6.0, 2.0, 10.0],
        "download_s": [1.0, 1.0, 0.5, 1.0], "compute_s": [1.5, 3.0, 1.0, 7.0], "upload_s": [0.5, 0.5, 0.5, 1.0],
        "staleness": pd.array([0, None, 2, None], dtype="Int64"), "status": ["applied", "lost", "applied", "dropped"],
    })
    run = RunResults(name="r", path=Path("."), metrics=pd.DataFrame(), events=events, clients=None, resolved=None)
    fig = timeline_figure(run)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["communicating (download / upload)", "computing, applied fresh", "computing, applied stale",
                      "computing, dropped", "computing, lost"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["client 0", "client 1", "client 2"]

    def x_spans(hex_color: str) -> list[tuple[float, float]]:
        target = tuple(_rgb(hex_color) / 255)
        out = []
        for coll in ax.collections:
            if tuple(np.round(coll.get_facecolor()[0][:3], 4)) == tuple(np.round(target, 4)):
                out += [(float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max())) for p in coll.get_paths()]
        return sorted(out)

    # the 'lost' task (client 0, from 4.0) ended at 6.0: 1 s download, then compute cut from 3 s to 1 s
    assert x_spans(OTHER_COLORS[0]) == [(5.0, 6.0)]
    assert x_spans(STATUS_COLORS["dropped"]) == [(2.0, 9.0)]
    assert x_spans(STATUS_COLORS["stale"]) == [(0.5, 1.5)]
    comm = x_spans(COMM_COLOR)
    assert (4.0, 5.0) in comm and (9.0, 10.0) in comm and (2.5, 3.0) in comm and (6.0, 6.0) in comm
    assert ax.get_xlim() == (0.0, 10.0)


def test_many_clients_keep_figures_bounded(tmp_path: Path) -> None:
    from fedclock.scenarios.plots import plot_runs

    n = 400
    rng = np.random.default_rng(0)
    start = rng.uniform(0, 100, n * 3)
    events = pd.DataFrame({
        "client": np.tile(np.arange(n), 3), "dispatched_at": start, "finished_at": start + 5.0,
        "download_s": 1.0, "compute_s": 3.0, "upload_s": 1.0, "status": "applied",
        "staleness": pd.array(rng.integers(0, 3000, n * 3), dtype="Int64"),
        "bytes_down": 10 ** 6, "bytes_up": rng.integers(0, 10 ** 6, n * 3)})
    metrics = pd.DataFrame({"virtual_time": [0.0, 50.0, 100.0], "version": [0, 10, 20],
                            "global_accuracy": [0.1, 0.5, 0.7]})
    run = RunResults(name="big", path=tmp_path, metrics=metrics, events=events, clients=None, resolved=None)
    for path in plot_runs([run], tmp_path / "plots", max_clients=40):
        with Image.open(path) as img:
            assert img.width <= 2400 and img.height <= 2400, path.name
        assert _pixels(path).std() > 20, path.name


def test_seed_curve_mean_and_std_by_hand() -> None:
    """Against the version: versions every seed has; against time: each seed holds its latest
    accuracy until its next evaluation, on the union of times up to the earliest last one."""
    a = pd.DataFrame({"virtual_time": [0.0, 2.0, 5.0], "version": [0, 1, 2], "global_accuracy": [0.1, 0.5, 0.7]})
    b = pd.DataFrame({"virtual_time": [0.0, 3.0, 4.0, 6.0], "version": [0, 1, 2, 3],
                      "global_accuracy": [0.1, 0.3, 0.9, 0.95]})
    xs, mean, std = seed_curve([a, b], "version", "global_accuracy")
    assert xs.tolist() == [0, 1, 2]
    assert np.allclose(mean, [0.1, 0.4, 0.8]) and np.allclose(std, [0.0, np.sqrt(0.02), np.sqrt(0.02)])
    xs, mean, std = seed_curve([a, b], "virtual_time", "global_accuracy")
    assert xs.tolist() == [0.0, 2.0, 3.0, 4.0, 5.0]  # up to a's last evaluation
    assert np.allclose(mean, [0.1, (0.5 + 0.1) / 2, 0.4, (0.5 + 0.9) / 2, 0.8])
    assert np.allclose(std[1], np.std([0.5, 0.1], ddof=1))
    _, one_mean, one_std = seed_curve([a], "virtual_time", "global_accuracy")
    assert one_mean.tolist() == [0.1, 0.5, 0.7] and not one_std.any()


def test_seeds_are_drawn_as_a_band(tmp_path: Path) -> None:
    """Two seeds of run x: the accuracy figure shows their mean line and a translucent band,
    and per_client results get a figure of their own."""
    for seed, acc in ((0, [0.1, 0.3, 0.5]), (1, [0.1, 0.7, 0.9])):
        folder = tmp_path / "x" / f"seed_{seed}"
        folder.mkdir(parents=True)
        pd.DataFrame({"virtual_time": [0.0, 1.0, 2.0], "version": [0, 1, 2], "global_accuracy": acc}
                     ).to_parquet(folder / "metrics.parquet")
        pd.DataFrame({"client": [0, 1] * 3, "version": [0, 0, 1, 1, 2, 2], "accuracy": [0.1, 0.2] * 3}
                     ).to_parquet(folder / "client_metrics.parquet")
        (folder / "scenario.resolved.yaml").write_text(yaml.safe_dump({"name": "x", "seed": seed}))
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "client_accuracy_x_seed_0.png").is_file()
    fig = accuracy_figure(find_runs([tmp_path]), "version", "server version")
    ax = fig.axes[0]
    assert len(ax.lines) == 1 and np.allclose(ax.lines[0].get_ydata(), [0.1, 0.5, 0.7])
    band = ax.collections[0].get_paths()[0].vertices
    assert np.isclose(band[:, 1].max(), 0.7 + np.std([0.5, 0.9], ddof=1))
    assert "mean ± std of 2 seeds" in ax.get_legend().get_texts()[0].get_text()
