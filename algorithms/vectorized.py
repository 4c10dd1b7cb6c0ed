"""Vectorized clients: the local SGD of K clients of one architecture run in lock-step.

:func:`vectorized_local_sgd` does for K clients at once what
:func:`~fedclock.algorithms.training.local_sgd` does for one, with ``torch.func``: the K
clients' weights are stacked (one ``[K, *shape]`` tensor per parameter), the model runs
through ``vmap(functional_call)`` on per-client batches, one backward pass gives every
client's gradient (the clients' losses are summed; they share no weights, so each client's
gradient is that of its own loss), and the SGD update is done on the stacked tensors.
On a CPU, models that are chains of linear, convolution, ReLU, max-pool and flatten layers
(``mlp``, ``logistic``, ``cnn5``, ``spfl_cnn``) run instead through
:class:`~fedclock.algorithms.batched_net.BatchedNet`: the same computation with batched
matrix products, grouped channels-last convolutions and a written-out backward pass, and,
for plain SGD, the update fused into that pass (several times faster than vmap on a CPU;
``benchmarks/RESULTS.md``). ``conv_gn`` and other devices use vmap.

Same numbers as the sequential loop (up to float rounding; tested):

* **Batches**: each client's index batches are drawn with
  :func:`~fedclock.algorithms.training.batches` from its own task generator, before any
  training, exactly as the sequential loop draws them (nothing else draws from that
  generator during supervised local SGD), so every client sees the same samples in the
  same order.
* **Padding and masks**: the batches of a client with fewer than ``batch_size`` samples are
  smaller; they are padded to the largest batch of the group, and the padded samples get
  weight 0 in a masked mean (``sum(mask * loss) / sum(mask)``, the sequential batch mean).
  A client that has run all its steps (fewer samples, partial work) is masked out of the
  remaining steps: its weights and momentum buffer no longer change, its loss is not
  counted.
* **Update** (``torch.optim.SGD``'s rule, per client, with that client's hyper-parameters):
  gradient of the batch loss plus ``mu * (w - center)`` when a proximal term
  ``mu/2 ||w - center||^2`` is set; then ``keep * g + shift`` when the task sets a gradient
  edit (the ``after_backward`` hook's place in the loop); clipping of the whole gradient to ``max_grad_norm``
  (``clip_grad_norm_``'s ``max / (norm + 1e-6)`` factor, capped at 1); weight decay
  ``g + wd * w``; momentum ``b <- m b + g`` (the buffer starts at zero, which equals
  PyTorch's first-step ``b = g``); ``w <- w - lr * b``.
* **Metrics**: ``train_loss`` = mean over the steps run of the batch loss before the step
  (float32 sum on the device, as the sequential loop), ``steps`` = steps run; a client with
  no samples or no steps gets its start weights back and ``train_loss`` NaN.

* **Dropout** (``nn.Dropout``, ``Dropout1d/2d/3d`` as leaves of a :class:`~fedclock.algorithms.
  models.FedModel` whose body and head are layer chains, e.g. ``pfl_cnn``): each client's
  masks are its own, drawn before training as the sequential loop draws them, by the layer
  itself on a tensor of ones of the client's batch shape (dropout multiplies its input by
  the noise it draws, so the output on ones is that noise), step after step and layer after
  layer in forward order, from PyTorch's generator seeded from the client's task generator
  by :func:`~fedclock.algorithms.training.seed_dropout` (what the sequential loop does):
  on a CPU the K clients' masks are then bit for bit the sequential ones (tested), so the
  tables are the sequential tables up to float rounding; masks are independent across
  clients because their seeds are. The masked forward multiplies by the stored noise and
  the backward by the same noise (the vmap path on other devices does the same through a
  layer-by-layer forward; the masks there are drawn by the same calls, not tested on a
  GPU). Padded samples get mask 0.

Not supported (rejected with a ValueError): models with buffers (BatchNorm running
statistics), alpha dropout or dropout outside a layer chain, other batch losses than
cross-entropy, gradient hooks. Which models the scenario loader accepts is
:data:`VECTOR_MODELS` (each is tested).

An algorithm opts in by setting ``vectorizable: ClassVar[bool] = True`` in its own class
body (a subclass does not inherit it: :func:`is_vectorizable`) and implementing
:class:`VectorizableAlgorithm`'s two methods, which split its client step into the local
SGD it runs and what it makes of the result, or, when the step runs several SGDs one after
the other, an ``sgd_plan`` generator (:data:`SGDPlan`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Generator, Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from fedclock.algorithms.base import Algorithm, AlgorithmParams, ClientData, ClientResult, Tensors
from fedclock.algorithms.batched_net import BatchedNet
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.training import batches, seed_dropout

VECTOR_MODELS: tuple[str, ...] = ("mlp", "logistic", "cnn5", "spfl_cnn", "conv_gn", "leaf_cnn", "pfl_cnn")
"""Models that vectorized execution supports (no BatchNorm statistics; dropout only as a
leaf of a layer chain)."""

DROPOUT_LAYERS: tuple[type[nn.Module], ...] = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)
"""Dropout layers vectorized clients run (multiplicative noise; not alpha dropout)."""


@dataclass
class SGDTask:
    """One client's local SGD as :func:`vectorized_local_sgd` runs it: the same inputs as
    :func:`~fedclock.algorithms.training.local_sgd` (start weights, data, hyper-parameters,
    task generator, step count), plus an optional proximal term ``mu/2 ||w - center||^2``
    (``center`` defaults to the start weights) and an optional affine edit of every step's
    gradient, ``g <- grad_keep * g + grad_shift`` (a flat vector; what an ``after_backward``
    hook of :func:`~fedclock.algorithms.training.local_sgd` does for SCAFFOLD's correction
    and FedCM's momentum mix), applied after the proximal term and before clipping."""

    start: torch.Tensor
    data: ClientData
    params: AlgorithmParams
    rng: torch.Generator
    steps: int
    prox_mu: float = 0.0
    prox_center: torch.Tensor | None = None
    grad_keep: float = 1.0
    grad_shift: torch.Tensor | None = None


class VectorizableAlgorithm(Protocol):
    """What an algorithm implements to be run K clients at a time (besides the
    ``vectorizable`` flag)."""

    def sgd_task(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """The local SGD ``client_update`` would run (drawing from ``rng`` what it draws first)."""
        ...

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """The result ``client_update`` returns after that SGD ended at ``local``."""
        ...


SGDPlan = Generator[SGDTask, tuple[torch.Tensor, dict[str, float]], ClientResult]
"""A client step written as a generator: it yields each local SGD it runs, is sent back
that SGD's ``(final weights, metrics)``, and returns the task's result (Ditto runs two
SGDs per task, the global model's then the personal one's)."""


def sgd_plan(algorithm: Any, payload: Tensors, client_state: Tensors | None, data: ClientData,
             rng: torch.Generator) -> SGDPlan:
    """The algorithm's client step as an :data:`SGDPlan`: its own ``sgd_plan`` when it has
    one, else the single SGD of ``sgd_task`` followed by ``sgd_result``."""
    own = getattr(algorithm, "sgd_plan", None)
    if own is not None:
        return own(payload, client_state, data, rng)
    return _one_sgd(algorithm, payload, client_state, data, rng)


def _one_sgd(algorithm: Any, payload: Tensors, client_state: Tensors | None, data: ClientData,
             rng: torch.Generator) -> SGDPlan:
    local, metrics = yield algorithm.sgd_task(payload, client_state, data, rng)
    return algorithm.sgd_result(payload, client_state, data, local, metrics)


def is_vectorizable(cls: type) -> bool:
    """True when ``cls`` itself (not a base class) declares ``vectorizable = True``
    (:attr:`Algorithm.vectorizable <fedclock.algorithms.base.Algorithm.vectorizable>` is
    reset on every subclass that does not declare it)."""
    return issubclass(cls, Algorithm) and cls.vectorizable


def vectorize_problem(cls: type, params: Any, model_name: str) -> str | None:
    """A one-line error (starting with the field path) when ``cls`` with ``params`` cannot
    run vectorized on ``model_name``; None when it can."""
    if not is_vectorizable(cls):
        return f"algorithm {getattr(cls, 'name', cls.__name__)!r} does not support vectorized clients"
    assert issubclass(cls, Algorithm)
    if model_name not in VECTOR_MODELS:
        return (f"model {model_name!r} is not supported by vectorized clients "
                f"(allowed: {', '.join(VECTOR_MODELS)})")
    return cls.vectorize_params_problem(params)


def client_updates(algorithm: Algorithm, payloads: Sequence[Tensors], states: Sequence[Tensors | None],
                   datas: Sequence[ClientData], rngs: Sequence[torch.Generator]) -> list[ClientResult]:
    """``client_update`` of K clients, their local SGD run by :func:`vectorized_local_sgd`:
    the clients' :func:`sgd_plan` generators advance in lock-step, the SGDs they yield at
    the same point running together."""
    if not is_vectorizable(type(algorithm)):
        raise ValueError(f"algorithm {algorithm.name!r} does not support vectorized clients")
    plans = [sgd_plan(algorithm, p, s, d, r) for p, s, d, r in zip(payloads, states, datas, rngs)]
    return run_in_lockstep(algorithm, plans)


def run_in_lockstep(algorithm: Algorithm, plans: Sequence[Generator[SGDTask, Any, Any]]) -> list[Any]:
    """The return values of ``plans``, generators that yield the SGD tasks they need and are
    sent each task's result: every pass trains all pending tasks in one
    :func:`vectorized_local_sgd` call (a plan that returns without yielding has no task)."""
    pending: list[SGDTask | None] = []
    results: list[Any] = [None] * len(plans)
    for j, plan in enumerate(plans):
        try:
            pending.append(next(plan))
        except StopIteration as finished:
            pending.append(None)
            results[j] = finished.value
    while any(t is not None for t in pending):
        running = [j for j, t in enumerate(pending) if t is not None]
        outs = vectorized_local_sgd(algorithm.workspace, algorithm.model_factory,
                                    [pending[j] for j in running])  # type: ignore[misc]
        for j, out in zip(running, outs):
            try:
                pending[j] = plans[j].send(out)
            except StopIteration as finished:
                pending[j], results[j] = None, finished.value
    return results


def check_model(model: nn.Module) -> None:
    """Raise ValueError when ``model`` cannot be trained vectorized."""
    if any(True for _ in model.buffers()):
        raise ValueError("vectorized clients: the model has buffers (e.g. BatchNorm running statistics)")
    bad = [type(m).__name__ for m in model.modules()
           if isinstance(m, nn.modules.batchnorm._BatchNorm)
           or (isinstance(m, nn.modules.dropout._DropoutNd) and type(m) not in DROPOUT_LAYERS)]
    if bad:
        raise ValueError(f"vectorized clients: unsupported layer {bad[0]}")
    if any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules()) and layer_chain(model) is None:
        raise ValueError("vectorized clients: Dropout only as a layer of a FedModel whose body and head are "
                         "layer chains (nn.Sequential)")


def layer_chain(model: nn.Module) -> list[tuple[nn.Module, str]] | None:
    """The leaves of a :class:`~fedclock.algorithms.models.FedModel` whose body and head are
    chains (nested ``nn.Sequential``) and whose forward is ``head(body(x))``, in forward order,
    each with its qualified name; None for any other model."""
    from fedclock.algorithms.batched_net import chain_leaves

    leaves = chain_leaves(model)
    if leaves is None:
        return None
    names = {id(m): name for name, m in model.named_modules()}
    return [(m, names[id(m)]) for m in leaves]


def _dropout_plan(model: nn.Module, tasks: Sequence[SGDTask], sizes: Sequence[int], steps: Sequence[int],
                  shape: tuple[int, int, int], device: torch.device) -> list[tuple[torch.Tensor, float]]:
    """Per dropout layer of the chain (forward order): which entries every step of every
    client keeps, ``[S, K, B, *layer input per sample]`` booleans (padding: False), and the
    factor kept entries are multiplied by (``1 / (1 - p)`` as the layer computes it). Client
    ``j``'s masks are drawn as the sequential loop draws them (module docstring): under
    :func:`~fedclock.algorithms.training.seed_dropout` of its task generator, each step's
    layers in forward order, each layer called on ones of the client's batch shape."""
    chain = layer_chain(model)
    assert chain is not None, "check_model accepts dropout only in a layer chain"
    drops = [m for m, _ in chain if isinstance(m, nn.modules.dropout._DropoutNd)]
    if not drops:
        return []
    first = next((t.data for t in tasks if t.data.num_train > 0), tasks[0].data)
    inputs: dict[int, tuple[int, ...]] = {}

    def record(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        inputs.setdefault(id(module), tuple(args[0].shape[1:]))

    hooks = [m.register_forward_hook(record) for m in drops]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *first.x_train.shape[1:], dtype=first.x_train.dtype, device=device))
    finally:
        for h in hooks:
            h.remove()
    s, k, b = shape
    keep = [torch.zeros(s, k, b, *inputs[id(m)], dtype=torch.bool, device=device) for m in drops]
    scale = [1.0 for _ in drops]
    found = [False for _ in drops]
    try:
        model.train()
        with torch.no_grad():
            for j, task in enumerate(tasks):
                if steps[j] == 0:
                    continue
                with contextlib.ExitStack() as seeded:
                    seed_dropout(seeded, model, task.rng, device)
                    for step in range(steps[j]):
                        for i, m in enumerate(drops):
                            noise = m(torch.ones(sizes[j], *inputs[id(m)], device=device))
                            torch.ne(noise, 0, out=keep[i][step, j, :sizes[j]])
                            if not found[i]:  # every kept entry holds the same factor
                                top = float(noise.max())
                                scale[i], found[i] = (top, True) if top > 0 else (scale[i], False)
    finally:
        model.train(was_training)
    return list(zip(keep, scale))


