"""Linear centered kernel alignment (CKA) between the layers of two models.

Kornblith, Norouzi, Lee, Hinton, "Similarity of Neural Network Representations
Revisited", ICML 2019. For activations X (n x p) and Y (n x q) of the same n inputs,
centered over the inputs::

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)

It is 1 for identical representations and invariant to orthogonal transforms and
isotropic scaling of either side. It is computed here from the n x n Gram matrices
(``||Y^T X||_F^2 = <X X^T, Y Y^T>``), so wide convolutional layers cost nothing extra.

:func:`layer_cka` compares every parameterized layer (convolutions, linear layers, norms)
of two flat models on the same inputs; :func:`local_model_after_training` gives the
model a client holds after local training, for the analysis of the FedReCo paper's
Figure 2 (each client's local model against the global model).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from fedclock.algorithms.models import ModelFactory

if TYPE_CHECKING:
    from fedclock.algorithms.base import Algorithm, ClientData, Tensors


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of activations ``x`` (n x p) and ``y`` (n x q) of the same n inputs
    (extra dimensions are flattened per input). NaN when either side is constant."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cka: {x.shape[0]} and {y.shape[0]} inputs differ")
    x = x.reshape(x.shape[0], -1).to(torch.float64)
    y = y.reshape(y.shape[0], -1).to(torch.float64)
    x = x - x.mean(dim=0, keepdim=True)
    y = y - y.mean(dim=0, keepdim=True)
    kx, ky = x @ x.T, y @ y.T
    denom = float(kx.norm() * ky.norm())
    return float((kx * ky).sum()) / denom if denom > 0 else float("nan")


def layer_names(model: nn.Module) -> list[str]:
    """Modules holding parameters of their own (the model's layers), in order."""
    return [name for name, m in model.named_modules() if name and any(True for _ in m.parameters(recurse=False))]


@torch.no_grad()
def layer_activations(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The output of every layer of :func:`layer_names` on inputs ``x`` (eval mode)."""
    modules = dict(model.named_modules())
    out: dict[str, torch.Tensor] = {}
    hooks = [modules[name].register_forward_hook(
        lambda _m, _i, o, name=name: out.__setitem__(name, o.detach())) for name in layer_names(model)]
    was_training = model.training
    model.eval()
    try:
        model(x)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return out


def layer_cka(model: nn.Module, factory: ModelFactory, weights_a: torch.Tensor, weights_b: torch.Tensor,
              x: torch.Tensor) -> dict[str, float]:
    """Linear CKA per layer between the flat models ``weights_a`` and ``weights_b`` on ``x``,
    using ``model`` as a workspace."""
    factory.load_flat(model, weights_a)
    acts_a = layer_activations(model, x)
    factory.load_flat(model, weights_b)
    acts_b = layer_activations(model, x)
    return {name: linear_cka(acts_a[name], acts_b[name]) for name in acts_a}


def supports_local_model(cls: type) -> bool:
    """Whether :func:`local_model_after_training` works for an algorithm class: it defines
    ``local_model``, or it is FedAvg or a subclass (its upload is the whole-model delta)."""
    from fedclock.algorithms.fedavg import FedAvg

    return callable(getattr(cls, "local_model", None)) or issubclass(cls, FedAvg)


def local_model_after_training(algorithm: Algorithm, payload: Tensors, client_state: Tensors | None,
                               data: ClientData, rng: torch.Generator) -> torch.Tensor:
    """The flat model a client holds after one local task from ``payload``.

    Personalized algorithms define ``local_model(payload, client_state, data, rng)`` (their
    personal model after the task); for FedAvg and its subclasses it is the received weights
    plus the uploaded delta. The client's stored state is not changed.
    """
    own = getattr(algorithm, "local_model", None)
    if callable(own):
        return own(payload, client_state, data, rng)
    if not supports_local_model(type(algorithm)):
        raise ValueError(f"analysis: algorithm {algorithm.name!r} does not expose a local model for CKA")
    result = algorithm.client_update(payload, client_state, data, rng)
    return payload["weights"].to(torch.float32) + result.upload["delta"].to(torch.float32)
