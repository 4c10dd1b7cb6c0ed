"""Codecs for what a client sends: half precision, QSGD quantization, top-k sparsification.

Each codec is a typed configuration (pydantic) that carries its own behaviour: ``encode``
turns a flat float32 vector into the tensors that travel, ``decode`` turns them back into a
float32 vector, and ``encoded_bytes(n)`` is the exact size of the message for a vector of
``n`` values: the sum of the byte sizes of the tensors ``encode`` returns (bit-packed where
a value takes fewer than eight bits), so the clock charges what is actually sent. Sizes
depend only on ``n`` and the settings, never on the values, so every task of a run costs
the same bytes (the clock needs them before the task runs).

* ``fp16``: every value as an IEEE half (2 bytes each).
* ``quantize`` (QSGD; Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient
  SGD via Gradient Quantization and Encoding", NeurIPS 2017, Section 3.1): the vector is cut
  into buckets of ``bucket_size`` values (the paper's "bucketing" with bucket size d; unset:
  one bucket, the whole vector); per bucket the float32 norm ``||v||_2`` is sent and each
  value as ``||v|| * sgn(v_i) * xi_i / s`` with ``s = 2**bits - 1`` levels above zero and the
  level ``xi_i`` drawn by unbiased stochastic rounding of ``s |v_i| / ||v||`` (up with the
  probability of its fractional part), so ``E[Q(v)] = v`` and (Lemma 3.1, per bucket of d
  values) ``E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2``. Bit accounting: a fixed-
  length code of ``1 + bits`` bits per value (sign, then the level 0..s), packed into bytes,
  plus 32 bits per bucket for its norm: ``ceil((bits + 1) n / 8) + 4 ceil(n / d)`` bytes. The
  paper's Elias coding of the levels (Section 3.2) is variable-length; it is not used here
  because the clock needs the size before the values exist.
* ``top_k``: the ``k`` values of largest magnitude (``k`` given, or ``ceil(fraction * n)``),
  sent as float32 values and int32 positions: ``8 k`` bytes (positions are counted as full
  32-bit integers, not ``log2 n`` bits). Ties in magnitude go to the lower position. With
  ``error_feedback`` the client keeps what it did not send and adds it to its next update
  before compressing (Stich, Cordonnier, Jaggi, "Sparsified SGD with Memory", NeurIPS 2018,
  Algorithm 1; Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other
  Gradient Compression Schemes", ICML 2019, Algorithm 2): ``p = delta + e``, send ``C(p)``,
  keep ``e <- p - C(p)``.

Written here rather than taken from a library: PyTorch's DDP communication hooks compress
gradients inside an all-reduce (no message to size, no per-client residual across tasks),
and the bit-exact packed sizes above are what the clock needs.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

Encoded = dict[str, torch.Tensor]
"""A codec's message: named tensors whose byte sizes add up to ``encoded_bytes``."""

FLOAT_BYTES = 4
INDEX_BYTES = 4
"""Bytes of one top-k position (int32)."""
MAX_QUANTIZE_BITS = 15
"""Largest level width of ``quantize`` (a code of sign + level fits in 16 bits)."""