def _noise(plan: Sequence[tuple[torch.Tensor, float]], step: int) -> list[torch.Tensor]:
    """The dropout noise of one step, per layer ``[K, B, *shape]`` float32: the kept entries'
    factor where kept, 0 elsewhere (the values the layer multiplied by)."""
    return [keep[step].to(torch.float32).mul_(factor) for keep, factor in plan]


def _per_client(values: Sequence[float], device: torch.device) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.float32, device=device)


def batch_sizes(tasks: Sequence[SGDTask]) -> list[int]:
    """Each task's batch size (smaller than ``batch_size`` when the client has fewer samples)."""
    return [min(t.params.batch_size, t.data.num_train) for t in tasks]


def _batch_plan(tasks: Sequence[SGDTask], device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inputs [S, K, B, *sample], labels [S, K, B], sample mask [S, K, B], step mask [S, K])
    with S the most steps and B the largest batch of the group: every client's batches
    gathered once, before training, from its own train set (only the samples it will use;
    padded entries are zeros with mask 0)."""
    sizes = batch_sizes(tasks)
    k, b = len(tasks), max(max(sizes), 1)
    steps = [t.steps if t.data.num_train > 0 else 0 for t in tasks]
    s = max(steps)
    first = next((t.data for t in tasks if t.data.num_train > 0), tasks[0].data)
    x = torch.zeros(s, k, b, *first.x_train.shape[1:], dtype=first.x_train.dtype, device=device)
    y = torch.zeros(s, k, b, dtype=first.y_train.dtype, device=device)
    mask = torch.zeros(s, k, b, dtype=torch.float32)
    active = torch.zeros(s, k, dtype=torch.bool)
    for j, task in enumerate(tasks):
        if steps[j] > 0:
            drawn = torch.stack(list(batches(task.data.num_train, task.params.batch_size, steps[j], task.rng)))
            on_data = drawn.to(task.data.x_train.device)
            x[:steps[j], j, :sizes[j]] = task.data.x_train[on_data]
            y[:steps[j], j, :sizes[j]] = task.data.y_train[on_data]
            mask[:steps[j], j, :sizes[j]] = 1.0
            active[:steps[j], j] = True
    return x, y, mask.to(device), active.to(device)


def vectorized_local_sgd(model: nn.Module, factory: ModelFactory,
                         tasks: Sequence[SGDTask]) -> list[tuple[torch.Tensor, dict[str, float]]]:
    """Run every task's local SGD (see the module docstring) and return, per task, what
    :func:`~fedclock.algorithms.training.local_sgd` returns: the final flat float32 weights
    (a CPU copy) and ``{"train_loss", "steps"}``. ``model`` is a workspace of the
    architecture (its own weights are not used or changed); the data must be on its device."""
    if not tasks:
        return []
    check_model(model)
    for t in tasks:
        if t.steps < 0:
            raise ValueError(f"vectorized_local_sgd: steps must be >= 0, got {t.steps}")
    names = [name for name, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    device = next(model.parameters()).device
    k = len(tasks)
    for t in tasks:
        if t.start.numel() != factory.num_params:
            raise ValueError(f"flat vector has {t.start.numel()} values, the model {factory.num_params}")
    xs, ys, mask, active = _batch_plan(tasks, device)
    num_steps = xs.shape[0]
    if num_steps == 0:
        return [(t.start.detach().to(torch.float32).cpu().clone(), {"train_loss": float("nan"), "steps": 0})
                for t in tasks]
    dropout = _dropout_plan(model, tasks, batch_sizes(tasks), active.sum(0).tolist(),
                            (num_steps, k, xs.shape[2]), device)

    # Layer chains (MLP, logistic, the two-convolution CNNs) run through BatchedNet's explicit
    # batched forward/backward on one [K, ...] tensor per parameter in the flat vector's own
    # element order (no layout copies); other models (ConvGN) through vmap(functional_call).
    net = BatchedNet.plan(model) if device.type == "cpu" else None  # other devices: vmap (not measured)
    if net is not None and net.uses_images() and xs.dim() != 6:
        net = None

    # vmap path: matrices (linear layers' weights) are stored transposed, [K, in, out]: vmap's
    # batched matmul then produces their gradients in this layout, and the in-place update reads
    # both tensors contiguously (in the [K, out, in] layout the gradient arrives transposed and
    # the update's strided reads cost more than the whole forward and backward pass).
    transposed = [len(shape) == 2 for shape in shapes]

    def split(vectors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Per-client flat vectors -> one stacked tensor per parameter (BatchedNet's layout, or
        the vmap layout, filled client by client: a batched transposing copy is several times
        slower)."""
        if net is not None:
            return net.split([v.to(device, torch.float32) for v in vectors])
        out, offset = [], 0
        for shape, flip in zip(shapes, transposed):
            n = shape.numel()
            stored = torch.empty(k, *(tuple(reversed(shape)) if flip else shape), device=device)
            for j, vector in enumerate(vectors):
                piece = vector[offset:offset + n].view(shape)
                stored[j].copy_(piece.t() if flip else piece)
            out.append(stored)
            offset += n
        return out

    weights = split([t.start.detach() for t in tasks])
    net_grads = [torch.empty_like(w) for w in weights] if net is not None else []
    lr = _per_client([t.params.lr for t in tasks], device)
    momentum = _per_client([t.params.momentum for t in tasks], device)
    decay = _per_client([t.params.weight_decay for t in tasks], device)
    clip = [t.params.max_grad_norm for t in tasks]
    max_norm = _per_client([c if c is not None else 0.0 for c in clip], device)
    clipped = torch.tensor([c is not None for c in clip], device=device)
    mu = _per_client([t.prox_mu for t in tasks], device)
    proximal = bool((mu > 0).any())
    centers = split([(t.prox_center if t.prox_center is not None else t.start).detach() for t in tasks]) \
        if proximal else []
    grad_keep = _per_client([t.grad_keep for t in tasks], device)
    edited = any(t.grad_keep != 1.0 or t.grad_shift is not None for t in tasks)
    shifts = split([t.grad_shift.detach() if t.grad_shift is not None else torch.zeros_like(t.start)
                    for t in tasks]) if edited else []
    use_momentum = bool((momentum > 0).any())
    use_decay = bool((decay > 0).any())
    buffers = [torch.zeros_like(w) for w in weights] if use_momentum else []
    loss_sum = torch.zeros(k, device=device)
    every_step_all = bool(active.all())
    lr_0, momentum_0 = tasks[0].params.lr, tasks[0].params.momentum
    same_lr = all(t.params.lr == lr_0 for t in tasks)
    same_momentum = all(t.params.momentum == momentum_0 for t in tasks)

    def forward(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(model, params, (x,))

    chain = layer_chain(model) if dropout else None

    def forward_masked(params: dict[str, torch.Tensor], x: torch.Tensor, noise: list[torch.Tensor]) -> torch.Tensor:
        """The chain layer by layer, each dropout layer replaced by its stored noise."""
        assert chain is not None
        h, d = x, 0
        for m, name in chain:
            if isinstance(m, nn.modules.dropout._DropoutNd):
                h, d = h * noise[d], d + 1
            else:
                own = {n: params[f"{name}.{n}"] for n, _ in m.named_parameters()}
                h = functional_call(m, own, (h,))
        return h

    batched, masked = vmap(forward), vmap(forward_masked)
    plain_sgd = (not proximal and not edited and not bool(clipped.any()) and not use_decay and not use_momentum
                 and same_lr)

    def col(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return v.view(-1, *([1] * (like.dim() - 1)))

    for s in range(num_steps):
        m, on = mask[s], active[s]
        all_on = every_step_all or bool(on.all())
        noise = _noise(dropout, s)
        if net is not None:
            # plain SGD with every client active: the update is fused into the backward pass
            if plain_sgd and all_on:
                loss_sum += net.step(weights, xs[s], ys[s], m, None, lr_0, noise=noise)
                continue
            losses = net.step(weights, xs[s], ys[s], m, net_grads, noise=noise)
            grads = list(net_grads)
        else:
            leaves = [w.requires_grad_(True) for w in weights]
            stacked = {n: w.transpose(1, 2) if f else w for n, w, f in zip(names, leaves, transposed)}
            logits = masked(stacked, xs[s], noise) if dropout else batched(stacked, xs[s])
            per_sample = F.cross_entropy(logits.flatten(0, 1), ys[s].flatten(), reduction="none").view_as(m)
            losses = (per_sample * m).sum(1) / m.sum(1).clamp(min=1.0)
            grads = list(torch.autograd.grad(losses.sum(), leaves))
            weights = [w.detach() for w in leaves]
        with torch.no_grad():
            # in place where possible: fresh large tensors every step cost more than the arithmetic
            loss_sum += losses if all_on else losses * on
            if proximal:
                for g, w, c in zip(grads, weights, centers):
                    g.add_(col(mu, g) * (w - c))
            if edited:
                for g, shift in zip(grads, shifts):
                    g.mul_(col(grad_keep, g)).add_(shift)
            if clipped.any():
                norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1).norm(dim=1)
                factor = torch.where(clipped, (max_norm / (norms + 1e-6)).clamp(max=1.0), torch.ones_like(norms))
                for g in grads:
                    g.mul_(col(factor, g))
            if use_decay:
                for g, w in zip(grads, weights):
                    g.addcmul_(col(decay, g), w)
            step_lr = lr if all_on else lr * on
            if not all_on:  # a finished client's gradient is zeroed and its momentum kept (factor 1)
                for g in grads:
                    g.mul_(col(on.to(g.dtype), g))
            if use_momentum:
                keep = momentum if all_on else torch.where(on, momentum, torch.ones_like(momentum))
                for b, g in zip(buffers, grads):
                    if all_on and same_momentum:
                        b.mul_(momentum_0).add_(g)
                    else:
                        b.mul_(col(keep, b)).add_(g)
                grads = buffers
            for w, g in zip(weights, grads):
                if all_on and same_lr:  # torch.optim.SGD's own update: w + (-lr) g
                    w.add_(g, alpha=-lr_0)
                else:
                    w.addcmul_(col(step_lr, w), g, value=-1.0)
    done = active.sum(0).tolist()
    sums = loss_sum.cpu()

    def metrics(j: int) -> dict[str, float]:
        return {"train_loss": float(sums[j]) / done[j] if done[j] else float("nan"), "steps": int(done[j])}

    if net is not None:
        return [(net.join(weights, j).cpu(), metrics(j)) for j in range(k)]
    flat = torch.empty(k, factory.num_params)
    offset = 0
    for w, shape, flip in zip(weights, shapes, transposed):
        n = shape.numel()
        for j in range(k):
            flat[j, offset:offset + n].view(shape).copy_(w[j].t() if flip else w[j])
        offset += n
    return [(flat[j].clone(), metrics(j)) for j in range(k)]
