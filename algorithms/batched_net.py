"""Explicit forward and backward passes of K clients of one layer-chain architecture at once.

:class:`BatchedNet` runs a :class:`~fedclock.algorithms.models.FedModel` whose body and head
are chains of ``Flatten``, ``Linear``, ``ReLU``, ``Conv2d`` (stride 1, no dilation or groups,
zero padding), ``MaxPool2d`` (kernel = stride, no padding) and dropout (``nn.Dropout``,
``Dropout1d/2d/3d``: the caller gives each step's noise, drawn per client) layers, i.e. the
MLP, logistic regression and the CNNs (``cnn5``, ``spfl_cnn``, ``pfl_cnn``), for K clients with stacked
weights, without autograd and without vmap (what :func:`~fedclock.algorithms.vectorized.
vectorized_local_sgd` uses on a CPU; measured in ``benchmarks/RESULTS.md``):

* linear layers are batched matrix products over the K clients (``torch.baddbmm`` forward,
  ``torch.bmm`` input gradient), on weights kept per parameter as contiguous ``[K, ...]``
  tensors in the flat vector's own element order (no layout copies in or out);
* convolutions of the K clients are one grouped convolution (``groups = K``) on activations
  kept in the grouped layout ``[B, K*C, H, W]`` in channels-last memory format from the
  input to the flatten, with the convolution's own backward kernel
  (``aten.convolution_backward``) for input, weight and bias gradients (an im2col +
  ``bmm`` formulation was tried and was slower: its patch and patch-gradient tensors are
  25 times the activations);
* the rest of the backward pass is written out: cross-entropy, ReLU (``threshold_backward``),
  max-pool with the forward's indices, flatten; a ReLU followed by a max-pool runs after it
  (same values and gradients, on a quarter of the elements);
* work tensors are allocated once per call and reused by every step (fresh ``[K, ...]``
  tensors of many megabytes cost page faults every step);
* with plain SGD (no momentum, weight decay, clipping or proximal term, every client active,
  one learning rate), the update is fused into the backward pass: a linear layer's
  ``W <- W - lr g^T x`` is one in-place ``baddbmm`` after its input gradient is taken, so
  the weight gradient is never stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class _Linear:
    weight: int
    bias: int | None


@dataclass
class _Conv:
    weight: int
    bias: int | None
    kernel: tuple[int, int]
    padding: tuple[int, int]
    in_channels: int
    out_channels: int


@dataclass
class _ReLU:
    pass


@dataclass
class _MaxPool:
    kernel: tuple[int, int]


@dataclass
class _Flatten:
    pass


@dataclass
class _Dropout:
    index: int
    """Which of the step's noise tensors (dropout layers in forward order)."""


_Layer = Union[_Linear, _Conv, _ReLU, _MaxPool, _Flatten, _Dropout]

_DROPOUTS: tuple[type[nn.Module], ...] = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _leaves(module: nn.Module) -> list[nn.Module] | None:
    if type(module) is nn.Sequential:
        out: list[nn.Module] = []
        for child in module:
            sub = _leaves(child)
            if sub is None:
                return None
            out += sub
        return out
    return [module]


def chain_leaves(model: nn.Module) -> list[nn.Module] | None:
    """The leaves of ``model``'s body then head when it is a
    :class:`~fedclock.algorithms.models.FedModel` with the plain forward ``head(body(x))`` and
    both are chains (nested ``nn.Sequential``); None otherwise."""
    from fedclock.algorithms.models import FedModel

    if not isinstance(model, FedModel) or type(model).forward is not FedModel.forward:
        return None
    body, head = _leaves(model.body), _leaves(model.head)
    return None if body is None or head is None else body + head


def _conv_supported(m: nn.Conv2d) -> bool:
    return (_pair(m.stride) == (1, 1) and _pair(m.dilation) == (1, 1) and m.groups == 1
            and m.padding_mode == "zeros" and not isinstance(m.padding, str))


def _pool_supported(m: nn.MaxPool2d) -> bool:
    kernel = _pair(m.kernel_size)
    stride = _pair(m.stride if m.stride is not None else m.kernel_size)
    return (kernel == stride and _pair(m.padding) == (0, 0) and _pair(m.dilation) == (1, 1)
            and not m.ceil_mode and not m.return_indices)


