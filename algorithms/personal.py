"""Shared helpers of the personalized algorithms: body/head parts, part-wise training,
per-phase step counts and fine-tune-then-test evaluation.

The personalized algorithms (FedRep, FedPer, FedBABU, Ditto, APFL, FedReCo, FedAvg-FT, and
any later one) keep some weights on the client and train parts of the model separately.
These helpers do that on top of the one local loop, :func:`~fedclock.algorithms.training.local_sgd`,
so no algorithm writes its own loop:

* :func:`part_params` — the parameters of ``"body"``, ``"head"`` or ``"all"`` of a model
  (``trainable=`` argument of ``local_sgd``);
* :func:`~fedclock.algorithms.base.epoch_steps` (re-exported) — mini-batch steps of ``epochs`` passes over ``n``
  samples;
* :func:`train_part` — ``local_sgd`` on one part with its own learning rate and step count;
* :func:`with_head` / :func:`with_body` — a flat model vector with one part replaced;
* :func:`finetune_evaluate` — fine-tune a flat model on a client's train split, then test
  it on the client's test split (FedAvg-FT, FedBABU); :func:`tuned_evaluate` — the same for
  a given step count and generator (also ``evaluation.adapted``, :mod:`fedclock.algorithms.adapted`).

Flat vectors follow :class:`~fedclock.algorithms.models.ModelFactory`'s layout: the body is
``flat[factory.body]`` and the head ``flat[factory.head]`` (both contiguous).
"""
from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import nn

from fedclock.algorithms.base import AlgorithmParams, ClientData, EvalResult, epoch_steps, evaluate_module
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import BatchLoss, ExtraLoss, local_sgd

Part = Literal["body", "head", "all"]

FINETUNE_STREAM = 0x46540001
"""Seed offset of the generator used by evaluation-time fine-tuning (see :func:`finetune_rng`)."""


def part_params(model: nn.Module, part: Part) -> list[nn.Parameter]:
    """The parameters of ``model.body``, ``model.head`` or the whole model."""
    if part == "all":
        return list(model.parameters())
    if part not in ("body", "head"):
        raise ValueError(f"part must be 'body', 'head' or 'all' (got {part!r})")
    return list(getattr(model, part).parameters())



def with_head(factory: ModelFactory, weights: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """A copy of flat ``weights`` whose head slice is ``head``."""
    out = weights.clone()
    out[factory.head] = head.to(out)
    return out


def with_body(factory: ModelFactory, weights: torch.Tensor, body: torch.Tensor) -> torch.Tensor:
    """A copy of flat ``weights`` whose body slice is ``body``."""
    out = weights.clone()
    out[factory.body] = body.to(out)
    return out


def train_part(model: nn.Module, factory: ModelFactory, start: torch.Tensor, data: ClientData,
               params: AlgorithmParams, rng: torch.Generator, steps: int, part: Part, *,
               lr: float | None = None, extra_loss: ExtraLoss | None = None,
               loss_fn: BatchLoss | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """``steps`` SGD steps of :func:`local_sgd` that move only ``part`` of the model.

    ``lr`` overrides ``params.lr`` for this phase (FedReCo's eta_v / eta_u); the other
    settings (batch size, momentum, weight decay, clipping) come from ``params``. Returns the
    whole flat model (the frozen part unchanged) and the loop's metrics.
    """
    phase = params if lr is None else params.model_copy(update={"lr": lr})
    factory.load_flat(model, start)
    return local_sgd(model, factory, start, data, phase, rng, steps, extra_loss, loss_fn=loss_fn,
                     trainable=part_params(model, part))


def finetune_rng(client: int) -> torch.Generator:
    """The generator of evaluation-time fine-tuning for ``client``: seeded by the client id
    and :data:`FINETUNE_STREAM` only, so an evaluation never consumes training randomness
    and always gives the same number for the same weights."""
    return torch.Generator().manual_seed(FINETUNE_STREAM * 1_000_003 + int(client))


def finetune_evaluate(model: nn.Module, factory: ModelFactory, weights: torch.Tensor, data: ClientData,
                      params: AlgorithmParams, epochs: float, batch_size: int,
                      part: Part = "all") -> EvalResult:
    """Fine-tune ``weights`` (``part`` only) for ``epochs`` passes over the client's train
    split with ``params``' SGD settings, then test on the client's test split.

    ``epochs == 0`` tests ``weights`` as they are. The fine-tuning batches come from
    :func:`finetune_rng`.
    """
    steps = epoch_steps(data.num_train, params.batch_size, epochs) if epochs > 0 and data.num_train > 0 else 0
    return tuned_evaluate(model, factory, weights, data, params, steps, finetune_rng(data.client), batch_size, part)


def tuned_evaluate(model: nn.Module, factory: ModelFactory, weights: torch.Tensor, data: ClientData,
                   params: AlgorithmParams, steps: int, rng: torch.Generator, batch_size: int,
                   part: Part = "all") -> EvalResult:
    """``steps`` SGD steps of :func:`train_part` (``part`` only, ``params``' settings, batches
    from ``rng``) from ``weights`` on the client's train split, then the tuned copy on the
    client's test split. ``steps == 0`` (or no training samples) tests ``weights`` as they
    are. The tuned copy is thrown away (FedAvg-FT, FedBABU, ``evaluation.adapted``)."""
    if steps > 0 and data.num_train > 0:
        tuned, _ = train_part(model, factory, weights, data, params, rng, steps, part)
    else:
        tuned = weights
    factory.load_flat(model, tuned)
    return evaluate_module(model, data.x_test, data.y_test, batch_size)


def weighted_mean(vectors: Sequence[torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
    """Sample-count-weighted mean of vectors (equal weights when every count is zero)."""
    total = sum(counts)
    out = torch.zeros_like(vectors[0], dtype=torch.float32)
    for v, n in zip(vectors, counts):
        out.add_(v.to(out), alpha=(n / total) if total > 0 else 1.0 / len(vectors))
    return out
