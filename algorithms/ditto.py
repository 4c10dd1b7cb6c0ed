"""Ditto (Li et al. 2021): FedAvg plus a personal model pulled towards the global one."""
from __future__ import annotations

from typing import Callable, ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, EvalResult, Tensors
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.training import delta_result, local_sgd, proximal_loss, train_from
from fedclock.algorithms.vectorized import SGDPlan, SGDTask
from fedclock.algorithms.vectorized_eval import EvalPlan


class DittoParams(FedAvgParams):
    """FedAvg hyper-parameters plus Ditto's regularization and personal steps."""

    lam: float = Field(default=0.01, ge=0, description="lambda of the pull lambda/2 ||v - w^t||^2 of the personal "
                       "model towards the received global model (FedReCo paper's setup: 0.01)")
    personal_steps: int | None = Field(default=None, ge=1, description="steps s on the personal model per task "
                                       "(default: the same number as the global model's local steps)")


class Ditto(FedAvg):
    """Ditto.

    Li, Hu, Beirami, Smith, "Ditto: Fair and Robust Federated Learning Through
    Personalization", ICML 2021.

    The global model is trained exactly as in :class:`~fedclock.algorithms.fedavg.FedAvg`
    (local SGD from ``w^t``, the delta uploaded, sample-weighted mean on the server). Each
    client also keeps a personal model v_p (persistent state ``{"personal": v_p}``, equal to
    the received ``w^t`` on the client's first task) and per task runs ``personal_steps``
    SGD steps (default: as many as the global model's) on
    ``F_p(v) + lam/2 ||v - w^t||^2`` with the same ``lr`` and batch size. Personalized
    accuracy: v_p. **Choices:** the global model's steps run first, then the personal ones,
    drawing batches from the task's generator in that order (both are counted as the
    task's cost, :mod:`fedclock.algorithms.task_cost`).

    Objective (``objective``): ``supervised`` is the paper's cross-entropy; ``simclr`` /
    ``simsiam`` give FedStyle's Table 1 "Ditto" baseline: both the global and the personal
    model are encoder + projector (+ predictor) trained on the unlabeled two-view loss (the
    personal one plus the same pull towards ``w^t``), each phase with its own augmentation
    stream drawn from the task's generator. The client's representation (k-NN monitor,
    personalization linear evaluation) is the encoder of v_p.
    """

    name: ClassVar[str] = "ditto"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised", "simclr", "simsiam"})
    partial_work: ClassVar[bool] = False  # global steps then personal steps
    summary: ClassVar[str] = "FedAvg plus a personal model regularized towards the global model"
    paper: ClassVar[str] = "Li et al., Ditto: Fair and Robust Federated Learning Through Personalization, ICML 2021"
    Params: ClassVar[type[AlgorithmParams]] = DittoParams
    vectorizable: ClassVar[bool] = True  # both phases are SGD (the pull is a proximal term): sgd_plan

    def _personal_steps(self, n: int) -> int:
        p: DittoParams = self.params
        return p.personal_steps if p.personal_steps is not None else self.local_steps(n)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        p: DittoParams = self.params
        start = payload["weights"]
        local, metrics = train_from(self, start, data, rng, loss_fn=self.objective_loss(rng))
        personal = start if client_state is None else client_state["personal"]
        pull = proximal_loss(start, p.lam, self.workspace)
        personal, m_personal = local_sgd(self.workspace, self.model_factory, personal, data, p, rng,
                                         self._personal_steps(data.num_train), pull,
                                         loss_fn=self.objective_loss(rng))
        metrics = {**metrics, "personal_loss": m_personal["train_loss"]}
        return delta_result(local, start, {"personal": personal}, data, metrics)

    def sgd_plan(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDPlan:
        """:meth:`client_update` for vectorized clients (supervised objective): the global
        model's SGD, then the personal model's SGD with the pull as a proximal term around
        ``w^t``, both from the task's generator in that order."""
        p: DittoParams = self.params
        start = payload["weights"]
        local, metrics = yield SGDTask(start, data, p, rng, self.task_steps(data))
        personal, m_personal = yield SGDTask(self._personal(payload, client_state), data, p, rng,
                                             self._personal_steps(data.num_train), prox_mu=p.lam, prox_center=start)
        metrics = {**metrics, "personal_loss": m_personal["train_loss"]}
        return delta_result(local, start, {"personal": personal}, data, metrics)

    def _personal(self, payload: Tensors, client_state: Tensors | None) -> torch.Tensor:
        return payload["weights"] if client_state is None else client_state["personal"]

    def representation(self, payload: Tensors, client_state: Tensors | None
                       ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The encoder of the personal model v_p (the received model before a first task)."""
        return self.encoder_from_weights(self._personal(payload, client_state))

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        return self.evaluate_personal(payload, client_state, data, batch_size, self._personal)

    def eval_plan(self, payload: Tensors, client_state: Tensors | None, data: ClientData) -> EvalPlan:
        """:meth:`evaluate_client` for vectorized evaluation (supervised objective): test v_p."""
        return self._personal(payload, client_state)
        yield  # a generator that runs no SGD

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The personal model after one more task (CKA analysis)."""
        state = self.client_update(payload, client_state, data, rng).state
        assert state is not None  # Ditto's tasks always keep the personal model
        return state["personal"]
