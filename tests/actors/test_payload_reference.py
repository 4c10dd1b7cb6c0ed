"""Payloads travel to Ray executors by reference and are unpickled once per reference."""
from __future__ import annotations

from typing import Any

import pytest
import torch


def test_payload_by_reference_is_fetched_once_per_reference(ray_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor unpickles a payload sent :class:`ByReference` once while the reference stays
    the same, hands the same object to every task, and fetches again for a new reference."""
    import ray

    from fedclock.actors.ray_actors import RayClientExecutor
    from fedclock.actors.transport import ByReference

    fetched: list[Any] = []
    real_get = ray.get
    monkeypatch.setattr(ray, "get", lambda ref: fetched.append(ref) or real_get(ref))
    executor = RayClientExecutor()
    first, second = ray.put({"weights": torch.arange(3.0)}), ray.put({"weights": torch.ones(3)})
    values = [executor._shared(ByReference(r)) for r in (first, first, first, second, second)]
    assert fetched == [first, second]
    assert values[0] is values[1] is values[2] and torch.equal(values[3]["weights"], torch.ones(3))
    assert executor._shared({"weights": 1}) == {"weights": 1}  # a value passes as it is
