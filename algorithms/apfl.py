"""APFL (Deng et al. 2020): adaptive mixture of a local and the global model."""
from __future__ import annotations

from typing import Callable, ClassVar

import torch
from pydantic import Field
from torch import nn
from torch.func import functional_call

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, EvalResult, Tensors
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.targets import target_cross_entropy
from fedclock.algorithms.training import BatchLoss, local_sgd


class APFLParams(FedAvgParams):
    """FedAvg hyper-parameters plus APFL's mixing weight."""

    alpha: float = Field(default=0.25, ge=0, le=1, description="initial mixing weight alpha_p of the local model")
    adapt_alpha: bool = Field(default=True, description="update alpha_p by gradient descent (clipped to [0, 1])")


class _Pair(nn.Module):
    """The global copy w, the local model v and alpha as one module, so one SGD step of
    :func:`local_sgd` on :func:`_apfl_loss` performs APFL's three simultaneous updates.
    Flat layout (``parameters()`` lists a module's own parameters before its children's):
    ``[alpha, w, v]``."""

    def __init__(self, factory: ModelFactory) -> None:
        super().__init__()
        self.w = factory.build()
        self.v = factory.build()
        self.alpha = nn.Parameter(torch.zeros(1))


def _apfl_loss(pair: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``F(w) + F(vbar)`` with ``vbar = alpha v + (1 - alpha) stopgrad(w)``: its gradient is
    ``grad F(w)`` for w, ``alpha grad F(vbar)`` for v and ``<v - w, grad F(vbar)>`` for alpha."""
    assert isinstance(pair, _Pair)
    a = pair.alpha[0]
    w_params = dict(pair.w.named_parameters())
    mixed = {k: a * v + (1 - a) * w_params[k].detach() for k, v in pair.v.named_parameters()}
    return target_cross_entropy(pair.w(x), y) + target_cross_entropy(functional_call(pair.w, mixed, (x,)), y)


class _Apply(nn.Module):
    """``loss(model, x, y)`` as a module call, so :func:`functional_call` can evaluate any
    batch loss at substituted parameters (parameter names: ``"model." + name``)."""

    def __init__(self, model: nn.Module, loss: BatchLoss) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model, x, y)


def apfl_objective(loss_w: BatchLoss, loss_v: BatchLoss) -> BatchLoss:
    """:func:`_apfl_loss` for any batch loss: ``loss_w(w) + loss_v(vbar)`` with ``vbar =
    alpha v + (1 - alpha) stopgrad(w)`` (two callables so each can keep its own random
    stream; the self-supervised form gives them twin streams, hence the same views)."""
    def loss(pair: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert isinstance(pair, _Pair)
        a = pair.alpha[0]
        w_params = dict(pair.w.named_parameters())
        mixed = {"model." + k: a * v + (1 - a) * w_params[k].detach() for k, v in pair.v.named_parameters()}
        return loss_w(pair.w, x, y) + functional_call(_Apply(pair.w, loss_v), mixed, (x, y))

    return loss


class APFL(FedAvg):
    """APFL: Adaptive Personalized Federated Learning.

    Deng, Kamani, Mahdavi, "Adaptive Personalized Federated Learning", arXiv:2003.13461, 2020.

    Client p keeps a local model v_p and a mixing weight alpha_p (persistent state
    ``{"personal": v_p, "alpha": [alpha_p]}``; on the first task v_p is the received global
    model and alpha_p = ``alpha``). Each local step on a batch, all with the values before
    the step: ``w <- w - eta grad F(w)``; ``vbar = alpha v + (1 - alpha) w``;
    ``v <- v - eta alpha grad F(vbar)`` (the gradient of F(vbar) with respect to v);
    ``alpha <- clip_[0,1](alpha - eta <v - w, grad F(vbar)>)`` (if ``adapt_alpha``). The
    client uploads ``w - w^t``; the server is FedAvg. Personalized accuracy: the mixture
    ``alpha_p v_p + (1 - alpha_p) w`` with w the latest received global model.
    **Choices:** the three updates are simultaneous (one SGD step on a joint objective,
    :func:`_apfl_loss`); alpha takes a projected step of its own inside the step hook, so
    momentum, weight decay and gradient clipping act on w and v only; a step's two passes
    are counted (:mod:`fedclock.algorithms.task_cost`).

    Objective (``objective``): ``supervised`` is the paper's cross-entropy; ``simclr`` /
    ``simsiam`` give FedStyle's Table 1 "APFL" baseline: w and v are both encoder +
    projector (+ predictor) models of the self-supervised factory (the flat layout
    ``[alpha, w, v]`` is the same), and F is the unlabeled two-view loss
    (:func:`apfl_objective`): F(w) and F(vbar) see the same two augmented views of the batch
    (two loss callables on twin generators). The client's representation (k-NN monitor,
    personalization linear evaluation) is the encoder of the mixture
    ``alpha_p v_p + (1 - alpha_p) w``.
    """

    name: ClassVar[str] = "apfl"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised", "simclr", "simsiam"})
    summary: ClassVar[str] = "FedAvg plus a local model mixed with the global one by an adaptive alpha"
    paper: ClassVar[str] = "Deng et al., Adaptive Personalized Federated Learning, arXiv 2020"
    Params: ClassVar[type[AlgorithmParams]] = APFLParams

    def __init__(self, params: APFLParams, model_factory: ModelFactory) -> None:
        super().__init__(params, model_factory)
        self._pair: _Pair | None = None

    def _pair_module(self) -> _Pair:
        if self._pair is None:
            self._pair = _Pair(self.model_factory).to(next(self.workspace.parameters()).device)
        return self._pair

    def to(self, device: torch.device | str) -> "APFL":
        super().to(device)
        self._pair = self._pair_module().to(device)
        return self

    def _state(self, payload: Tensors, client_state: Tensors | None) -> tuple[torch.Tensor, torch.Tensor]:
        if client_state is None:
            p: APFLParams = self.params
            return payload["weights"], torch.tensor([p.alpha], dtype=torch.float32)
        return client_state["personal"], client_state["alpha"]

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        p: APFLParams = self.params
        start = payload["weights"]
        personal, alpha = self._state(payload, client_state)
        pair = self._pair_module()

        def alpha_step(module: nn.Module) -> None:
            assert isinstance(module, _Pair)
            a = module.alpha
            if p.adapt_alpha and a.grad is not None:
                with torch.no_grad():
                    a.sub_(p.lr * a.grad).clamp_(0.0, 1.0)
            a.grad = None

        flat = torch.cat([alpha.to(torch.float32), start.to(torch.float32), personal.to(torch.float32)])
        objective: BatchLoss = _apfl_loss
        if self.ssl:
            twin = torch.Generator(device=rng.device)
            twin.set_state(rng.get_state())
            loss_w, loss_v = self.objective_loss(rng), self.objective_loss(twin)
            assert loss_w is not None and loss_v is not None
            objective = apfl_objective(loss_w, loss_v)
        out, metrics = local_sgd(pair, _PairFactory, flat, data, p, rng, self.task_steps(data),
                                 loss_fn=objective, after_backward=alpha_step)
        n = self.model_factory.num_params
        new_alpha, local, new_personal = out[:1].clone(), out[1:n + 1], out[n + 1:].clone()
        metrics = {**metrics, "alpha": float(new_alpha[0])}
        return ClientResult(upload={"delta": local - start.to(local)},
                            state={"personal": new_personal, "alpha": new_alpha},
                            num_samples=data.num_train, metrics=metrics)

    def mixture(self, payload: Tensors, client_state: Tensors | None) -> torch.Tensor:
        """The personalized model ``alpha_p v_p + (1 - alpha_p) w`` (flat)."""
        personal, alpha = self._state(payload, client_state)
        a = float(alpha[0])
        return a * personal + (1 - a) * payload["weights"].to(personal)

    def representation(self, payload: Tensors, client_state: Tensors | None
                       ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The encoder of the personalized mixture ``alpha_p v_p + (1 - alpha_p) w``."""
        return self.encoder_from_weights(self.mixture(payload, client_state))

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        return self.evaluate_personal(payload, client_state, data, batch_size, self.mixture)

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The personalized mixture after one more task (CKA analysis)."""
        result = self.client_update(payload, client_state, data, rng)
        return self.mixture(payload, result.state)


class _PairFactory:
    """The two flat-vector operations :func:`local_sgd` needs, for any module."""

    flatten = staticmethod(ModelFactory.flatten)
    load_flat = staticmethod(ModelFactory.load_flat)
