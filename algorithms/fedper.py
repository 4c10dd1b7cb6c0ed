"""FedPer (Arivazhagan et al. 2019): shared base layers, personalization layers kept local."""
from __future__ import annotations

from typing import ClassVar

import torch

from fedclock.algorithms.base import AlgorithmParams, ClientData, ClientResult, Tensors
from fedclock.algorithms.body_avg import LocalHeadAveraging
from fedclock.algorithms.personal import train_part
from fedclock.algorithms.ssl import ObjectiveParams


class FedPerParams(ObjectiveParams):
    """Local SGD settings and the local objective (supervised, or the unlabeled SimCLR /
    SimSiam of :mod:`fedclock.algorithms.ssl`)."""


class FedPer(LocalHeadAveraging[FedPerParams]):
    """FedPer.

    Arivazhagan, Aggarwal, Singh, Choudhary, "Federated Learning with Personalization
    Layers", arXiv:1912.00818, 2019.

    Client p starts from the received global body and its own head v_p (persistent state
    ``{"head": v_p}``; the shared initial head on its first task), trains body and head
    jointly for ``local_epochs`` epochs (or ``local_steps`` steps) of SGD, uploads the body's
    change and keeps the head. Server: sample-weighted mean of the body deltas added to the
    body (:class:`~fedclock.algorithms.body_avg.BodyAveraging`). Personalized accuracy: the
    received body with the client's head. **Choice:** the base/personalization split is the
    model's body/head (for cnn5: the four feature layers / the classifier).

    Objective (``objective``): ``supervised`` is the paper's cross-entropy; ``simclr`` /
    ``simsiam`` give FedStyle's Table 1 "FedPer" baseline: the body is the encoder (averaged),
    the head is the projector (+ predictor) kept on the client, both trained jointly on the
    unlabeled two-view loss. The client's representation (k-NN monitor, personalization
    linear evaluation) is then the received global encoder (the mixin's default): its own
    head is a projector, not part of the representation.
    """

    name: ClassVar[str] = "fedper"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    objectives: ClassVar[frozenset[str]] = frozenset({"supervised", "simclr", "simsiam"})
    summary: ClassVar[str] = "body and head trained jointly; body averaged, head stays on the client"
    paper: ClassVar[str] = "Arivazhagan et al., Federated Learning with Personalization Layers, arXiv 2019"
    Params: ClassVar[type[AlgorithmParams]] = FedPerParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        start = self._start(payload, client_state)
        local, metrics = train_part(self.workspace, self.model_factory, start, data, self.params, rng,
                                    self.task_steps(data), "all", loss_fn=self.objective_loss(rng))
        return ClientResult(upload=self.body_upload(local, payload["weights"]),
                            state=self.keep_local_body({"head": local[self.model_factory.head].clone()}, local),
                            num_samples=data.num_train,
                            metrics=metrics)

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The client's jointly trained model after one more task (CKA analysis)."""
        start = self._start(payload, client_state)
        local, _ = train_part(self.workspace, self.model_factory, start, data, self.params, rng,
                              self.local_steps(data.num_train), "all", loss_fn=self.objective_loss(rng))
        return local
