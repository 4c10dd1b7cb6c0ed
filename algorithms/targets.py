"""Class targets, one per sample or one per token: the loss and the accuracy of both.

Most data sets give one class index per sample (``y`` of shape ``(n,)``; the model's logits
are ``(n, classes)``). A next-word task gives one target per input position (``y`` of shape
``(n, T)``; the model's logits are ``(n, T, classes)``), and positions past a sequence's end
hold :data:`IGNORE_TARGET` (padding: no word to predict). Following TensorFlow Federated's
Stack Overflow next-word task (``tff.simulation.baselines.stackoverflow``, the task of
Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Sec. 5 and App. C), padded
positions count nowhere:

* **loss**: the mean cross-entropy over the batch's targets that are not padding (TFF's
  Keras model masks padding out of its loss), i.e. every token weighs the same, not every
  sequence;
* **accuracy**: correct next tokens over tokens that are not padding (TFF's ``accuracy``
  metric, ``MaskedCategoricalAccuracy(masked_tokens=[pad])``). **Choice:** TFF also reports
  the accuracy without out-of-vocabulary and end-of-sentence targets; fedclock reports the
  one above only (one accuracy column for every data set), so OOV and end-of-sentence
  targets count as tokens here.

:data:`IGNORE_TARGET` is PyTorch's default ``ignore_index`` of
:func:`torch.nn.functional.cross_entropy`, which leaves such targets out of the sum and of
the mean's count. A sample-target batch takes exactly the path it always took (same
numbers, bit for bit).

Where one label per sample is still assumed, per-token data is refused in one line rather
than given wrong numbers: algorithms that do not declare ``per_token_targets``
(:class:`~fedclock.algorithms.base.Algorithm`; per-class feature statistics, sample-feature
objectives, per-sample gradients), partitions by class
(:func:`fedclock.scenarios.data.federation.build_federation`); vectorized clients take only the
models of :data:`~fedclock.algorithms.vectorized.VECTOR_MODELS`, none of which predicts per
token.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["IGNORE_TARGET", "per_token", "target_cross_entropy", "correct_targets", "counted_targets"]

IGNORE_TARGET = -100
"""A target that counts in neither loss nor accuracy (a padded position)."""


def per_token(y: torch.Tensor) -> bool:
    """True when ``y`` holds one target per token (``(n, T)``), not one per sample (``(n,)``)."""
    return y.dim() > 1


def target_cross_entropy(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of ``logits`` against ``y`` (module docstring): per sample as
    :func:`torch.nn.functional.cross_entropy`, or per token over the targets that are not
    :data:`IGNORE_TARGET` (``reduction="mean"``: their mean; ``"sum"``: their sum)."""
    if not per_token(y):
        return F.cross_entropy(logits, y, reduction=reduction)
    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=IGNORE_TARGET, reduction=reduction)


def correct_targets(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How many targets the arg-max of ``logits`` hits, as a 0-dim tensor (a padded position
    never does: no class index equals :data:`IGNORE_TARGET`)."""
    return (logits.argmax(dim=-1) == y).sum()


def counted_targets(y: torch.Tensor) -> int:
    """Targets that count in accuracy and loss: the samples, or the tokens that are not
    padding."""
    return int(y.shape[0]) if not per_token(y) else int((y != IGNORE_TARGET).sum())
