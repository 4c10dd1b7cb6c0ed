"""The common server side of algorithms that share only the body (FedRep, FedPer, FedBABU).

The server keeps one flat model: its body is the global body, its head is the shared
initial head (drawn once at ``init_server`` and never changed by the server). Each task
downloads that whole vector — the body to train from, and the initial head that a client
uses on its first task (a fresh client has no head yet) — and uploads only the body's
change, so bytes up are body-sized. The server adds the sample-weighted mean of the body
deltas to the global body: FedAvg on the body.
"""
from __future__ import annotations

import torch

from fedclock.algorithms.base import Algorithm, Arrival, P, ServerState, Tensors
from fedclock.algorithms.personal import weighted_mean


class BodyAveraging(Algorithm[P]):
    """Base class: global body + shared initial head on the server, body deltas uploaded."""

    def init_server(self, rng: torch.Generator) -> ServerState:
        return ServerState(tensors={"weights": self.model_factory.initial_weights(rng)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        return {"weights": state.tensors["weights"]}

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        """``u <- u + sum_p (n_p / sum n) Delta u_p`` on the body slice; the head slice (the
        shared initial head) is left as it is. An empty cohort changes nothing."""
        if not arrivals:
            return state, False
        step = weighted_mean([a.upload["body_delta"] for a in arrivals], [a.num_samples for a in arrivals])
        weights = state.tensors["weights"].clone()
        weights[self.model_factory.body] += step
        return ServerState(tensors={**state.tensors, "weights": weights}, version=state.version + 1,
                           extra=dict(state.extra)), True

    def upload_bytes(self) -> int:
        """Only the body's delta goes up."""
        body = self.model_factory.body
        return (body.stop - body.start) * 4

    def body_upload(self, local: torch.Tensor, start: torch.Tensor) -> Tensors:
        """The upload of a client that trained ``start`` into ``local`` (flat models)."""
        body = self.model_factory.body
        return {"body_delta": (local[body] - start.to(local)[body]).clone()}
