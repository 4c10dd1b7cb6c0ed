"""Reusable local training: mini-batch SGD on one client's train split.

Every algorithm that trains locally goes through :func:`local_sgd`, so the batching, the
optimizer and the determinism guarantees live in one place. Later algorithms plug into it
through keyword hooks instead of copying the loop:

* ``extra_loss(model)``: a term added to the batch loss that depends only on the weights
  (FedProx / FedAsync proximal term, Ditto's pull towards the global model);
* ``loss_fn(model, x, y)``: replaces the batch loss (cross-entropy by default) when the
  objective needs the batch itself (feature alignment, unsupervised losses);
* ``grad_fn(model, closure)``: fills ``.grad`` from a closure that evaluates the loss
  (SAM evaluates it twice, at the weights and at the perturbed weights);
* ``after_backward(model)``: edits the gradients in place before clipping and the step
  (SCAFFOLD's control-variate correction, FedCM's momentum mix);
* ``trainable``: the parameters that move (FedRep / FedBABU train only part of the model).

Batches (see :func:`batches`) are drawn from consecutive random permutations of the train
indices, so the same generator state always gives the same batches, the same steps and
the same weights on the same device. :func:`train_from` is the common client step of the
baselines; :func:`delta_result` and :func:`model_result` build the result of a task that
uploads its model's change or its trained model.
"""
from __future__ import annotations

import contextlib
import operator
from functools import reduce
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

import torch
from torch import nn
from torch.optim.sgd import sgd

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, Tensors
from fedclock.algorithms.targets import target_cross_entropy

if TYPE_CHECKING:
    from fedclock.algorithms.base import Algorithm

ExtraLoss = Callable[[nn.Module], torch.Tensor]
"""A weight-only term added to every batch's loss."""
BatchLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
"""The loss of one batch ``(model, x, y) -> scalar``."""
GradFn = Callable[[nn.Module, Callable[[], torch.Tensor]], None]
"""Fills the parameters' ``.grad`` given a closure that evaluates the objective."""
GradHook = Callable[[nn.Module], None]
"""Edits the parameters' ``.grad`` in place after they are computed."""


