"""FedBABU (Oh et al. 2022): body-only federated training under a frozen random head."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, EvalResult, Tensors
from fedclock.algorithms.body_avg import BodyAveraging
from fedclock.algorithms.personal import Part, finetune_evaluate, train_part


class FedBABUParams(AlgorithmParams):
    """Local SGD settings plus the evaluation fine-tuning."""

    finetune_epochs: float = Field(default=1.0, ge=0, description="epochs of local fine-tuning before a client "
                                   "tests (0: test the federated model)")
    finetune_part: Part = Field(default="all", description="what fine-tuning moves: all, body or head")


class FedBABU(BodyAveraging[FedBABUParams]):
    """FedBABU.

    Oh, Kim, Yun, "FedBABU: Toward Enhanced Representation for Federated Image
    Classification", ICLR 2022.

    The head is drawn once at random by the server (the initial model's head, the same for
    every client) and frozen during federated training. Client: ``local_epochs`` epochs (or
    ``local_steps`` steps) of SGD on the body only, under the frozen head; upload the body's
    change; no client state. Server: sample-weighted mean of body deltas
    (:class:`~fedclock.algorithms.body_avg.BodyAveraging`). Personalized accuracy: each
    client fine-tunes the federated model (body + frozen head) for ``finetune_epochs``
    (default 1) epochs, moving ``finetune_part`` (default the whole model, as in the paper's
    main protocol), then tests; fine-tuning batches come from a generator seeded by the
    client id (:func:`~fedclock.algorithms.personal.finetune_rng`). Global accuracy: the
    federated model itself (trained body + random head).
    """

    name: ClassVar[str] = "fedbabu"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    summary: ClassVar[str] = "head frozen at random init, body averaged; fine-tuned locally before testing"
    paper: ClassVar[str] = ("Oh et al., FedBABU: Toward Enhanced Representation for Federated Image "
                            "Classification, ICLR 2022")
    Params: ClassVar[type[AlgorithmParams]] = FedBABUParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = payload["weights"]
        local, metrics = train_part(self.workspace, self.model_factory, start, data, self.params, rng,
                                    self.task_steps(data), "body")
        return ClientResult(upload=self.body_upload(local, start), state=client_state,
                            num_samples=data.num_train, metrics=metrics)

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        p = self.params
        return finetune_evaluate(self.workspace, self.model_factory, payload["weights"], data, p,
                                 p.finetune_epochs, batch_size, p.finetune_part)

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The body-trained model after one more task (CKA analysis)."""
        local, _ = train_part(self.workspace, self.model_factory, payload["weights"], data, self.params, rng,
                              self.local_steps(data.num_train), "body")
        return local
