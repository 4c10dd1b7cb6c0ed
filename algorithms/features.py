"""Helpers for algorithms that work with the body's features and a body/head split.

* :func:`feature_dim`: the width of the body's output h(x; u) for a model factory;
* :func:`join_parts`: a flat weight vector from a body part and a head part;
* :func:`body_and_head_upload` / :func:`mean_body_and_head`: the upload of a client that
  sends its body's change and its trained head, and the server's sample-weighted fold of a
  cohort of them (FedCR, FedPAC);
* :func:`class_feature_stats`: per-class counts, sums and sums of squared norms of a
  feature map over a data set, computed without gradients in fixed-size chunks;
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from fedclock.algorithms.base import Arrival
from fedclock.algorithms.models import ModelFactory


def feature_dim(factory: ModelFactory, features: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] | None = None
                ) -> int:
    """Width of the features of ``factory``'s model on one all-zero input (by default the
    model's ``features``: the body output)."""
    model = factory.build().eval()
    fn = features or (lambda m, x: m.features(x))  # type: ignore[operator]
    with torch.no_grad():
        out = fn(model, torch.zeros(1, *factory.input_shape))
    return int(out.reshape(1, -1).shape[1])


def join_parts(factory: ModelFactory, body: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """The flat weights whose body slice is ``body`` and head slice is ``head``."""
    flat = torch.empty(factory.num_params, dtype=torch.float32)
    flat[factory.body] = body.detach().to(device="cpu", dtype=torch.float32)
    flat[factory.head] = head.detach().to(device="cpu", dtype=torch.float32)
    return flat


def body_and_head_upload(factory: ModelFactory, local: torch.Tensor, body0: torch.Tensor) -> dict[str, torch.Tensor]:
    """The upload of a client that trained the flat weights ``local`` from the received body
    ``body0``: ``"body_delta"`` (its body minus ``body0``) and ``"head"`` (a copy of its head,
    which the client also keeps as its own)."""
    return {"body_delta": local[factory.body] - body0.to(local.device), "head": local[factory.head].clone()}


def mean_body_and_head(factory: ModelFactory, weights: torch.Tensor, arrivals: list[Arrival]) -> torch.Tensor:
    """The flat weights after a cohort of :func:`body_and_head_upload` uploads: body
    ``u + sum_j (n_j / n) Delta_j`` (``u`` the body of ``weights``) and head
    ``sum_j (n_j / n) v_j``, the sample-weighted mean of the uploaded heads (equal weights
    when no arrival has samples). ``arrivals`` must not be empty."""
    total = sum(a.num_samples for a in arrivals)
    body = weights[factory.body].clone()
    head = torch.zeros_like(weights[factory.head])
    for a in arrivals:
        coef = a.num_samples / total if total > 0 else 1.0 / len(arrivals)
        body.add_(a.upload["body_delta"].to(body), alpha=coef)
        head.add_(a.upload["head"].to(head), alpha=coef)
    return join_parts(factory, body, head)


@torch.no_grad()
def class_feature_stats(features: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                        num_classes: int, chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-class statistics of ``features(x)`` (a ``(n, d)`` map) over a data set.

    Returns float64 CPU tensors ``counts`` ``(C,)`` (samples per class), ``sums`` ``(C, d)``
    (sum of the feature vectors of each class) and ``sq_norms`` ``(C,)`` (sum of their squared
    Euclidean norms). With no samples, ``sums`` has width 0.
    """
    counts = torch.zeros(num_classes, dtype=torch.float64)
    sums: torch.Tensor | None = None
    sq = torch.zeros(num_classes, dtype=torch.float64)
    for start in range(0, int(y.shape[0]), chunk):
        f = features(x[start:start + chunk]).reshape(min(chunk, int(y.shape[0]) - start), -1).to("cpu", torch.float64)
        onehot = F.one_hot(y[start:start + chunk].to("cpu"), num_classes).to(torch.float64)
        counts += onehot.sum(0)
        part = onehot.T @ f
        sums = part if sums is None else sums + part
        sq += onehot.T @ (f * f).sum(1)
    if sums is None:
        sums = torch.zeros(num_classes, 0, dtype=torch.float64)
    return counts, sums, sq



