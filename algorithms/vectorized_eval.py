"""Personalized evaluation of many clients' models at once (``runtime.vectorize``).

:func:`evaluate_clients` does for K clients what ``evaluate_client`` does for one: each
client's model (its personal weights, or the global model fine-tuned on its train split)
is tested on its own test split, the K models running together through
``vmap(functional_call)`` on the clients' test sets padded to the largest one. The
fine-tuning SGD of the K clients (FedAvg-FT) runs through
:func:`~fedclock.algorithms.vectorized.vectorized_local_sgd`.

An algorithm opts in with an ``eval_plan(payload, client_state, data)`` generator: it
yields the SGDs the evaluation runs first (none for a stored personal model), is sent back
each SGD's ``(weights, metrics)``, and returns the flat weights to test. Same numbers as
the sequential evaluation (counts exact, summed losses up to float rounding; tested):
padded samples are masked out, the models have no BatchNorm
(:func:`~fedclock.algorithms.vectorized.check_model`), and the forward runs in evaluation
mode (dropout off), as the sequential evaluation's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from fedclock.algorithms.base import ClientData, EvalResult, Tensors
from fedclock.algorithms.vectorized import SGDTask, check_model, is_vectorizable, run_in_lockstep

if TYPE_CHECKING:
    from fedclock.algorithms.base import Algorithm

EvalPlan = Generator[SGDTask, tuple[torch.Tensor, dict[str, float]], torch.Tensor]
"""An evaluation written as a generator: the SGDs it runs first, then the weights to test."""


def _owner(cls: type, attribute: str) -> type | None:
    return next((c for c in cls.__mro__ if attribute in c.__dict__), None)


def evaluates_vectorized(algorithm: Algorithm) -> bool:
    """True when ``algorithm``'s class is vectorizable and has an ``eval_plan`` written by
    the same class as its ``evaluate_client`` (a subclass that changes the evaluation
    without writing its plan is evaluated one client at a time)."""
    cls = type(algorithm)
    owner = _owner(cls, "eval_plan")
    return is_vectorizable(cls) and owner is not None and owner is _owner(cls, "evaluate_client")


@torch.no_grad()
def evaluate_weights(model: nn.Module, weights: Sequence[torch.Tensor], xs: Sequence[torch.Tensor],
                     ys: Sequence[torch.Tensor], batch_size: int) -> list[EvalResult]:
    """Accuracy and summed cross-entropy of K flat models, model j on ``(xs[j], ys[j])``,
    what :func:`~fedclock.algorithms.base.evaluate_flat` gives for each; ``model`` is a
    workspace of the architecture (its weights are not used or changed)."""
    if not weights:
        return []
    check_model(model)
    device = next(model.parameters()).device
    k = len(weights)
    flat = torch.stack([w.detach().to(device, torch.float32) for w in weights])
    params: dict[str, torch.Tensor] = {}
    offset = 0
    for name, p in model.named_parameters():
        params[name] = flat[:, offset:offset + p.numel()].view(k, *p.shape)
        offset += p.numel()
    if offset != flat.shape[1]:
        raise ValueError(f"flat vectors have {flat.shape[1]} values, the model {offset}")
    counts = [int(y.shape[0]) for y in ys]
    n = max(counts)
    if n == 0:
        return [EvalResult(0.0, 0, 0.0) for _ in range(k)]
    sample = next(x for x, c in zip(xs, counts) if c > 0)
    x = torch.zeros(k, n, *sample.shape[1:], dtype=sample.dtype, device=device)
    y = torch.zeros(k, n, dtype=torch.long, device=device)
    for j, (xj, yj) in enumerate(zip(xs, ys)):
        x[j, :counts[j]], y[j, :counts[j]] = xj.to(device), yj.to(device)
    valid = torch.arange(n, device=device).unsqueeze(0) < torch.tensor(counts, device=device).unsqueeze(1)

    def forward(p: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        return functional_call(model, p, (xb,))

    batched = vmap(forward)
    correct = torch.zeros(k, dtype=torch.float64)
    loss_sum = torch.zeros(k, dtype=torch.float64)
    was_training = model.training
    model.eval()  # dropout off, as in the sequential evaluation
    try:
        for start in range(0, n, batch_size):  # the sequential evaluation's batches, summed in float32 each
            stop = min(start + batch_size, n)
            logits = batched(params, x[:, start:stop])
            on = valid[:, start:stop]
            loss = F.cross_entropy(logits.flatten(0, 1), y[:, start:stop].flatten(), reduction="none").view_as(on)
            loss_sum += (loss * on).sum(1).double().cpu()
            correct += ((logits.argmax(dim=2) == y[:, start:stop]) & on).sum(1).double().cpu()
    finally:
        model.train(was_training)
    return [EvalResult(float(correct[j]), counts[j], float(loss_sum[j])) for j in range(k)]


def evaluate_clients(algorithm: Algorithm, payloads: Sequence[Tensors], states: Sequence[Tensors | None],
                     datas: Sequence[ClientData], batch_size: int) -> list[EvalResult]:
    """``evaluate_client`` of K clients at once (see the module docstring)."""
    if not evaluates_vectorized(algorithm):
        raise ValueError(f"algorithm {algorithm.name!r} does not evaluate vectorized clients")
    alg: Any = algorithm
    plans: list[EvalPlan] = [alg.eval_plan(p, s, d) for p, s, d in zip(payloads, states, datas)]
    weights = run_in_lockstep(algorithm, plans)
    return evaluate_weights(algorithm.workspace, weights,
                            [d.x_test for d in datas], [d.y_test for d in datas], batch_size)
