"""The client-level momentum core shared by FedCM, MoFedSAM and FedMRUR (with its ablations).

One class, :class:`ClientMomentum`, implements the common protocol; the registered
algorithms only switch three features on or off through class attributes:

* ``use_sam``: the local gradient is the SAM gradient (:mod:`~fedclock.algorithms.sam`);
* ``normalized``: the server aggregates by direction of the sum and mean of the norms
  (:func:`normalized_aggregate`) instead of the plain mean;
* ``hyperbolic``: the local objective adds FedMRUR's manifold regularizer
  ``gamma * mean_batch exp(d_L^2(L_p, L_g) / sigma)`` (:mod:`~fedclock.algorithms.hyperbolic`).

Protocol (FedCM, Xu et al. 2021, Algorithm 1; MoFedSAM, Qu et al. 2022; FedMRUR, An et al.
2023, Sec. 3.2 and Algorithm 1). Algorithm 1 taken literally (line 13 ``Delta_p = w^K - w^0``,
line 16 ``w <- w - eta_g Delta``) would move the model against the clients' own updates; the
model step here adds the aggregate of the ``Delta_p``:

* Round ``t``: the server sends ``w_t`` and ``Delta_t`` (``"momentum"``, zero at ``t = 0``), so
  the download is twice the model (plus the round index when the local rate decays).
* Client ``p``: ``K_p`` local steps (``K_p = local_steps(n_p)``, or fewer under partial work)
  of ``w <- w - eta_l v`` with ``v = alpha g + (1 - alpha) Delta_t``, ``g`` the (SAM) gradient
  of the local objective; the mix is applied to ``.grad`` after the gradient is computed, and
  weight decay, if set, is added by the optimizer on top of ``v``. Upload the model delta
  ``"delta" = Delta_p = w_p^{t,K_p} - w_t`` (FedMRUR's Algorithm 1, line 13).
* Server: ``D = mean_p Delta_p``, or FedMRUR's normalized aggregate of the ``Delta_p``
  (``(mean_p ||Delta_p||) sum_p Delta_p / ||sum_p Delta_p||``, Algorithm 1 line 15), and the
  model step ``w_{t+1} = w_t + eta_g D`` (line 16; ``eta_g = 1`` in the papers' setups). The
  clients' momentum is ``D`` in gradient units, ``Delta_{t+1} = -D / tau`` with
  ``tau = mean_p (K_p eta_l)`` over the arrivals (the server recomputes ``K_p`` from the steps
  each arrival reports, or from ``num_samples``, and ``eta_l`` from the version each task was
  dispatched with). With equal ``K`` this is FedCM's ``Delta_{t+1} = -1/(eta_l K |S|) sum_p
  Delta_p``; with unequal ``K_p`` (unequal client sizes at equal epochs, partial work) the
  model still moves by the papers' mean (or normalized aggregate) of the ``Delta_p``, not by a
  mean of per-step averages rescaled by the mean step count. **Choices**: ``Delta`` is kept in
  gradient units (the unit ``v`` mixes it with; FedMRUR's box writes line 15 in model units
  and uses the same symbol in line 10, FedCM divides by ``eta_l K``; the FL-Simulator code of
  the FedSMOO authors (FedMRUR's ref. [36], with FedMRUR's Li Shen), woodenchild95/FL-Simulator
  server/MoFedSAM.py, moves the model by ``eta_g`` times the mean delta and sends
  ``-mean delta / (K eta_l)`` as the momentum, as here); means are unweighted (uniform client
  sampling, as in the papers), not FedAvg's sample weights.

Guards: an upload with a NaN or infinite entry (local training diverged) is rejected with
:class:`NonFiniteUpload` naming the client, instead of spreading through the aggregate (the
normalized aggregate of a NaN is NaN everywhere). FedMRUR's regularizer compares the local
body in training mode with the frozen global body in evaluation mode, so a body with
BatchNorm or dropout makes the two differ even at equal weights, and a body without
parameters makes the regularizer a constant: both give a :class:`UserWarning` when the
regularizer is first built (:func:`regularizer_warnings`).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from fedclock.algorithms.base import AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, Tensors
from fedclock.algorithms.fedavg import FedAvgParams, FedAvgWithServerVector
from fedclock.algorithms.flatops import add_to_grads, param_views
from fedclock.algorithms.hyperbolic import manifold_regularizer
from fedclock.algorithms.sam import sam_grad_fn
from fedclock.algorithms.schedules import local_lr
from fedclock.algorithms.vectorized import SGDTask



class ClientMomentumParams(FedAvgParams):
    """FedAvg's hyper-parameters plus the momentum mixing weight ``alpha``."""

    alpha: float = Field(default=0.1, gt=0, le=1, description="weight of the local gradient in "
                         "v = alpha g + (1 - alpha) Delta_t (1 = no momentum)")


