"""Compressed links: an algorithm whose upload (and download) travel through a codec.

``upload.compression`` (:class:`UploadConfig`) encodes the client's update on the client and
decodes it on the server before the algorithm aggregates it, so the server aggregates what
a real system would receive and accuracy pays what the codec loses. It applies to
algorithms that declare ``upload_is_delta`` (their upload is ``{"delta": w_local -
w_received}``, the change of the whole flat model: FedAvg, FedProx, FedSAM, FedNova,
FedBuff) or ``upload_is_model`` (their upload is the trained model itself, ``{"weights":
w_local}``: FedAsync, FedAvg-async, pFedMe); the loader refuses it for any other (uploads of
several kinds of tensors, as SCAFFOLD's, are not covered).

**Model uploads** are encoded as their difference from the model the client received,
``w_local - w_received`` (a model itself does not survive a top-k or a coarse quantizer; its
change over one task does, as a delta does), and decoded on the server by adding the decoded
difference back to ``w_received``. The server knows ``w_received``: it is the model it sent
at the task's ``version_dispatched`` (after ``download.compression``, the rounded one the
client decoded). The simulator hands that copy to the server with the arrival, under the
upload key ``"weights.received"``, instead of keeping every version a task in flight may
have started from; the copy is *not* charged (``upload_bytes`` counts only the codec's
message, exactly as for a delta), and the decoded model is the one a server keeping those
versions would compute. With ``fp16`` the message is 2 bytes a parameter, as for a delta.

How it runs (:func:`with_links`, a subclass of the algorithm's own class, so every other hook
and attribute is the algorithm's):

* client (``client_update``): the algorithm's own update runs unchanged; its ``"delta"``
  (plus, with error feedback, the residual kept from the client's previous task) is encoded
  with the task's seeded generator ``rng`` (after the local work's draws), and the message
  tensors travel as ``"delta.<name>"``. With error feedback the client's state gains
  ``"upload_residual"`` (what was not sent), kept by the runtime between tasks like any
  other client state and so saved in checkpoints; the algorithm itself never sees the key.
  A client cannot know that the server discarded its upload (a straggler dropped, a task
  timed out): its residual holds only what it did not send, as on a real device.
* server (``server_receive``): each arrival's message is decoded back to a float32
  ``"delta"`` before the algorithm's own rule runs.
* costs: ``upload_bytes`` is the codec's exact message size for the model's parameter
  count (:mod:`fedclock.algorithms.compression`), so the clock's upload time shrinks with it.

``download.compression`` (:class:`DownloadConfig`) accepts ``fp16`` only: the server sends
the weights in half precision and the client trains from (and computes its delta, or its
model upload's difference, against) the rounded weights; the download is charged 2 bytes per
parameter. That is sound for both kinds of upload: what the client trains from is exactly
what it decoded, and the server's reference for a model upload is the same rounded model.
Quantizing or sparsifying the model itself is refused: a top-k of the weights drops most of
the model, and sending instead the difference from the client's last model (the sound way
to compress a download) needs the server to keep, per client, what that client holds, while
a client of cross-device FL may come back after any number of versions or never.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedclock.algorithms.layer_mixin import AlgorithmLayer
from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ClientResult, EvalResult, ServerState, \
    Tensors
from fedclock.algorithms.compression import Codec, Fp16

RESIDUAL = "upload_residual"
"""Client-state key of the error-feedback residual."""
DELTA = "delta"
"""Upload key of the update the codec encodes (``upload_is_delta``)."""
MODEL = "weights"
"""Upload key of the model whose difference from the received one the codec encodes
(``upload_is_model``)."""
RECEIVED = "received"
"""Suffix of the uncharged upload key ``"weights.received"``: the model the client received,
the server's own copy (see the module's docstring)."""

A = TypeVar("A", bound=Algorithm)



class UploadConfig(BaseModel):
    """The ``upload:`` section of a scenario: what a client's update goes through."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compression: Codec | None = Field(default=None, description="codec of the update: fp16, quantize (QSGD) "
                                      "or top_k (with error_feedback); unset: float32 as computed")


