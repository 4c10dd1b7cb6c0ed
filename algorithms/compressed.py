"""Compressed links: an algorithm whose upload (and download) travel through a codec.

``upload.compression`` (:class:`UploadConfig`) encodes the client's update on the client and
decodes it on the server before the algorithm aggregates it, so the server aggregates what
a real system would receive and accuracy pays what the codec loses. It applies to
algorithms that declare ``upload_is_delta`` (their upload is ``{"delta": w_local -
w_received}``, the change of the whole flat model: FedAvg, FedProx, FedSAM, FedNova,
FedBuff); the loader refuses it for any other (an upload of the model itself, as FedAsync's,
would need the server to keep every version a client may have started from; uploads of
several kinds of tensors, as SCAFFOLD's, are not covered).

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
the weights in half precision and the client trains from (and computes its delta against)
the rounded weights; the download is charged 2 bytes per parameter. Quantizing or
sparsifying the model itself is refused: a top-k of the weights drops most of the model,
and error feedback on a broadcast needs the server to keep, per client, what that client
holds, while a client of cross-device FL may come back after any number of versions.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedclock.algorithms.base import Algorithm, Arrival, ClientData, ClientResult, EvalResult, ServerState, \
    Tensors
from fedclock.algorithms.compression import Codec, Fp16

RESIDUAL = "upload_residual"
"""Client-state key of the error-feedback residual."""
DELTA = "delta"
"""Upload key of the update the codec encodes."""
_PREFIX = DELTA + "."

A = TypeVar("A", bound=Algorithm)

if TYPE_CHECKING:  # the mixin's super() is the algorithm's class (see with_links): a concrete one
    class _Mixin(Algorithm[Any]):
        def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                          rng: torch.Generator) -> ClientResult:
            raise NotImplementedError

        def server_receive(self, state: ServerState, arrivals: list[Arrival],
                           rng: torch.Generator) -> tuple[ServerState, bool]:
            raise NotImplementedError
else:
    _Mixin = object


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
    if not cls.upload_is_delta:
        return (f"{field}: algorithm {cls.name!r} does not upload a model delta (allowed with algorithms "
                f"that declare upload_is_delta, e.g. fedavg, fedprox, fedsam, fednova, fedbuff)")
    if vectorize > 1:
        return f"{field}: clients run one at a time with compression (runtime.vectorize must be 1)"
    return None


class CompressedLinks(_Mixin):
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
        full: int = super().download_bytes()
        if self.download_codec is None:
            return full
        n = self._num_params()
        return full - 4 * n + self.download_codec.encoded_bytes(n)

    def upload_bytes(self) -> int:
        full: int = super().upload_bytes()
        if self.upload_codec is None:
            return full
        n = self._num_params()
        return full - 4 * n + self.upload_codec.encoded_bytes(n)

    def _num_params(self) -> int:
        return int(self.model_factory.num_params)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        """The algorithm's update from the decoded payload, its delta encoded (see the module)."""
        residual = None if client_state is None else client_state.get(RESIDUAL)
        result: ClientResult = super().client_update(
            self._received(payload), own_state(client_state), data, rng)
        codec = self.upload_codec
        if codec is None:
            return result
        upload = dict(result.upload)
        delta = upload.pop(DELTA)
        n = self._num_params()
        if delta.numel() != n:
            raise ValueError(f"upload.compression: the upload's delta has {delta.numel()} values, the model {n}")
        update = delta.reshape(-1).to(torch.float32)
        if residual is not None:
            update = update + residual.to(update)
        message = codec.encode(update, rng)
        state = result.state
        if codec.keeps_residual():
            state = {**(state or {}), RESIDUAL: update - codec.decode(message, n)}
        upload.update({_PREFIX + k: v for k, v in message.items()})
        return dataclasses.replace(result, upload=upload, state=state)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        """The algorithm's rule on the decoded arrivals."""
        if self.upload_codec is not None:
            arrivals = [dataclasses.replace(a, upload=self.decoded(a.upload)) for a in arrivals]
        out: tuple[ServerState, bool] = super().server_receive(state, arrivals, rng)
        return out

    def decoded(self, upload: Tensors) -> Tensors:
        """An upload with its encoded ``"delta.*"`` message replaced by the decoded ``"delta"``."""
        assert self.upload_codec is not None
        message = {k[len(_PREFIX):]: v for k, v in upload.items() if k.startswith(_PREFIX)}
        rest = {k: v for k, v in upload.items() if not k.startswith(_PREFIX)}
        return {**rest, DELTA: self.upload_codec.decode(message, self._num_params())}

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
                            "stateless_clients": cls.stateless_clients, "upload_is_delta": True}
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
