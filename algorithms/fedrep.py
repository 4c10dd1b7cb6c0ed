"""FedRep (Collins et al. 2021): shared representation, local heads trained first."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, Tensors
from fedclock.algorithms.body_avg import LocalHeadAveraging
from fedclock.algorithms.personal import epoch_steps, train_part, with_body, with_head
from fedclock.algorithms.ssl import ObjectiveParams


class FedRepParams(ObjectiveParams):
    """Local SGD settings; ``local_epochs`` (or ``local_steps``) is the body phase; the local
    objective (supervised, or the unlabeled SimCLR / SimSiam of :mod:`fedclock.algorithms.ssl`)."""

    head_epochs: float = Field(default=1.0, gt=0, description="epochs tau_h of head training with the body "
                               "fixed (the FedReCo paper's setup: 1)")


class FedRep(LocalHeadAveraging[FedRepParams]):
    """FedRep.

    Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for
    Personalized Federated Learning", ICML 2021.

    Client p receives the global body u and keeps its own head v_p (persistent state
    ``{"head": v_p}``; a client's first task starts from the shared initial head). It trains
    the head for ``head_epochs`` epochs with the received body fixed, then the body for
    ``local_epochs`` epochs (or ``local_steps`` steps) with the new head fixed, and uploads
    the body's change. Server: sample-weighted mean of the body deltas added to the body
    (:class:`~fedclock.algorithms.body_avg.BodyAveraging`); the head never leaves the client.
    Personalized accuracy: the received global body with the client's own head. Global
    accuracy: the global body with the shared initial head (not a trained classifier; FedRep
    has no global head). **Choices:** both phases use ``lr``; head steps cost one pass per
    sample like body steps.

    Objective (``objective``): ``supervised`` is the paper's cross-entropy; ``simclr`` /
    ``simsiam`` give FedStyle's Table 1 "FedRep" baseline: the body is the encoder (averaged),
    the head is the projector (+ predictor) kept on the client; the head phase trains the
    projector on the unlabeled two-view loss with the encoder fixed, the body phase the
    encoder with the projector fixed (each phase with its own augmentation stream drawn from
    the task's generator; a step costs two passes). The client's representation (k-NN
    monitor, personalization linear evaluation) is the received global encoder (the mixin's
    default): its own head is a projector, not part of the representation.
    """

    name: ClassVar[str] = "fedrep"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised", "simclr", "simsiam"})
    partial_work: ClassVar[bool] = False  # head epochs then body steps: a step count does not describe them
    summary: ClassVar[str] = "shared body averaged; each client trains its own head, then the body"
    paper: ClassVar[str] = ("Collins et al., Exploiting Shared Representations for Personalized Federated "
                            "Learning, ICML 2021")
    Params: ClassVar[type[AlgorithmParams]] = FedRepParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    def _head_steps(self, n: int) -> int:
        return epoch_steps(n, self.params.batch_size, self.params.head_epochs)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = self._start(payload, client_state)
        ws, f = self.workspace, self.model_factory
        n = data.num_train
        headed, m_head = train_part(ws, f, start, data, self.params, rng, self._head_steps(n), "head",
                                    loss_fn=self.objective_loss(rng))
        local, m_body = train_part(ws, f, headed, data, self.params, rng, self.local_steps(n), "body",
                                   loss_fn=self.objective_loss(rng))
        return ClientResult(upload=self.body_upload(local, payload["weights"]),
                            state=self.keep_local_body({"head": local[f.head].clone()}, local), num_samples=n,
                            metrics={"head_loss": m_head["train_loss"], "train_loss": m_body["train_loss"],
                                     "steps": m_head["steps"] + m_body["steps"]})

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The client's model after one more task: trained body and head (CKA analysis)."""
        result = self.client_update(payload, client_state, data, rng)
        assert result.state is not None  # FedRep's tasks always keep the client's head
        body = payload["weights"][self.model_factory.body] + result.upload["body_delta"]
        return with_body(self.model_factory, with_head(self.model_factory, payload["weights"],
                                                       result.state["head"]), body)
