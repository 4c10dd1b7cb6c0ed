"""Server optimizers applied to the aggregated pseudo-gradient (FedOpt, FedAvgM).

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan, "Adaptive Federated
Optimization", ICLR 2021, Algorithm 2 (FedAdagrad, FedYogi, FedAdam), and Hsu, Qi, Brown,
"Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification", arXiv:1909.06335, 2019, Sec. 3 (FedAvgM: server momentum).

``algorithm.server_optimizer: {name: sgd | adam | yogi | adagrad, ...}`` composes with any
algorithm whose server moves a global model (``state.tensors["weights"]``): the algorithm's
own server step is taken as the aggregated update ``Delta_t = w' - w_t`` (``w'`` the weights
the algorithm's :meth:`~fedclock.algorithms.base.Algorithm.server_receive` would set: for
FedAvg with ``server_lr: 1`` the sample-weighted mean client delta, for FedBuff the mean of
a full buffer), and the optimizer replaces that step by its own (Algorithm 2, lines 11-15)::

    m_t = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t = v_{t-1} + Delta_t^2                                      (adagrad)
    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  (yogi)
    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                    (adam)
    w_{t+1} = w_t + lr m_t / (sqrt(v_t) + tau)

with ``m_{-1} = 0`` and ``v_{-1} = tau^2`` (Algorithm 2 asks ``v_{-1} >= tau^2``; we take the
smallest value it allows) and **no bias correction** (Algorithm 2 has none). ``sgd`` is
server SGD with heavy-ball momentum, FedAvgM (Hsu et al. 2019, Sec. 3: ``v <- beta v +
Delta w``, ``w <- w - v`` with ``Delta w`` the negative of our ``Delta_t``)::

    m_t = momentum m_{t-1} + Delta_t,   w_{t+1} = w_t + lr m_t

(``momentum: 0`` and ``lr: 1`` give the algorithm's own step back exactly).

Defaults (Reddi et al. Sec. 5, "Optimizers and hyperparameters" as we read it): ``beta1 =
0.9``, ``beta2 = 0.99`` for all three adaptive methods, ``tau = 1e-3``; the paper tunes the
server learning rate per task over a grid (App. D), so our ``lr`` defaults (``0.01`` for Adam
and Yogi, ``0.1`` for Adagrad, ``1.0`` for ``sgd``: the typical best values of the authors'
runs, below) are starting points, not the paper's numbers.
FedAvgM's default ``momentum = 0.9`` is the value Reddi et al. use for FedAvgM (Sec. 5).

Checked against the authors' public code (github.com/google-research/federated, read for this
check: ``optimization/docs/hyperparameters.md``, the defaults and tuned values of the paper's
runs, and ``utils/optimizers/yogi.py``):

* ``tau`` (their ``epsilon``): 1e-3 is their recommended default; they tune it per task
  (best values 1e-5 .. 1e-1). Same as ours.
* ``beta1 = 0.9``: same. ``beta2``: their runs keep Keras' default 0.999 for Adam and Yogi
  (left untuned there); we keep 0.99, the value the paper states; ``beta2: 0.999`` follows
  the code.
* FedAvgM: ``momentum = 0.9`` with server lr 1 on most tasks (10^-0.5 on two). Same default.
* Server lr: tuned per task; their best values are 10^-2.5 .. 10^-0.5 for Adam and Yogi
  (10^-2 on the text tasks) and 10^-1.5 .. 10^1 for Adagrad (10^-1 on two of six tasks, the
  median). Our defaults: 0.01 for Adam and Yogi, 0.1 for Adagrad (0.01, below every value
  they found best, left FedAdagrad no better than FedAvg in
  ``tests/algorithms/test_server_optimizer_learning.py``'s setting).
* Two differences of their code from Algorithm 2, which we follow: their optimizers are
  Keras' (Adam with bias correction; their Yogi scales the rate by
  ``sqrt(1 - beta2^t) / (1 - beta1^t)`` too), and their Adagrad and Yogi start the second
  moment at 0 (``initial_accumulator_value=0.0``), ours at ``tau^2`` (Algorithm 2's
  ``v_{-1} >= tau^2``). The first changes early steps (the first by ``sqrt(1 - beta2) /
  (1 - beta1)``, about 1 with our betas); the second only where ``|Delta| ~ tau``.

When an optimizer is set, keep the algorithm's own server learning rate at 1: it scales
``Delta_t`` before the optimizer sees it. The optimizer's state lives in the server state
(``state.tensors["server_opt/m"]`` and ``["server_opt/v"]``), so it is checkpointed and
restored with the model. A receive that leaves the model unchanged (a FedBuff buffer not yet
full) does not step the optimizer.

Written here rather than with ``torch.optim``: Algorithm 2 differs from ``torch.optim.Adam``
(no bias correction, ``v_{-1} = tau^2``) and ``torch.optim`` has no Yogi; the state must be
plain named tensors of the server state, which ``torch.optim`` keeps in its own objects.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedclock.algorithms.base import ServerState

__all__ = ["SGDServerOptimizer", "AdamServerOptimizer", "YogiServerOptimizer", "AdagradServerOptimizer",
           "ServerOptimizerConfig", "M_KEY", "V_KEY"]

M_KEY = "server_opt/m"
"""The first moment (momentum buffer) in the server state's tensors."""
V_KEY = "server_opt/v"
"""The second moment of the adaptive optimizers in the server state's tensors."""