class NonFiniteUpload(ValueError):
    """A client uploaded a delta with a NaN or infinite entry."""


def check_finite(name: str, arrivals: list[Arrival], deltas: torch.Tensor) -> None:
    """Raise :class:`NonFiniteUpload` naming the first client whose row of ``deltas`` is not finite."""
    finite = torch.isfinite(deltas).reshape(len(arrivals), -1).all(dim=1)
    if bool(finite.all()):
        return
    bad = arrivals[int((~finite).nonzero()[0, 0])]
    raise NonFiniteUpload(f"{name}: client {bad.client} uploaded a non-finite model delta (NaN or inf): its local "
                          f"training diverged; lower algorithm.lr (or algorithm.rho / algorithm.gamma), or raise "
                          f"algorithm.sigma")


def regularizer_warnings(name: str, body: nn.Module) -> list[str]:
    """Why FedMRUR's manifold regularizer would misbehave on ``body`` (empty when it is fine):
    BatchNorm or dropout layers (train-mode local features against eval-mode global ones differ
    at equal weights), or no trainable parameter (the regularizer is then a constant)."""
    found = []
    kinds = sorted({type(m).__name__ for m in body.modules()
                    if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd))})
    if kinds:
        found.append(f"{name}: the model's body has {', '.join(kinds)} layers: the manifold regularizer compares "
                     f"the local body in training mode with the global body in evaluation mode, so it is not zero "
                     f"at equal weights (use a GroupNorm model such as resnet18_gn)")
    if not any(q.requires_grad for q in body.parameters()):
        found.append(f"{name}: the model's body has no trainable parameters: the manifold regularizer is a "
                     f"constant and has no effect")
    return found


def norm_gain(updates: torch.Tensor) -> float:
    """How much FedMRUR's normalized aggregation lengthens the plain mean's step for these
    stacked updates: ``mean_p ||u_p|| / ||mean_p u_p||`` (Sec. 3.2, Fig. 2: client p's
    contribution rises from ``||u_p|| cos theta_p`` to ``||u_p||``). At least 1 (triangle
    inequality); 1 when the updates are parallel, ``sqrt(P)`` for ``P`` orthogonal updates of
    equal norm; NaN when the mean is zero."""
    mean_norm = float(torch.linalg.vector_norm(updates, dim=1).mean())
    norm = float(torch.linalg.vector_norm(updates.mean(dim=0)))
    return mean_norm / norm if norm > 0 else float("nan")


def normalized_aggregate(updates: torch.Tensor) -> torch.Tensor:
    """FedMRUR's normalized aggregation of stacked updates (one row per client):
    ``(mean_p ||u_p||) * sum_p u_p / ||sum_p u_p||``; zero when the sum is zero."""
    total = updates.sum(dim=0)
    norm = torch.linalg.vector_norm(total)
    if float(norm) == 0.0:
        return torch.zeros_like(total)
    mean_norm = torch.linalg.vector_norm(updates, dim=1).mean()
    return total * (mean_norm / norm)


