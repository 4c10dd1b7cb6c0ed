"""FedAvg-FT: FedAvg whose clients fine-tune the global model before testing."""
from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, ClientData, EvalResult, Tensors, epoch_steps
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.personal import finetune_evaluate, finetune_rng
from fedclock.algorithms.vectorized import SGDTask
from fedclock.algorithms.vectorized_eval import EvalPlan


class FedAvgFTParams(FedAvgParams):
    """FedAvg hyper-parameters plus the evaluation-time fine-tuning length."""

    finetune_epochs: float = Field(default=1.0, ge=0, description="epochs of local fine-tuning of the whole "
                                   "global model before a client tests it (0 = test the global model)")


class FedAvgFT(FedAvg):
    """FedAvg with local fine-tuning at evaluation (the personalized FedAvg baseline of the
    FedReCo paper's Table 1).

    Training and the server rule are exactly :class:`~fedclock.algorithms.fedavg.FedAvg`'s.
    Personalized accuracy: each client copies the current global model, fine-tunes all of it
    for ``finetune_epochs`` epochs (default 1) of SGD with the training settings (``lr``,
    ``batch_size``, momentum, clipping) on its own train split, and tests the fine-tuned
    copy on its test split. **Choices:** the fine-tuned copy is thrown away (it never feeds
    training), and the fine-tuning batches come from a generator seeded by the client id
    only (:func:`~fedclock.algorithms.personal.finetune_rng`), so evaluations are
    deterministic and consume no training randomness. Fine-tuning is evaluation work and is
    not charged virtual time. Global accuracy is the un-tuned global model.
    """

    name: ClassVar[str] = "fedavg_ft"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    summary: ClassVar[str] = "FedAvg, each client fine-tunes the global model before testing"
    paper: ClassVar[str] = ("baseline of Consensus Optimization at Representation (FedReCo); FedAvg: "
                            "McMahan et al., AISTATS 2017")
    Params: ClassVar[type[AlgorithmParams]] = FedAvgFTParams
    vectorizable: ClassVar[bool] = True  # FedAvg's training; fine-tuning is plain SGD (eval_plan)
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised"})  # not FedAvg's unlabeled objectives

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        params: FedAvgFTParams = self.params
        return finetune_evaluate(self.workspace, self.model_factory, payload["weights"], data, params,
                                 params.finetune_epochs, batch_size)

    def eval_plan(self, payload: Tensors, client_state: Tensors | None, data: ClientData) -> EvalPlan:
        """:meth:`evaluate_client` for vectorized evaluation: the same fine-tuning SGD (all
        of the model, the training settings, :func:`~fedclock.algorithms.personal.finetune_rng`),
        then the tuned weights are tested."""
        params: FedAvgFTParams = self.params
        weights = payload["weights"]
        if params.finetune_epochs > 0 and data.num_train > 0:
            steps = epoch_steps(data.num_train, params.batch_size, params.finetune_epochs)
            weights, _ = yield SGDTask(weights, data, params, finetune_rng(data.client), steps)
        return weights