def _chain_ok(layers: Sequence[_Layer]) -> bool:
    """Linear layers only after a flatten, convolutions and pools only before it, and at
    least one layer with weights."""
    flat = False
    for layer in layers:
        if isinstance(layer, _Flatten):
            flat = True
        elif isinstance(layer, _Linear) and not flat:
            return False
        elif isinstance(layer, (_Conv, _MaxPool)) and flat:
            return False
    return any(isinstance(layer, (_Linear, _Conv)) for layer in layers)


_LOOP_MIN = 32768
"""Weight matrices of at least this many elements per client are updated client by client
in the fused backward pass (input gradient, then update, per client)."""


@dataclass
class _Saved:
    """What a layer's forward keeps for its backward."""

    layer: _Layer
    input: torch.Tensor | None = None
    output: torch.Tensor | None = None
    extra: dict[str, object] = field(default_factory=dict)


class BatchedNet:
    """The layer plan of one model (see the module docstring); :meth:`plan` builds it."""

    def __init__(self, layers: list[_Layer], shapes: list[torch.Size],
                 memory_format: torch.memory_format = torch.channels_last) -> None:
        self.layers = layers
        self.shapes = shapes
        self.memory_format = memory_format
        self._buffers: dict[tuple[str, int], torch.Tensor] = {}

    # ------------------------------------------------------------------ plan
    @staticmethod
    def plan(model: nn.Module) -> BatchedNet | None:
        """The plan for ``model``, or None when it is not a supported layer chain (the caller
        then falls back to vmap)."""
        leaves = chain_leaves(model)
        if leaves is None:
            return None
        named = list(model.named_parameters())
        index = {id(p): i for i, (_, p) in enumerate(named)}
        layers: list[_Layer] = []
        used, drops = 0, 0
        for m in leaves:
            own = list(m.parameters(recurse=False))
            used += len(own)
            if type(m) is nn.Linear:
                layers.append(_Linear(index[id(m.weight)], index[id(m.bias)] if m.bias is not None else None))
            elif type(m) is nn.Conv2d and _conv_supported(m):
                o, c, kh, kw = m.weight.shape
                layers.append(_Conv(index[id(m.weight)], index[id(m.bias)] if m.bias is not None else None,
                                    (kh, kw), _pair(m.padding), c, o))  # type: ignore[arg-type]
            elif own:
                return None
            elif type(m) is nn.ReLU:
                layers.append(_ReLU())
            elif type(m) is nn.MaxPool2d and _pool_supported(m):
                layers.append(_MaxPool(_pair(m.kernel_size)))
            elif type(m) is nn.Flatten and m.start_dim == 1 and m.end_dim == -1:
                layers.append(_Flatten())
            elif type(m) in _DROPOUTS:
                layers.append(_Dropout(drops))
                drops += 1
            else:
                return None
        if used != len(named) or not _chain_ok(layers):
            return None
        # max-pool before ReLU (the same values: both are monotone; the same gradients: a
        # window whose maximum is <= 0 gets none either way), so ReLU runs on the pooled tensor
        for i in range(len(layers) - 1):
            if isinstance(layers[i], _ReLU) and isinstance(layers[i + 1], _MaxPool):
                layers[i], layers[i + 1] = layers[i + 1], layers[i]
        return BatchedNet(layers, [p.shape for _, p in named])

    def split(self, vectors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """K flat vectors as one contiguous ``[K, ...]`` tensor per parameter, in the flat
        layout's own element order: a linear weight ``[K, out, in]``, a convolution weight as
        the matrix ``[K, out, C*kh*kw]``, a bias ``[K, out]`` (contiguous per parameter:
        batched products over strided views are several times slower)."""
        out, offset = [], 0
        for shape in self.shapes:
            n = shape.numel()
            rows = (shape[0], n // shape[0]) if len(shape) > 1 else (n,)
            out.append(torch.stack([v[offset:offset + n].view(rows) for v in vectors]))
            offset += n
        return out

    @staticmethod
    def join(tensors: Sequence[torch.Tensor], j: int) -> torch.Tensor:
        """Client ``j``'s flat vector (a new tensor) from tensors laid out by :meth:`split`."""
        return torch.cat([t[j].reshape(-1) for t in tensors])

    # ------------------------------------------------------------------ work buffers
    def _buffer(self, tag: str, slot: int, shape: tuple[int, ...], like: torch.Tensor,
                memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
        """A work tensor reused across steps (allocated on first use or when its size changes:
        fresh tensors of many megabytes cost page faults every step)."""
        key = (tag, slot)
        buf = self._buffers.get(key)
        if buf is None or tuple(buf.shape) != tuple(shape) or buf.device != like.device:
            buf = torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=memory_format)
            self._buffers[key] = buf
        return buf

    def uses_images(self) -> bool:
        """True when the chain starts with convolutions or pools (inputs must be images)."""
        return any(isinstance(layer, (_Conv, _MaxPool)) for layer in self.layers)

    # ------------------------------------------------------------------ one step
    def step(self, weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
             grads: Sequence[torch.Tensor] | None, lr: float | None = None,
             noise: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        """Forward and backward of one mini-batch per client; returns the K losses.

        ``weights``: the K clients' weights as :meth:`split` lays them out; ``x`` [K, B, *input], ``y``
        [K, B], ``mask`` [K, B] (1 for real samples); the loss of a client is the masked mean
        cross-entropy. With ``grads`` (tensors laid out as ``weights``) the gradients are
        written there; with ``lr`` instead, ``weights`` are updated in place by
        ``w - lr * grad`` during the backward pass. ``noise``: per dropout layer (forward order)
        the factors its input is multiplied by, ``[K, B, *layer input per sample]``; the
        backward multiplies the gradient by the same factors."""
        if (grads is None) == (lr is None):
            raise ValueError("BatchedNet.step: give either grads or lr")
        k, b = x.shape[0], x.shape[1]
        fmt = self.memory_format
        saved: list[_Saved] = []
        if x.dim() == 5 and self.uses_images():  # images [K, B, C, H, W] -> grouped layout [B, K*C, H, W]
            h = x.transpose(0, 1).reshape(b, k * x.shape[2], x.shape[3], x.shape[4]).contiguous(memory_format=fmt)
            image = True
        else:
            h, image = x, False
        for slot, layer in enumerate(self.layers):
            rec = _Saved(layer)
            if isinstance(layer, _Flatten):
                if image:  # [B, K*C, H, W] -> [K, B, C*H*W] (torch's flatten order per sample)
                    rec.extra["shape"] = tuple(h.shape)
                    _, kc, hh, ww = h.shape
                    h = h.permute(1, 0, 2, 3).reshape(k, kc // k, b, hh, ww).transpose(1, 2).reshape(k, b, -1)
                    image = False
                else:
                    rec.extra["shape"] = tuple(h.shape)
                    h = h.reshape(k, b, -1)
            elif isinstance(layer, _Linear):
                rec.input = h
                w = weights[layer.weight]  # [K, out, in]
                out = self._buffer("out", slot, (k, b, w.shape[1]), w)
                if layer.bias is not None:
                    torch.baddbmm(weights[layer.bias].unsqueeze(1), h, w.transpose(1, 2), out=out)
                else:
                    torch.bmm(h, w.transpose(1, 2), out=out)
                h = out
            elif isinstance(layer, _Conv):
                w = weights[layer.weight]  # [K, out, C*kh*kw]
                wg = self._buffer("wgroup", slot, (k * layer.out_channels, layer.in_channels, *layer.kernel), w,
                                  memory_format=fmt)  # the convolution's own weight format: no reorder
                wg.unflatten(0, (k, layer.out_channels)).copy_(
                    w.view(k, layer.out_channels, layer.in_channels, *layer.kernel))
                bias = weights[layer.bias].reshape(-1) if layer.bias is not None else None
                rec.input, rec.extra["w"] = h, wg
                h = torch.ops.aten.convolution(h, wg, bias, [1, 1], list(layer.padding), [1, 1], False, [0, 0], k)
            elif isinstance(layer, _ReLU):
                h = torch.relu_(h)
                rec.output = h
            elif isinstance(layer, _Dropout):
                factors = noise[layer.index]
                if image:  # [K, B, C, H, W] -> the grouped layout [B, K*C, H, W]
                    factors = factors.transpose(0, 1).reshape(h.shape).contiguous(memory_format=fmt)
                rec.extra["noise"] = factors
                h = h * factors
            else:  # _MaxPool
                pooled, idx = F.max_pool2d(h, layer.kernel, layer.kernel, return_indices=True)
                rec.input, rec.extra["idx"] = h, idx
                h = pooled
            saved.append(rec)

        # loss: masked mean cross-entropy per client, and its gradient w.r.t. the logits
        logp = torch.log_softmax(h, dim=-1)
        picked = logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        count = mask.sum(1).clamp(min=1.0)
        losses = -(picked * mask).sum(1) / count
        grad = logp.exp_()  # softmax
        grad.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(picked, -1.0).unsqueeze(-1))
        grad.mul_((mask / count.unsqueeze(1)).unsqueeze(-1))

        neg_lr = 0.0 if lr is None else -lr  # the in-place updates' factor (used only when lr is given)
        first = next(i for i, layer in enumerate(self.layers) if isinstance(layer, (_Linear, _Conv)))
        for slot in range(len(self.layers) - 1, first - 1, -1):
            rec = saved[slot]
            layer = rec.layer
            if isinstance(layer, _Linear):
                inp = rec.input
                assert inp is not None
                w = weights[layer.weight]
                gin: torch.Tensor | None = None
                if slot > first:  # the input gradient, from the weights before their update
                    gin = self._buffer("gin", slot, (k, b, w.shape[2]), w)
                    if grads is None and w[0].numel() >= _LOOP_MIN:
                        # fused, large weights: client by client, the update follows the input
                        # gradient while the client's weight matrix is still in cache
                        grad_t = grad.transpose(1, 2)
                        for j in range(k):
                            torch.mm(grad[j], w[j], out=gin[j])
                            w[j].addmm_(grad_t[j], inp[j], alpha=neg_lr)
                        if layer.bias is not None:
                            weights[layer.bias].add_(grad.sum(1), alpha=neg_lr)
                        grad = gin
                        continue
                    torch.bmm(grad, w, out=gin)
                if grads is not None:
                    torch.bmm(grad.transpose(1, 2), inp, out=grads[layer.weight])
                    if layer.bias is not None:
                        torch.sum(grad, dim=1, out=grads[layer.bias])
                else:
                    w.baddbmm_(grad.transpose(1, 2), inp, alpha=neg_lr)
                    if layer.bias is not None:
                        weights[layer.bias].add_(grad.sum(1), alpha=neg_lr)
                if gin is None:
                    break
                grad = gin
            elif isinstance(layer, _Conv):
                inp, grouped = rec.input, rec.extra["w"]
                assert inp is not None and isinstance(grouped, torch.Tensor)
                mask_ = [slot > first, True, layer.bias is not None]
                gin, gw, gb = torch.ops.aten.convolution_backward(
                    grad.contiguous(memory_format=fmt), inp, grouped, [grouped.shape[0]], [1, 1], list(layer.padding),
                    [1, 1], False, [0, 0], k, mask_)
                w = weights[layer.weight]
                gw = gw.unflatten(0, (k, layer.out_channels))  # [K, out, C, kh, kw], any strides
                if grads is not None:
                    grads[layer.weight].view(gw.shape).copy_(gw)
                    if layer.bias is not None:
                        grads[layer.bias].copy_(gb.view(k, -1))
                else:
                    w.view(gw.shape).add_(gw, alpha=neg_lr)
                    if layer.bias is not None:
                        weights[layer.bias].add_(gb.view(k, -1), alpha=neg_lr)
                if gin is None:
                    break
                grad = gin
            elif isinstance(layer, _Dropout):
                stored = rec.extra["noise"]
                assert isinstance(stored, torch.Tensor)
                grad = grad * stored
            elif isinstance(layer, _ReLU):
                relu_out = rec.output
                assert relu_out is not None
                grad = torch.ops.aten.threshold_backward(grad, relu_out, 0.0)
            elif isinstance(layer, _MaxPool):
                inp = rec.input
                assert inp is not None
                grad = torch.ops.aten.max_pool2d_with_indices_backward(
                    grad.contiguous(memory_format=fmt), inp, list(layer.kernel), list(layer.kernel), [0, 0], [1, 1],
                    False, rec.extra["idx"])
            else:  # _Flatten
                shape = rec.extra["shape"]
                assert isinstance(shape, tuple)
                if len(shape) == 4:  # back to the grouped layout [B, K*C, H, W]
                    bb, kc, hh, ww = shape
                    grad = grad.view(k, bb, kc // k, hh, ww).transpose(0, 1).reshape(bb, kc, hh, ww)
                else:
                    grad = grad.reshape(shape)
        return losses
