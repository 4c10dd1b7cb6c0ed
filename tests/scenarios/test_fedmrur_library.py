"""The shipped FedMRUR scenario files load and validate; the quick comparison runs the eight methods."""
from __future__ import annotations

from pathlib import Path

import pytest

from fedclock.scenarios.loader import load_suite

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "fedmrur"
FILES = sorted(LIBRARY.glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_shipped_file_validates(path: Path) -> None:
    suite = load_suite(path)
    assert suite.runs and path.read_text().startswith("# FedMRUR paper")


def test_quick_runs_the_eight_methods_and_paper_setups_match_the_issue() -> None:
    quick = load_suite(LIBRARY / "quick.yaml")
    assert [r.algorithm.name for r in quick.runs] == ["fedavg", "fedprox", "scaffold", "fedcm", "fedsam", "mofedsam",
                                                       "fedexp", "fedmrur"]
    tiny = load_suite(LIBRARY / "tinyimagenet_path40.yaml").runs[0]
    assert (tiny.population.num_clients, tiny.mode.cohort_fraction, tiny.algorithm.params.batch_size,
            tiny.algorithm.params.local_epochs) == (500, 0.02, 20, 2)
    cifar = load_suite(LIBRARY / "cifar100_dir03.yaml").runs[-1]
    p = cifar.algorithm.params
    assert (cifar.population.num_clients, cifar.mode.cohort_fraction, p.batch_size, p.local_epochs, p.lr, p.lr_decay,
            p.weight_decay, p.rho, p.alpha, p.gamma, p.sigma, p.beta) == (200, 0.05, 50, 3, 0.1, 0.998, 5e-4, 0.5,
                                                                        0.1, 0.005, 10000, 1)
    assert cifar.model.name == "resnet18_gn" and cifar.dataset.partition.alpha == 0.3
