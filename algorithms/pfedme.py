"""pFedMe (Dinh, Tran, Nguyen 2020): personalized FL with Moreau envelopes."""
from __future__ import annotations

from typing import Callable, ClassVar

import torch
from pydantic import Field
from torch import nn

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult, \
    ServerState, Tensors, evaluate_flat
from fedclock.algorithms.training import local_sgd, model_result


class PFedMeParams(AlgorithmParams):
    """pFedMe hyper-parameters: ``lr`` is the local step eta on ``w_p``."""

    lr: float = Field(default=0.005, gt=0, description="eta, the local step on w_p")
    personal_lr: float = Field(default=0.05, gt=0, description="step of the inner solver for theta_p")
    lamda: float = Field(default=15.0, gt=0, description="lambda, the Moreau-envelope regularization")
    inner_steps: int = Field(default=5, ge=1, description="K, inner steps solving for theta_p per local round")
    beta: float = Field(default=1.0, gt=0, description="server mixing: w <- (1 - beta) w + beta mean(w_p)")


class PFedMe(Algorithm[PFedMeParams]):
    """pFedMe.

    Dinh, Tran, Nguyen, "Personalized Federated Learning with Moreau Envelopes", NeurIPS 2020.

    * Client ``p`` copies ``w_p = w``; each of its ``local_steps(n)`` local rounds draws one
      mini-batch and runs ``inner_steps`` (K) gradient steps of ``personal_lr`` on
      ``f_p(theta; batch) + lambda/2 ||theta - w_p||^2`` from ``theta = w_p`` (the
      approximate prox), then ``w_p <- w_p - eta lambda (w_p - theta)`` (``eta`` = ``lr``).
      The outer step goes through the shared :func:`local_sgd` loop (a ``grad_fn`` that
      solves for ``theta`` and sets ``grad = lambda (w_p - theta)``).
    * Uploads ``w_p``; keeps the last ``theta_p`` as client state (its personalized model).
    * Server: ``w <- (1 - beta) w + beta * mean_p w_p`` (equal weights over the round's
      arrivals; an empty round changes nothing).
    * Personalized accuracy: the client's ``theta_p`` (the global model before its first task).
    * A local round's K inner passes are counted as the task's cost.
    """

    name: ClassVar[str] = "pfedme"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    summary: ClassVar[str] = "pFedMe: Moreau-envelope personalized models theta_p, server mixes local w_p"
    paper: ClassVar[str] = "Dinh, Tran, Nguyen, Personalized Federated Learning with Moreau Envelopes, NeurIPS 2020"
    Params: ClassVar[type[AlgorithmParams]] = PFedMeParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    upload_is_model: ClassVar[bool] = True

    def init_server(self, rng: torch.Generator) -> ServerState:
        return ServerState(tensors={"weights": self.model_factory.initial_weights(rng)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"weights": state.tensors["weights"]}

    def prox_grad_fn(self, theta_out: list[torch.Tensor]) -> Callable[[nn.Module, Callable[[], torch.Tensor]], None]:
        """The ``grad_fn`` of one local round: solve for theta on the batch, then set the
        gradient of ``w_p`` to ``lambda (w_p - theta)``; ``theta_out`` receives the last theta."""
        p = self.params

        def grad_fn(model: nn.Module, closure: Callable[[], torch.Tensor]) -> None:
            params = [q for q in model.parameters() if q.requires_grad]
            w = [q.detach().clone() for q in params]
            for _ in range(p.inner_steps):
                loss = closure()
                grads = torch.autograd.grad(loss, params)
                with torch.no_grad():
                    for q, g, w0 in zip(params, grads, w):
                        q.sub_(p.personal_lr * (g + p.lamda * (q - w0)))
            theta = [q.detach().clone() for q in params]
            with torch.no_grad():
                for q, w0, th in zip(params, w, theta):
                    q.copy_(w0)
                    q.grad = p.lamda * (w0 - th)
            theta_out[:] = [torch.cat([t.reshape(-1) for t in theta]).float().cpu()]

        return grad_fn

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        theta: list[torch.Tensor] = []
        local, metrics = local_sgd(self.workspace, self.model_factory, payload["weights"], data, self.params, rng,
                                   self.task_steps(data), grad_fn=self.prox_grad_fn(theta))
        return model_result(local, {"theta": theta[0]}, data, metrics)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        w = state.tensors["weights"]
        mean = torch.stack([a.upload["weights"].to(w) for a in arrivals]).mean(dim=0)
        new = (1.0 - self.params.beta) * w + self.params.beta * mean
        return state.evolve(tensors={**state.tensors, "weights": new},
                            extra=dict(state.extra)), True

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        weights = client_state["theta"] if client_state is not None else payload["weights"]
        return evaluate_flat(self.workspace, self.model_factory, weights, data.x_test, data.y_test, batch_size)
