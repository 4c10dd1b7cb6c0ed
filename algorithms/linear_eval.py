"""Linear evaluation of frozen representations (pure PyTorch).

A linear classifier (optionally after a small trainable adapter, e.g. FedStyle's generator)
is trained on frozen features with Adam and full passes over shuffled mini-batches drawn
from a seeded generator, then tested. Features are computed once, without gradients.
**choose**: the classifier is preceded by a ``BatchNorm1d`` without affine parameters (the
linear-probing protocol of MAE, He et al. 2022): it standardizes every feature with the
training statistics, so encoders whose features differ in scale are compared fairly (an
affine map before a linear layer keeps the classifier linear in the frozen features).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fedclock.algorithms.base import EvalResult, evaluate_module
from fedclock.algorithms.ssl import features_of


def train_probe(feats: torch.Tensor, y: torch.Tensor, num_classes: int, adapter: nn.Module | None,
                rng: torch.Generator, *, epochs: int = 100, lr: float = 0.01, batch_size: int = 256,
                adapter_lr_scale: float = 0.1) -> nn.Module:
    """Train ``Linear(BN(adapter(BN(feats))))`` by Adam on cross-entropy for ``epochs``
    passes of shuffled ``batch_size`` mini-batches drawn from ``rng``; without an adapter
    simply ``Linear(BN(feats))``. The linear layer learns at ``lr``, the adapter's weights
    at ``adapter_lr_scale * lr``; the linear layer is initialized from ``rng``.

    **choose** (adapters, i.e. FedStyle's G "trained together with the linear classifier"):
    the frozen features are standardized before the adapter too and the adapter learns ten
    times slower than the classifier; at the classifier's rate G overfits a client's few
    hundred samples (on the quick digit-styles run personalization collapsed far below the
    generalization probe's accuracy). Returns the module in eval mode."""
    device = feats.device
    layers: list[nn.Module] = []
    if adapter is not None:
        layers += [nn.BatchNorm1d(feats.shape[1], affine=False), adapter]
    front = nn.Sequential(*layers).to(device)
    front.eval()
    with torch.no_grad():
        width = int(front(feats[:1]).shape[1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=rng)))
        linear = nn.Linear(width, num_classes)
    model = nn.Sequential(front, nn.BatchNorm1d(width, affine=False), linear).to(device)
    groups = [{"params": list(linear.parameters()), "lr": lr}]
    if adapter is not None:
        for p in adapter.parameters():
            p.requires_grad_(True)
        groups.append({"params": list(adapter.parameters()), "lr": lr * adapter_lr_scale})
    opt = torch.optim.Adam(groups)
    n = feats.shape[0]
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=rng).to(device)
        for s in range(0, n, batch_size):
            idx = perm[s:s + batch_size]
            if idx.numel() < 2:  # BatchNorm needs two rows; a last batch of one is skipped
                continue
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(feats[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    return model


def linear_probe(frozen: Callable[[torch.Tensor], torch.Tensor], x_train: torch.Tensor, y_train: torch.Tensor,
                 x_test: torch.Tensor, y_test: torch.Tensor, num_classes: int, adapter: nn.Module | None,
                 rng: torch.Generator, *, epochs: int = 100, lr: float = 0.01, batch_size: int = 256,
                 feature_batch: int = 1024) -> EvalResult:
    """Accuracy on (x_test, y_test) of a linear classifier trained (:func:`train_probe`) on
    ``frozen`` features of (x_train, y_train); NaN accuracy (count 0) when either side is
    empty."""
    if y_train.numel() == 0 or y_test.numel() == 0:
        return EvalResult(0.0, 0, 0.0)
    tr = features_of(frozen, x_train, feature_batch).detach()
    te = features_of(frozen, x_test, feature_batch).detach()
    with torch.enable_grad():
        model = train_probe(tr, y_train, num_classes, adapter, rng, epochs=epochs, lr=lr, batch_size=batch_size)
    return evaluate_module(model, te, y_test, feature_batch)
