"""Stack Overflow next-word prediction from TFF's files (``dataset: {name: stackoverflow, format: tff_h5}``).

TensorFlow Federated's Stack Overflow data set (``tff.simulation.datasets.stackoverflow``):
the train and test HDF5 files hold one group per user, ``examples/<user>/<feature>`` with the
features ``tokens`` (one sentence per example: lower-cased words and punctuation separated by
single spaces), ``title``, ``tags``, ``score``, ``type`` and ``creation_date``; only ``tokens``
is read. Beside them, ``stackoverflow.word_count`` lists every word with its count (one
``word count`` pair per line, most frequent first). The task is TFF's word-prediction
preprocessing (``tff.simulation.baselines.stackoverflow``), the one Reddi et al., "Adaptive
Federated Optimization", ICLR 2021, App. C use:

* **vocabulary**: the first :data:`VOCAB_SIZE` words of the word counts (fewer when the file
  lists fewer) get indices ``1..V`` in file order; then :func:`special_tokens`: padding
  ``0``, out-of-vocabulary ``V+1`` (TFF's one OOV bucket), beginning of sentence ``V+2``,
  end of sentence ``V+3``, so the model has ``V+4`` classes (10,004);
* **a sentence** is split at single spaces (as TFF's ``tf.strings.split(sep=' ')``), cut to
  :data:`SEQUENCE_LENGTH` words, each mapped to its index or to OOV, followed by the end
  token when it had fewer than :data:`SEQUENCE_LENGTH` words, preceded by the beginning token
  and padded to ``SEQUENCE_LENGTH + 1`` indices; the input is the first
  :data:`SEQUENCE_LENGTH` of them and the targets the last :data:`SEQUENCE_LENGTH` (the next
  word at every position), a padded target written as
  :data:`~fedclock.algorithms.targets.IGNORE_TARGET` (it counts in neither loss nor
  accuracy: :mod:`fedclock.algorithms.targets`);
* a sample is one sentence (TFF's example); a user of the train file is a client with its
  test-file sentences as its own test set (users are matched by id; test-only users add to
  the global test set, :mod:`fedclock.scenarios.data.tff_h5`). TFF's ``stackoverflow_held_out.h5``
  (validation users) is not read.

**Choice:** the vocabulary comes from the word-count file as TFF's loader gives it; a folder
without it is an error naming the file (fedclock does not count words itself). The whole
published train split (342,477 users, 135.8 million sentences) takes about 33 GB as
fedclock holds it (20 float32 inputs and 20 int64 targets per sentence); with a natural
partition the users are chosen from their sentence counts before any sentence is read
(:mod:`fedclock.scenarios.data.client_files`), so ``partition.sample_clients`` costs only the
users it keeps, and ``partition.max_train_per_client: 1000`` is the FedOpt paper's per-user cap.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from fedclock.algorithms.targets import IGNORE_TARGET
from fedclock.scenarios.data.datasets import DatasetError

__all__ = ["VOCAB_SIZE", "SEQUENCE_LENGTH", "WORD_COUNTS", "SpecialTokens", "special_tokens", "read_vocabulary",
           "sentence_samples"]

VOCAB_SIZE = 10_000
"""Words of the vocabulary (TFF's and the paper's default)."""
SEQUENCE_LENGTH = 20
"""Words of an input sequence (TFF's and the paper's default)."""
WORD_COUNTS = "stackoverflow.word_count"
"""TFF's word-count file, beside the HDF5 files."""


class SpecialTokens(NamedTuple):
    """TFF's special token indices for a vocabulary of ``V`` words (one OOV bucket)."""

    pad: int
    oov: int
    bos: int
    eos: int


def special_tokens(vocab_size: int) -> SpecialTokens:
    """Padding ``0``, OOV ``V+1``, beginning ``V+2``, end ``V+3`` (TFF's ``get_special_tokens``
    with one OOV bucket)."""
    return SpecialTokens(0, vocab_size + 1, vocab_size + 2, vocab_size + 3)


def read_vocabulary(path: Path, size: int = VOCAB_SIZE) -> dict[str, int]:
    """The first ``size`` words of a word-count file, word -> index ``1..``, in file order."""
    if not path.is_file():
        raise DatasetError(f"dataset.root: {path.parent} holds no {path.name} (TFF's Stack Overflow word counts, "
                           "which give the vocabulary)")
    vocab: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if len(vocab) == size:
                    break
                parts = line.split()
                if len(parts) != 2 or not parts[1].isdigit():
                    raise DatasetError(f"{path}: line {number} is not 'word count' (got {line.strip()[:60]!r})")
                if parts[0] not in vocab:
                    vocab[parts[0]] = len(vocab) + 1
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    if not vocab:
        raise DatasetError(f"{path}: lists no words")
    return vocab


def sentence_samples(sentences: np.ndarray, vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``(n, SEQUENCE_LENGTH)`` float32 and per-token targets ``(n, SEQUENCE_LENGTH)``
    int64 of a user's sentences (byte or text strings), as the module docstring says."""
    tokens = special_tokens(len(vocab))
    ids = np.full((len(sentences), SEQUENCE_LENGTH + 1), tokens.pad, dtype=np.int64)
    for row, raw in enumerate(sentences.reshape(-1)):
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        words = text.split(" ")[:SEQUENCE_LENGTH]
        seq = [tokens.bos] + [vocab.get(w, tokens.oov) for w in words]
        if len(words) < SEQUENCE_LENGTH:
            seq.append(tokens.eos)
        ids[row, :len(seq)] = seq
    targets = ids[:, 1:].copy()
    targets[targets == tokens.pad] = IGNORE_TARGET
    return ids[:, :-1].astype(np.float32), targets