class _ServerOptimizerBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def step(self, weights: torch.Tensor, delta: torch.Tensor, tensors: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The new weights from ``weights`` and the aggregated update ``delta``, and the new
        optimizer state tensors (read from ``tensors``, initialized when absent)."""
        raise NotImplementedError

    def apply(self, before: ServerState, after: ServerState) -> ServerState:
        """``after`` (the algorithm's new state) with its weights replaced by the optimizer's
        step from ``before``'s weights along ``Delta_t = after.weights - before.weights``; the
        optimizer state is read from ``before`` and stored in the returned state."""
        weights = before.tensors["weights"]
        delta = after.tensors["weights"].to(weights) - weights
        new_weights, opt_state = self.step(weights, delta, before.tensors)
        return after.evolve(tensors={**after.tensors, "weights": new_weights, **opt_state})


class SGDServerOptimizer(_ServerOptimizerBase):
    """Server SGD with momentum (FedAvgM, Hsu et al. 2019, Sec. 3)."""

    name: Literal["sgd"]
    lr: float = Field(default=1.0, gt=0, le=1e6, description="server learning rate eta")
    momentum: float = Field(default=0.9, ge=0, lt=1, description="server momentum beta (FedAvgM); 0: plain server SGD")

    def step(self, weights: torch.Tensor, delta: torch.Tensor, tensors: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        m = tensors.get(M_KEY)
        m = delta.clone() if m is None else self.momentum * m.to(delta) + delta
        return weights + self.lr * m, {M_KEY: m}


class _AdaptiveServerOptimizer(_ServerOptimizerBase):
    """Algorithm 2 of Reddi et al. 2021; the variants differ only in the second moment."""

    lr: float = Field(default=0.01, gt=0, le=1e6, description="server learning rate eta")
    beta1: float = Field(default=0.9, ge=0, lt=1, description="first-moment decay")
    tau: float = Field(default=1e-3, gt=0, le=1e6, description="adaptivity tau (v starts at tau^2)")

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        """``v_t`` from ``v_{t-1}`` and the squared update ``Delta_t^2``."""
        raise NotImplementedError

    def step(self, weights: torch.Tensor, delta: torch.Tensor, tensors: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        m, v = tensors.get(M_KEY), tensors.get(V_KEY)
        m = torch.zeros_like(delta) if m is None else m.to(delta)
        v = torch.full_like(delta, self.tau ** 2) if v is None else v.to(delta)
        m = self.beta1 * m + (1.0 - self.beta1) * delta
        v = self.second_moment(v, delta * delta)
        return weights + self.lr * m / (v.sqrt() + self.tau), {M_KEY: m, V_KEY: v}


class AdamServerOptimizer(_AdaptiveServerOptimizer):
    """FedAdam: ``v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2``."""

    name: Literal["adam"]
    beta2: float = Field(default=0.99, ge=0, lt=1, description="second-moment decay")

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1.0 - self.beta2) * d2


class YogiServerOptimizer(_AdaptiveServerOptimizer):
    """FedYogi: ``v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)``."""

    name: Literal["yogi"]
    beta2: float = Field(default=0.99, ge=0, lt=1, description="second-moment decay")

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v - (1.0 - self.beta2) * d2 * torch.sign(v - d2)


class AdagradServerOptimizer(_AdaptiveServerOptimizer):
    """FedAdagrad: ``v_t = v_{t-1} + Delta_t^2``; server lr 0.1 by default (module docstring)."""

    name: Literal["adagrad"]
    lr: float = Field(default=0.1, gt=0, le=1e6, description="server learning rate eta")

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v + d2


ServerOptimizerConfig = Annotated[
    Union[SGDServerOptimizer, AdamServerOptimizer, YogiServerOptimizer, AdagradServerOptimizer],
    Field(discriminator="name"),
]
"""``algorithm.server_optimizer``: one of the four, chosen by ``name``."""
