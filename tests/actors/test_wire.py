"""Tensors on the wire: what unpickles is an ordinary owned tensor equal to what was sent."""
from __future__ import annotations

import pickle

import torch

from fedclock.actors.wire import WireTensor, to_wire
from fedclock.algorithms.base import ServerState


def roundtrip(value: object) -> object:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(data, buffers=[memoryview(b).toreadonly() for b in buffers])  # read-only, like Ray's store


def test_tensors_come_back_equal_owned_and_writable() -> None:
    flat = torch.randn(1000, dtype=torch.float64)
    value = {"delta": flat[10:20], "t": flat.view(10, 100).t(), "i": torch.arange(5), "b": torch.ones(3).bfloat16(),
             "n": 3, "pair": (torch.zeros(2, dtype=torch.bool), "x")}
    wired = to_wire(value)
    assert isinstance(wired["delta"], WireTensor) and isinstance(wired["b"], torch.Tensor)  # bfloat16: no numpy
    out = roundtrip(wired)
    assert out["n"] == 3 and out["pair"][1] == "x"
    for key in ("delta", "t", "i", "b"):
        assert type(out[key]) is torch.Tensor and out[key].dtype == value[key].dtype
        assert torch.equal(out[key], value[key]) and out[key].stride() == value[key].stride()
    sent = flat.clone()
    out["delta"].fill_(7.0)  # writable, and not the sender's memory
    assert torch.equal(flat, sent) and bool((out["delta"] == 7.0).all())
    assert torch.equal(out["pair"][0], value["pair"][0])


def test_server_state_tensors_travel() -> None:
    state = ServerState(tensors={"weights": torch.randn(7)}, version=4, extra={"k": 1})
    wired = to_wire(state)
    assert isinstance(wired.tensors["weights"], WireTensor) and wired.version == 4
    out = roundtrip(wired)
    assert isinstance(out, ServerState) and torch.equal(out.tensors["weights"], state.tensors["weights"])
    assert out.extra == {"k": 1}