class ClientMomentum(FedAvgWithServerVector):
    """Base of the client-momentum family (not registered itself); see the module docstring."""

    use_sam: ClassVar[bool] = False
    normalized: ClassVar[bool] = False
    hyperbolic: ClassVar[bool] = False
    Params: ClassVar[type[AlgorithmParams]] = ClientMomentumParams
    server_vector: ClassVar[str] = "momentum"

    def __init__(self, params: Any, model_factory: Any) -> None:
        super().__init__(params, model_factory)
        self._frozen: nn.Module | None = None

    # ------------------------------------------------------------------ server
    def aggregate(self, deltas: torch.Tensor) -> torch.Tensor:
        """The model step ``D`` from the stacked ``Delta_p``: normalized aggregate or plain mean."""
        return normalized_aggregate(deltas) if self.normalized else deltas.mean(dim=0)

    def horizon(self, arrival: Arrival) -> float:
        """``K_p eta_l`` of an arrival's task (0 for a client without training data); ``K_p``
        is the steps the client reported (fewer than ``local_steps(n)`` under partial work)."""
        if arrival.num_samples <= 0:
            return 0.0
        steps = arrival.steps if arrival.steps is not None else self.local_steps(arrival.num_samples)
        return steps * local_lr(self.params, arrival.version_dispatched)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        weights = state.tensors["weights"]
        deltas = torch.stack([a.upload["delta"].to(weights) for a in arrivals])
        check_finite(self.name, arrivals, deltas)
        step = self.aggregate(deltas)
        tau = sum(self.horizon(a) for a in arrivals) / len(arrivals)
        momentum = -step / tau if tau > 0 else torch.zeros_like(step)
        new_weights = weights + self.server_lr_at(state.version) * step
        return state.evolve(tensors={**state.tensors, "weights": new_weights, "momentum": momentum},
                            extra={**state.extra, "update_norm_gain": norm_gain(deltas)}), True

    def server_metrics(self, state: ServerState) -> dict[str, float]:
        """``update_norm_gain``: :func:`norm_gain` of the latest aggregation's ``Delta_p``, for
        the plain mean too (what normalization would have lengthened it by); NaN before the
        first aggregation."""
        return {**super().server_metrics(state), "update_norm_gain": state.extra.get("update_norm_gain", float("nan"))}

    # ------------------------------------------------------------------ client
    def to(self, device: torch.device | str) -> "ClientMomentum":
        super().to(device)
        if self._frozen is not None:
            self._frozen = self._frozen.to(device)
        return self

    @property
    def frozen(self) -> nn.Module:
        """A second model instance holding the received global weights (FedMRUR's L_g)."""
        if self._frozen is None:
            device = next(self.workspace.parameters()).device
            self._frozen = self.model_factory.build().to(device)
            self._frozen.requires_grad_(False)
            if self.params.gamma > 0:
                for text in regularizer_warnings(self.name, self.workspace.body):
                    warnings.warn(text, UserWarning, stacklevel=2)
        return self._frozen

    def regularized_loss(self, start: torch.Tensor) -> Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]:
        """Batch loss ``CE + gamma * R`` with
        ``R = mean_batch exp(d^2(lift(h_p(x)), lift(h_g(x))) / sigma)``
        (:func:`~fedclock.algorithms.hyperbolic.manifold_regularizer`), ``h_g`` the body of the
        received (frozen) global model; its features are computed once per batch (SAM's second
        pass reuses them)."""
        p = self.params
        frozen = self.frozen
        self.model_factory.load_flat(frozen, start)
        frozen.eval()
        cache: dict[str, torch.Tensor] = {}

        def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            if cache.get("x") is not x:
                with torch.no_grad():
                    cache["x"], cache["z"] = x, frozen.features(x)  # type: ignore[operator]
            zp = model.features(x)  # type: ignore[operator]
            logits = model.head(zp)  # type: ignore[operator]
            reg = manifold_regularizer(zp, cache["z"], p.beta, p.sigma)
            return F.cross_entropy(logits, y) + p.gamma * reg

        return loss

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        device = next(self.workspace.parameters()).device
        momentum = param_views(payload["momentum"], self.workspace)
        alpha = self.params.alpha
        hooks: dict[str, Any] = {"after_backward": lambda m: add_to_grads(m, momentum, scale=1.0 - alpha, keep=alpha)}
        if self.use_sam:
            hooks["grad_fn"] = sam_grad_fn(self.params.rho)
        if self.hyperbolic:
            hooks["loss_fn"] = self.regularized_loss(start.to(device))
        local, metrics = self.local_train(payload, data, rng, **hooks)
        return self.sgd_result(payload, client_state, data, local, metrics)

    def sgd_task(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """The local SGD with the momentum mix ``alpha g + (1 - alpha) Delta_t`` (vectorized
        clients; plain gradients only: SAM and the manifold regularizer are not vectorized)."""
        if self.use_sam or self.hyperbolic:
            raise ValueError(f"{self.name}: SAM and the manifold regularizer are not vectorized")
        task = super().sgd_task(payload, client_state, data, rng)
        alpha = self.params.alpha
        task.grad_keep = alpha
        task.grad_shift = (1.0 - alpha) * payload["momentum"].to(payload["weights"])
        return task

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Upload the model delta ``"delta" = w_K - w_t``; the client state passes through."""
        delta = local - payload["weights"].to(local.device)
        return ClientResult(upload={"delta": delta}, state=client_state, num_samples=data.num_train,
                            metrics=metrics)