class DownloadConfig(BaseModel):
    """The ``download:`` section of a scenario: what the model sent to a client goes through."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compression: Fp16 | None = Field(default=None, description="fp16 only (see fedclock.algorithms.compressed)")


def links_problem(cls: type[Algorithm], upload: UploadConfig, download: DownloadConfig,
                  vectorize: int) -> str | None:
    """A one-line error (starting with the field) when ``cls`` cannot run with these links."""
    if upload.compression is None and download.compression is None:
        return None
    field = "upload.compression" if upload.compression is not None else "download.compression"
    if not (cls.upload_is_delta or cls.upload_is_model):
        return (f"{field}: algorithm {cls.name!r} uploads neither a model delta nor the model (allowed with "
                f"algorithms that declare upload_is_delta or upload_is_model, e.g. fedavg, fedprox, fedsam, fednova, "
                f"fedbuff, fedasync, fedavg_async, pfedme)")
    if vectorize > 1:
        return f"{field}: clients run one at a time with compression (runtime.vectorize must be 1)"
    return None


class CompressedLinks(AlgorithmLayer):
    """Mixin placed before an algorithm's class by :func:`with_links` (see the module)."""

    upload_codec: Codec | None = None
    download_codec: Fp16 | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as (algorithm class, params, model factory, settings): the class made by
        :func:`with_links` is rebuilt on the other side, never looked up by name."""
        inner = type(self).__mro__[2]
        return _rebuild, (inner, self.params, self.model_factory, self.num_clients, self.upload_codec,
                          self.download_codec, self.stateless_clients)

    def _received(self, payload: Tensors) -> Tensors:
        """The payload as the client decodes it (fp16 weights back to float32)."""
        if self.download_codec is None:
            return payload
        return {**payload, "weights": self.download_codec.decode({"fp16": payload["weights"]}, 0)}

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        payload: Tensors = super().payload_for(state, client)
        if self.download_codec is None:
            return payload
        return {**payload, "weights": self.download_codec.encode(payload["weights"], torch.Generator())["fp16"]}

    def download_bytes(self) -> int:
        return self._coded_bytes(super().download_bytes(), self.download_codec)

    def upload_bytes(self) -> int:
        return self._coded_bytes(super().upload_bytes(), self.upload_codec)

    def _coded_bytes(self, full: int, codec: Codec | None) -> int:
        """``full`` bytes with the model's float32 vector replaced by its encoding under ``codec``
        (unchanged without one)."""
        if codec is None:
            return full
        n = self._num_params()
        return int(full - 4 * n + codec.encoded_bytes(n))

    def _num_params(self) -> int:
        return int(self.model_factory.num_params)

    @property
    def _key(self) -> str:
        """The upload key the codec encodes: ``"delta"``, or ``"weights"`` for a model upload."""
        return DELTA if type(self).upload_is_delta else MODEL

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        """The algorithm's update from the decoded payload, its delta encoded (see the module)."""
        residual = None if client_state is None else client_state.get(RESIDUAL)
        received = self._received(payload)
        result: ClientResult = super().client_update(received, own_state(client_state), data, rng)
        codec = self.upload_codec
        if codec is None:
            return result
        upload = dict(result.upload)
        key = self._key
        sent = upload.pop(key)
        n = self._num_params()
        if sent.numel() != n:
            raise ValueError(f"upload.compression: the upload's {key} has {sent.numel()} values, the model {n}")
        update = sent.reshape(-1).to(torch.float32)
        if key == MODEL:  # a model upload: its difference from the model received
            reference = received[MODEL].reshape(-1).to(update)
            update = update - reference
            upload[f"{MODEL}.{RECEIVED}"] = reference
        if residual is not None:
            update = update + residual.to(update)
        message = codec.encode(update, rng)
        state = result.state
        if codec.keeps_residual():
            state = {**(state or {}), RESIDUAL: update - codec.decode(message, n)}
        upload.update({f"{key}.{k}": v for k, v in message.items()})
        return dataclasses.replace(result, upload=upload, state=state)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        """The algorithm's rule on the decoded arrivals."""
        if self.upload_codec is not None:
            arrivals = [dataclasses.replace(a, upload=self.decoded(a.upload)) for a in arrivals]
        out: tuple[ServerState, bool] = super().server_receive(state, arrivals, rng)
        return out

    def decoded(self, upload: Tensors) -> Tensors:
        """An upload with its encoded ``"delta.*"`` message replaced by the decoded
        ``"delta"``; for a model upload, its ``"weights.*"`` message by the received model
        plus the decoded difference."""
        assert self.upload_codec is not None
        key = self._key
        prefix = key + "."
        reference = upload.get(f"{MODEL}.{RECEIVED}") if key == MODEL else None
        message = {k[len(prefix):]: v for k, v in upload.items() if k.startswith(prefix) and k != f"{MODEL}.{RECEIVED}"}
        rest = {k: v for k, v in upload.items() if not k.startswith(prefix)}
        value = self.upload_codec.decode(message, self._num_params())
        if reference is not None:
            value = reference.to(value) + value
        return {**rest, key: value}

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        out: EvalResult = super().evaluate_client(
            self._received(payload), own_state(client_state), data, batch_size)
        return out


def own_state(client_state: Tensors | None) -> Tensors | None:
    """A client's state without the residual: what the algorithm itself kept (None if nothing)."""
    if client_state is None or RESIDUAL not in client_state:
        return client_state
    rest = {k: v for k, v in client_state.items() if k != RESIDUAL}
    return rest or None


@lru_cache(maxsize=None)
def _linked_class(cls: type[Algorithm]) -> type[Algorithm]:
    """``cls`` with :class:`CompressedLinks` in front (one class per algorithm class)."""
    body: dict[str, Any] = {"__doc__": cls.__doc__, "__qualname__": f"CompressedLinks[{cls.__qualname__}]",
                            "vectorizable": False, "objectives": cls.objectives,
                            "stateless_clients": cls.stateless_clients, "upload_is_delta": cls.upload_is_delta,
                            "upload_is_model": cls.upload_is_model}
    return type(cls.__name__, (CompressedLinks, cls), body)


def _rebuild(cls: type[Algorithm], params: Any, factory: Any, num_clients: int | None, upload: Codec | None,
             download: Fp16 | None, stateless: bool) -> Algorithm:
    """The unpickled side of :meth:`CompressedLinks.__reduce__`."""
    linked: Any = _linked_class(cls)(params, factory)
    linked.num_clients, linked.upload_codec, linked.download_codec = num_clients, upload, download
    linked.stateless_clients = stateless
    out: Algorithm = linked
    return out


def with_links(algorithm: A, upload: UploadConfig, download: DownloadConfig) -> A:
    """``algorithm`` itself when neither link is compressed; else an instance of its class with
    :class:`CompressedLinks` in front, with the same params, model factory and population
    size. Error feedback keeps client state, so such a run's clients are not stateless."""
    if upload.compression is None and download.compression is None:
        return algorithm
    linked: Any = _linked_class(type(algorithm))(algorithm.params, algorithm.model_factory)
    linked.num_clients = algorithm.num_clients
    linked.server_optimizer = algorithm.server_optimizer
    linked.upload_codec = upload.compression
    linked.download_codec = download.compression
    codec = upload.compression
    linked.stateless_clients = algorithm.stateless_clients and not (codec is not None and codec.keeps_residual())
    out: A = linked
    return out
