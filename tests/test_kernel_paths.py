"""The kernel paths ``.ci/run`` runs the numerics tests under (tests/kernel_paths.py)."""
from __future__ import annotations

from tests.kernel_paths import lower_paths


def test_lower_paths_are_the_ones_below_this_machines() -> None:
    assert lower_paths("AVX512") == ["default", "avx2"]
    assert lower_paths("AVX2") == ["default"]
    assert lower_paths("DEFAULT") == [] and lower_paths("default") == []
    assert lower_paths("SVE256") == ["default"]  # another processor: its plain path
