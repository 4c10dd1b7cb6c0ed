"""Local (independent) training: every client trains alone, nothing is averaged."""
from __future__ import annotations

from typing import ClassVar

import torch

from fedclock.algorithms.base import (Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult,
                                      ServerState, Tensors, evaluate_flat)
from fedclock.algorithms.training import local_sgd
from fedclock.algorithms.vectorized import SGDTask


class LocalParams(AlgorithmParams):
    """Local SGD settings of each task (``local_epochs`` or ``local_steps`` per task)."""


class Local(Algorithm[LocalParams]):
    """Independent training of every client, the floor of personalized methods.

    The SPFL/PLGA paper (*Personalized Heterogeneous Federated Learning with Gradient
    Similarity*, Sec. 3.1 and App. C, Tables 5 and 6 "Independent") compares FedAvg with
    "each client's independent training (i.e., the model in each client performs SGD only
    on local data available, and model averaging is not performed)".

    * Client: its own model ``v_p`` is its persistent state; on its first task it starts
      from the shared initial model (the payload's ``"weights"``, drawn once by the server
      from the scenario seed, so every client starts from the same point, as in the
      federated runs it is compared with). Each task runs ``task_steps`` mini-batch SGD
      steps on its own train split (:func:`~fedclock.algorithms.training.local_sgd`) and
      keeps the result; it uploads nothing.
    * Server: never changes the weights. **Choice:** every non-empty cohort (sync) or
      arrival (async) still advances the version by one, so the version counts rounds of
      independent training and ``evaluation.every`` / ``stop.versions`` work as in any run.
    * Bytes: **choice**, nothing is charged either way (``download_bytes`` and
      ``upload_bytes`` are 0): the client talks to no one; the initial model it needs is
      the seeded one every client can build itself (the payload only hands it to the
      executor). Virtual time is latency plus compute.
    * Accuracy: personalized accuracy is each client's own model on its own test split
      (the number to compare with). Global accuracy is that of the never-updated initial
      model (there is no global model).
    """

    name: ClassVar[str] = "local"
    per_token_targets: ClassVar[bool] = True  # shared loss and evaluation (fedclock.algorithms.targets)
    moves_global_model: ClassVar[bool] = False
    summary: ClassVar[str] = "every client trains alone from the initial model; nothing is averaged"
    paper: ClassVar[str] = ("independent training baseline of the SPFL/PLGA paper (Personalized Heterogeneous "
                            "FL with Gradient Similarity, Tables 5/6)")
    Params: ClassVar[type[AlgorithmParams]] = LocalParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync", "async"})
    vectorizable: ClassVar[bool] = True

    def _start(self, payload: Tensors, client_state: Tensors | None) -> torch.Tensor:
        return client_state["weights"] if client_state is not None else payload["weights"]

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        local, metrics = local_sgd(self.workspace, self.model_factory, self._start(payload, client_state), data,
                                   self.params, rng, self.task_steps(data))
        return self.sgd_result(payload, client_state, data, local, metrics)

    def sgd_task(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                 rng: torch.Generator) -> SGDTask:
        """The client step's local SGD from the client's own model (for vectorized clients)."""
        return SGDTask(self._start(payload, client_state), data, self.params, rng, self.task_steps(data))

    def sgd_result(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                   local: torch.Tensor, metrics: dict[str, float]) -> ClientResult:
        """Keep the trained model; upload nothing."""
        return ClientResult(upload={}, state={"weights": local}, num_samples=data.num_train, metrics=metrics)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        return state.evolve(tensors=state.tensors, extra=dict(state.extra)), True

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        """The client's own model (the initial one before its first task) on its test split."""
        return evaluate_flat(self.workspace, self.model_factory, self._start(payload, client_state), data.x_test,
                             data.y_test, batch_size)

    def local_model(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                    rng: torch.Generator) -> torch.Tensor:
        """The client's model after one more task (CKA analysis)."""
        local, _ = local_sgd(self.workspace, self.model_factory, self._start(payload, client_state), data,
                             self.params, rng, self.local_steps(data.num_train))
        return local

    def download_bytes(self) -> int:
        return 0

    def upload_bytes(self) -> int:
        return 0
