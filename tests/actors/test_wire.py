"""Tensors on the wire: what unpickles is an ordinary owned tensor equal to what was sent."""
from __future__ import annotations

import pickle

import torch

from fedclock.actors.wire import HeldTensor, WireTensor, from_held, to_held, to_wire
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


def test_held_tensors_unpickle_as_views_and_copy_out_equal() -> None:
    """A group's uploads travel :func:`to_held`: unpickled they still hold the (read-only)
    received buffer, and :func:`from_held` copies out owned, writable tensors equal to the
    sent ones, as :class:`WireTensor` would give them."""
    flat = torch.randn(100, dtype=torch.float64)
    uploads = [{"delta": flat[:10], "t": flat.view(10, 10).t(), "n": 2}, {"b": torch.ones(2).bfloat16()}]
    out = roundtrip(to_held(uploads))
    assert isinstance(out[0]["delta"], HeldTensor) and not out[0]["delta"].array.flags.writeable
    owned = from_held(out[0])
    for key in ("delta", "t"):
        assert type(owned[key]) is torch.Tensor and torch.equal(owned[key], uploads[0][key])
        assert owned[key].stride() == uploads[0][key].stride()
    owned["delta"].fill_(3.0)  # writable, its own memory
    assert torch.equal(out[0]["delta"].tensor(), flat[:10]) and owned["n"] == 2
    assert isinstance(out[1]["b"], torch.Tensor) and from_held(out[1])["b"].dtype == torch.bfloat16
