"""Per-round learning-rate schedules (exponential decay), shared by the synchronous baselines.

The round index ``t`` is the server version the task was dispatched with: the number of
aggregations so far, which equals the sync round index (a round in which nobody arrived does
not change the model, so it does not advance ``t``). The local rate of round ``t`` is
``lr * lr_decay**t`` and the server rate ``server_lr * server_lr_decay**t``.

How ``t`` reaches the client: when the local rate decays (``lr_decay != 1``) the payload
carries it as a one-element int64 tensor under ``"round"`` (8 bytes, counted by
``download_bytes``); with no decay nothing is added, so payloads and byte counts stay exactly
those of the undecayed algorithm. The server side needs no message: it knows its version.
"""
from __future__ import annotations

import torch
from pydantic import Field

from fedclock.algorithms.base import AlgorithmParams, Tensors

ROUND_KEY = "round"
"""Payload key of the round index (present only when the local rate decays)."""


class ScheduleParams(AlgorithmParams):
    """Local SGD hyper-parameters plus the per-round decay of the local learning rate."""

    lr_decay: float = Field(default=1.0, gt=0, le=1, description="local lr of round t is lr * lr_decay**t "
                            "(the FedMRUR setups use 0.998)")


def round_payload(params: ScheduleParams, version: int) -> Tensors:
    """The payload entries that tell a client its round (empty when the local rate is constant)."""
    if params.lr_decay == 1.0:
        return {}
    return {ROUND_KEY: torch.tensor([version], dtype=torch.int64)}


def round_bytes(params: ScheduleParams) -> int:
    """Bytes :func:`round_payload` adds to every download."""
    return 0 if params.lr_decay == 1.0 else 8


def payload_round(payload: Tensors) -> int:
    """The round index a payload carries (0 when it carries none)."""
    entry = payload.get(ROUND_KEY)
    return 0 if entry is None else int(entry.reshape(-1)[0])


def local_lr(params: ScheduleParams, round_index: int) -> float:
    """The local learning rate of round ``round_index``."""
    return params.lr * params.lr_decay ** round_index


def params_for_round(params: ScheduleParams, round_index: int) -> ScheduleParams:
    """A copy of ``params`` whose ``lr`` is the round's decayed local rate (what
    :func:`~fedclock.algorithms.training.local_sgd` reads)."""
    if params.lr_decay == 1.0:
        return params
    return params.model_copy(update={"lr": local_lr(params, round_index)})


def decayed(rate: float, decay: float, round_index: int) -> float:
    """``rate * decay**round_index`` (a server rate)."""
    return rate * decay ** round_index