def cross_entropy_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy of ``model`` on one batch (the default batch loss); with
    per-token targets the mean over the tokens that are not padding
    (:func:`~fedclock.algorithms.targets.target_cross_entropy`)."""
    return target_cross_entropy(model(x), y)


def batches(n: int, batch_size: int, steps: int, rng: torch.Generator) -> Iterator[torch.Tensor]:
    """Index tensors of ``steps`` mini-batches of ``min(batch_size, n)`` samples out of ``n``.

    The indices are a stream of random permutations of ``range(n)`` drawn one epoch at a
    time with ``torch.randperm(n, generator=rng)``; a new permutation is drawn when the
    current one is exhausted, and a batch that straddles two epochs takes the end of one
    permutation and the start of the next. Every batch therefore has the same size (what
    what :mod:`fedclock.algorithms.task_cost` prices) and every sample is used equally often, up to one.
    Indices are int64 tensors on the CPU.
    """
    if n < 1:
        raise ValueError(f"batches: need at least one sample, got n={n}")
    if batch_size < 1:
        raise ValueError(f"batches: batch_size must be >= 1, got {batch_size}")
    size = min(batch_size, n)
    perm = torch.randperm(n, generator=rng)
    pos = 0
    for _ in range(steps):
        if pos + size <= n:
            yield perm[pos:pos + size]
            pos += size
            if pos == n:
                perm, pos = torch.randperm(n, generator=rng), 0
        else:
            head = perm[pos:]
            perm = torch.randperm(n, generator=rng)
            pos = size - head.numel()
            yield torch.cat([head, perm[:pos]])


def proximal_loss(center: torch.Tensor, mu: float, model: nn.Module) -> ExtraLoss:
    """``mu/2 * ||w - center||^2`` as an ``extra_loss`` for ``model``.

    ``center`` is a flat vector in the model's parameter order (e.g. the received global
    weights); it is split once into per-parameter views on the model's device.
    """
    params = list(model.parameters())
    pieces: list[torch.Tensor] = []
    offset = 0
    for p in params:
        k = p.numel()
        pieces.append(center[offset:offset + k].detach().to(device=p.device, dtype=p.dtype).view_as(p))
        offset += k
    if offset != center.numel():
        raise ValueError(f"proximal center has {center.numel()} values, the model {offset}")

    def term(m: nn.Module) -> torch.Tensor:
        total = reduce(operator.add, [((p - c) ** 2).sum() for p, c in zip(m.parameters(), pieces)])
        return 0.5 * mu * total

    return term


class SGDStep:
    """``torch.optim.SGD`` (no dampening, no Nesterov) through PyTorch's own functional form
    :func:`torch.optim.sgd.sgd`, which the optimizer's ``step`` calls with the same arguments.

    Why not the optimizer object: its ``step`` and ``zero_grad`` are wrapped so that
    ``torch.compile`` skips them, and the wrapper imports ``torch._dynamo`` on first use
    (0.8 s in every process that trains, the driver of an inline run and each Ray executor)
    and adds Python work to every step (about 0.1 ms, as much as a step of a small MLP on a
    batch of 10). The update itself is PyTorch's code: the same parameters (those with a
    gradient), the same momentum buffers (created at a parameter's first step), the same
    arithmetic, so the weights are bit for bit those of ``torch.optim.SGD``
    (tests/algorithms/test_training.py compares them over steps with momentum and weight decay).
    """

    def __init__(self, params: Sequence[nn.Parameter], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: dict[int, torch.Tensor | None] = {}

    def zero_grad(self) -> None:
        """Set every gradient to None (``zero_grad(set_to_none=True)``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of the parameters that have a gradient."""
        live: list[int] = []
        params: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        for i, p in enumerate(self.params):
            if p.grad is not None:
                live.append(i)
                params.append(p)
                grads.append(p.grad)
        buffers = [self.buffers.get(i) for i in live] if self.momentum != 0 else []
        sgd(params, grads, buffers, weight_decay=self.weight_decay, momentum=self.momentum, lr=self.lr,
            dampening=0.0, nesterov=False, maximize=False, has_sparse_grad=any(g.is_sparse for g in grads))
        if self.momentum != 0:
            self.buffers.update(zip(live, buffers))


class FlatCodec(Protocol):
    """What :func:`local_sgd` needs of a factory: a module's parameters to and from one flat
    vector (:class:`~fedclock.algorithms.models.ModelFactory` has both)."""

    def flatten(self, model: nn.Module) -> torch.Tensor: ...

    def load_flat(self, model: nn.Module, flat: torch.Tensor) -> None: ...


def local_sgd(model: nn.Module, factory: FlatCodec, start_weights: torch.Tensor, data: ClientData,
              params: AlgorithmParams, rng: torch.Generator, steps: int,
              extra_loss: ExtraLoss | None = None, *,
              loss_fn: BatchLoss | None = None,
              grad_fn: GradFn | None = None,
              after_backward: GradHook | None = None,
              trainable: Sequence[nn.Parameter] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Run ``steps`` SGD steps on ``data``'s train split starting from ``start_weights``.

    ``model`` is a workspace whose weights are overwritten (it may live on any device; the
    data must be on the same one). The update is ``torch.optim.SGD``'s with ``params.lr``,
    ``momentum`` and ``weight_decay`` (momentum buffers do not outlive the task), applied
    through :class:`SGDStep`. Each step: objective = ``loss_fn`` on the batch (+
    ``extra_loss``); gradients by ``grad_fn`` (default: one backward pass; a custom one must
    evaluate the closure at least once); ``after_backward``; clipping of the trainable
    parameters' gradient norm to
    ``params.max_grad_norm`` if set; the optimizer step.
    Parameters outside ``trainable`` (default: all) are frozen for the task.

    Returns the final flat float32 weights (a CPU copy) and ``{"train_loss": mean over
    steps of the batch loss before each step (without extra_loss), "steps": the number of
    optimizer steps taken (counted in the loop)}``. With no
    training samples or ``steps == 0`` the start weights come back unchanged and
    ``train_loss`` is NaN.
    """
    if steps < 0:
        raise ValueError(f"local_sgd: steps must be >= 0, got {steps}")
    factory.load_flat(model, start_weights)
    n = data.num_train
    if n == 0 or steps == 0:
        return factory.flatten(model), {"train_loss": float("nan"), "steps": 0}

    batch_loss = loss_fn or cross_entropy_loss
    all_params = list(model.parameters())
    moving = list(trainable) if trainable is not None else all_params
    moving_ids = {id(p) for p in moving}
    saved_flags = [p.requires_grad for p in all_params]
    for p in all_params:
        p.requires_grad_(id(p) in moving_ids)
    optimizer = SGDStep(moving, lr=params.lr, momentum=params.momentum, weight_decay=params.weight_decay)
    device = data.x_train.device
    loss_sum = torch.zeros((), device=device)
    done = 0
    was_training = model.training
    model.train()
    seeded = contextlib.ExitStack()
    seed_dropout(seeded, model, rng, device)
    try:
        for idx in batches(n, params.batch_size, steps, rng):
            idx = idx.to(device)
            xb, yb = data.x_train[idx], data.y_train[idx]
            first: list[torch.Tensor] = []

            def closure(xb: torch.Tensor = xb, yb: torch.Tensor = yb, first: list[torch.Tensor] = first
                        ) -> torch.Tensor:
                loss = batch_loss(model, xb, yb)
                if not first:
                    first.append(loss.detach())
                return loss + extra_loss(model) if extra_loss is not None else loss

            optimizer.zero_grad()
            if grad_fn is None:
                closure().backward()
            else:
                grad_fn(model, closure)
            if after_backward is not None:
                after_backward(model)
            if params.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(moving, params.max_grad_norm)
            optimizer.step()
            done += 1
            loss_sum += first[0]
    finally:
        seeded.close()
        model.zero_grad(set_to_none=True)
        for p, flag in zip(all_params, saved_flags):
            p.requires_grad_(flag)
        model.train(was_training)
    return factory.flatten(model), {"train_loss": float(loss_sum) / done, "steps": done}


DROPOUT_SALT = 0x9E3779B97F4A7C15
"""Mixed into a task generator's seed to seed its dropout masks (a stream apart from its batches)."""


def seed_dropout(stack: contextlib.ExitStack, model: nn.Module, rng: torch.Generator,
                 device: torch.device) -> bool:
    """For a model with dropout layers, seed PyTorch's global generator (what dropout draws its
    masks from) from the task generator's seed inside ``stack`` (restored when it closes), so a
    task's masks depend on the task alone, not on which executor ran it or what ran before:
    the same tables on every backend. Returns whether the model has dropout (else nothing is
    entered)."""
    if not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules()):
        return False
    stack.enter_context(torch.random.fork_rng(devices=[device] if device.type == "cuda" else []))
    torch.manual_seed((rng.initial_seed() ^ DROPOUT_SALT) & ((1 << 63) - 1))
    return True


def train_from(algorithm: Algorithm, start_weights: torch.Tensor, data: ClientData, rng: torch.Generator,
               extra_loss: ExtraLoss | None = None, *,
               loss_fn: BatchLoss | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`local_sgd` on ``algorithm``'s workspace with its params and the task's step
    count (``algorithm.task_steps(data)``: the clock's ``data.steps`` when the client does
    partial work, else the full count): the common client step of the baselines.
    ``loss_fn`` replaces the batch loss (e.g. ``algorithm.objective_loss(rng)``)."""
    return local_sgd(algorithm.workspace, algorithm.model_factory, start_weights, data, algorithm.params, rng,
                     algorithm.task_steps(data), extra_loss, loss_fn=loss_fn)


def delta_result(local: torch.Tensor, start: torch.Tensor, state: Tensors | None, data: ClientData,
                 metrics: dict[str, float], steps: int | None = None) -> ClientResult:
    """The result of a task that trained the received weights ``start`` into ``local`` and
    uploads the change, ``"delta" = local - start``; ``state`` is what the client keeps."""
    return ClientResult(upload={"delta": local - start.to(local.device)}, state=state, num_samples=data.num_train,
                        metrics=metrics, steps=steps)


def model_result(local: torch.Tensor, state: Tensors | None, data: ClientData,
                 metrics: dict[str, float]) -> ClientResult:
    """The result of a task that uploads its trained model itself, ``"weights" = local``;
    ``state`` is what the client keeps."""
    return ClientResult(upload={"weights": local}, state=state, num_samples=data.num_train, metrics=metrics)
