"""Adapted evaluation: every algorithm's clients scored after the same local adaptation.

Personalized methods (PLGA, SPFL, ``algorithms/plga.py``, ``algorithms/spfl.py``) are scored
with a locally adapted model, the baselines (FedAvg-Async, FedAsync) with the bare global
model; the SPFL/PLGA authors' code scores every baseline with each user's locally trained
model. ``evaluation.adapted`` puts every algorithm on that footing: at each evaluation, each
client copies the current global model (:meth:`~fedclock.algorithms.base.Algorithm.global_weights`,
the model the global evaluation tests), runs ``steps`` plain SGD steps of supervised
cross-entropy on its own train split, and tests the adapted copy on its own test split.

**Choices** (the same rule for every algorithm, so the comparison is fair):

* the SGD is plain: the algorithm's ``lr`` and ``batch_size`` (or the option's), no momentum,
  no weight decay, no clipping, no learning-rate schedule, the whole model trained, whatever
  the algorithm's own local objective is;
* the adapted copies are thrown away: they never feed training, the clock (adaptation is
  evaluation, not charged virtual time) or any other metric;
* the batches come from the generator the caller hands in; the runtime seeds it from a
  stream of its own keyed by (scenario seed, client, server version), so runs are
  deterministic and two algorithms run with one seed draw the same batch order per client.

This is the fine-tune-then-test step of FedAvg-FT (``algorithms/fedavg_ft.py``) applied from the
outside to any algorithm: both go through :func:`~fedclock.algorithms.personal.tuned_evaluate`.
"""
from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedclock.algorithms.base import MAX_LOCAL_STEPS, MAX_PARAM_MAGNITUDE, AlgorithmParams, ClientData, EvalResult
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.personal import train_part, tuned_evaluate


class AdaptedEvaluation(BaseModel):
    """``evaluation.adapted``: score each client after ``steps`` local SGD steps from the
    global model (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    steps: int = Field(ge=0, le=MAX_LOCAL_STEPS, description="local SGD steps on the client's own train split "
                       "before it tests the adapted global model (0: the global model itself)")
    lr: float | None = Field(default=None, gt=0, le=MAX_PARAM_MAGNITUDE,
                             description="learning rate of the adaptation (default: the algorithm's lr)")
    batch_size: int | None = Field(default=None, ge=1, description="mini-batch size of the adaptation (default: "
                                   "the algorithm's batch_size)")


def adaptation_params(params: AlgorithmParams, adaptation: AdaptedEvaluation) -> AlgorithmParams:
    """The plain SGD settings of the adaptation: ``adaptation``'s ``lr`` and ``batch_size``
    where set, else ``params``'; momentum, weight decay and clipping off."""
    return AlgorithmParams(lr=adaptation.lr if adaptation.lr is not None else params.lr,
                           batch_size=adaptation.batch_size if adaptation.batch_size is not None
                           else params.batch_size)


def adapted_weights(model: nn.Module, factory: ModelFactory, weights: torch.Tensor, data: ClientData,
                    params: AlgorithmParams, adaptation: AdaptedEvaluation, rng: torch.Generator) -> torch.Tensor:
    """``weights`` after the adaptation's SGD steps on ``data``'s train split (a copy;
    ``weights`` as they are when ``steps`` is 0 or the client has no training samples)."""
    tuned, _ = train_part(model, factory, weights, data, adaptation_params(params, adaptation), rng,
                          adaptation.steps, "all")
    return tuned


def adapted_evaluate(model: nn.Module, factory: ModelFactory, weights: torch.Tensor, data: ClientData,
                     params: AlgorithmParams, adaptation: AdaptedEvaluation, rng: torch.Generator,
                     batch_size: int) -> EvalResult:
    """The adapted copy of the global ``weights`` (:func:`adapted_weights`) on ``data``'s test
    split; ``model`` is a workspace whose weights are overwritten."""
    return tuned_evaluate(model, factory, weights, data, adaptation_params(params, adaptation), adaptation.steps,
                          rng, batch_size)