def pack_bits(codes: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width`` low bits of each of ``codes`` (non-negative integers), in order,
    least significant bit first, packed into ``ceil(len * width / 8)`` bytes (uint8)."""
    shifts = torch.arange(width, dtype=torch.int32, device=codes.device)
    bits = ((codes.to(torch.int32).reshape(-1, 1) >> shifts) & 1).to(torch.uint8).reshape(-1)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8, device=codes.device)
    return (bits.reshape(-1, 8) * weights).sum(dim=1, dtype=torch.int32).to(torch.uint8)


def unpack_bits(data: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """The ``count`` codes of ``width`` bits that :func:`pack_bits` packed (int64)."""
    shifts = torch.arange(8, dtype=torch.int32, device=data.device)
    bits = ((data.to(torch.int32).reshape(-1, 1) >> shifts) & 1).reshape(-1)[:count * width]
    weights = torch.tensor([1 << i for i in range(width)], dtype=torch.int64, device=data.device)
    return (bits.reshape(count, width).to(torch.int64) * weights).sum(dim=1)


class _Codec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def keeps_residual(self) -> bool:
        """True when the client keeps what it did not send (``top_k`` with error feedback)."""
        return False

    @property
    def stochastic(self) -> bool:
        """True when ``encode`` draws from its generator."""
        return False


class Fp16(_Codec):
    """Every value as an IEEE half-precision float (2 bytes)."""

    type: Literal["fp16"] = "fp16"

    def encoded_bytes(self, n: int) -> int:
        """Bytes of the message for ``n`` values: ``2 n``."""
        return 2 * n

    def encode(self, x: torch.Tensor, rng: torch.Generator) -> Encoded:
        """``x`` (flat float32) rounded to half precision; draws nothing."""
        return {"fp16": x.to(torch.float16)}

    def decode(self, message: Encoded, n: int) -> torch.Tensor:
        """The half values as float32."""
        return message["fp16"].to(torch.float32)


class Quantize(_Codec):
    """QSGD stochastic quantization to ``bits`` bits per value plus a sign bit (see the module)."""

    type: Literal["quantize"] = "quantize"
    bits: int = Field(ge=1, le=MAX_QUANTIZE_BITS, description="bits of a value's level: s = 2**bits - 1 "
                      "levels above zero (the paper's s); each value also takes one sign bit")
    bucket_size: int | None = Field(default=None, ge=1, description="values per bucket, each with its own "
                                    "float32 norm (the paper's d); unset: one bucket, the whole update")

    @property
    def stochastic(self) -> bool:
        return True

    @property
    def levels(self) -> int:
        """``s = 2**bits - 1``."""
        return (1 << self.bits) - 1

    def buckets(self, n: int) -> int:
        """Buckets of a vector of ``n`` values (one when ``bucket_size`` is unset)."""
        return 1 if self.bucket_size is None else max(1, -(-n // self.bucket_size))

    def encoded_bytes(self, n: int) -> int:
        """``ceil((bits + 1) n / 8)`` bytes of codes plus 4 bytes per bucket norm."""
        return -(-(self.bits + 1) * n // 8) + FLOAT_BYTES * self.buckets(n)

    def _bucketed(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        d = self.bucket_size or max(n, 1)
        pad = self.buckets(n) * d - n
        return torch.cat([x, x.new_zeros(pad)]).reshape(-1, d) if pad else x.reshape(-1, d)

    def encode(self, x: torch.Tensor, rng: torch.Generator) -> Encoded:
        """Norms and packed codes; one uniform draw per value from ``rng`` (a CPU generator:
        the draws are the same on every device)."""
        n = x.numel()
        v = self._bucketed(x.to(torch.float32))
        norms = torch.linalg.vector_norm(v, dim=1)
        safe = torch.where(norms > 0, norms, torch.ones_like(norms))
        scaled = (v.abs() / safe.unsqueeze(1) * self.levels).clamp(max=float(self.levels))
        low = scaled.floor()
        u = torch.rand(v.shape, generator=rng, dtype=torch.float32).to(v.device)
        level = (low + (u < scaled - low).to(low.dtype)).to(torch.int32)
        codes = ((v < 0).to(torch.int32) << self.bits) | level
        return {"codes": pack_bits(codes.reshape(-1)[:n], self.bits + 1), "norms": norms}

    def decode(self, message: Encoded, n: int) -> torch.Tensor:
        """``norm * sign * level / s`` per value."""
        codes = unpack_bits(message["codes"], self.bits + 1, n)
        level = (codes & self.levels).to(torch.float32)
        sign = 1.0 - 2.0 * (codes >> self.bits).to(torch.float32)
        norms = message["norms"].to(torch.float32)
        d = self.bucket_size or max(n, 1)
        per_value = norms.repeat_interleave(d)[:n]
        return per_value * sign * level / self.levels


class TopK(_Codec):
    """The ``k`` largest-magnitude values and their positions (see the module)."""

    type: Literal["top_k"] = "top_k"
    k: int | None = Field(default=None, ge=1, description="values sent per update")
    fraction: float | None = Field(default=None, gt=0, le=1, description="share of the update's values sent: "
                                   "k = ceil(fraction * n)")
    error_feedback: bool = Field(default=True, description="keep what was not sent on the client and add it "
                                 "to its next update (Stich et al. 2018)")

    def keeps_residual(self) -> bool:
        return self.error_feedback

    @model_validator(mode="after")
    def _one_size(self) -> "TopK":
        if (self.k is None) == (self.fraction is None):
            raise ValueError("give exactly one of k and fraction")
        return self

    def kept(self, n: int) -> int:
        """Values sent for a vector of ``n`` (``k``, or ``ceil(fraction * n)``, at least 1)."""
        k = self.k if self.k is not None else math.ceil(float(self.fraction or 0.0) * n)
        return max(1, k)

    def size_problem(self, n: int) -> str | None:
        """A one-line error when ``k`` exceeds an update of ``n`` values."""
        if self.k is not None and self.k > n:
            return f"k is {self.k} but the update has {n} values (allowed: 1..{n})"
        if n >= 1 << 31:
            return f"the update has {n} values; positions are int32 (at most {(1 << 31) - 1})"
        return None

    def encoded_bytes(self, n: int) -> int:
        """``8 k``: k float32 values and k int32 positions."""
        return (FLOAT_BYTES + INDEX_BYTES) * self.kept(n)

    def encode(self, x: torch.Tensor, rng: torch.Generator) -> Encoded:
        """Positions (ascending) and values of the ``k`` largest magnitudes; draws nothing."""
        k = self.kept(x.numel())
        order = torch.argsort(x.abs(), descending=True, stable=True)[:k]
        index = order.sort().values
        return {"index": index.to(torch.int32), "values": x[index].to(torch.float32)}

    def decode(self, message: Encoded, n: int) -> torch.Tensor:
        """Zeros with the sent values at their positions."""
        values = message["values"].to(torch.float32)
        out = torch.zeros(n, dtype=torch.float32, device=values.device)
        out[message["index"].to(torch.int64)] = values
        return out


Codec = Annotated[Union[Fp16, Quantize, TopK], Field(discriminator="type")]
"""One of the codecs, chosen by ``type``."""
