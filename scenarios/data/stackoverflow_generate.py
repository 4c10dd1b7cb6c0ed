"""A small Stack Overflow-like data set in TFF's exact file layout, from a seed.

What the quick Stack Overflow library file and the tests run on instead of TFF's download
(``dataset: {name: stackoverflow, format: tff_h5, generate: ...}``): the files are the
layout :mod:`fedclock.scenarios.data.stackoverflow` reads from TFF's, ``stackoverflow_train.h5``
and ``stackoverflow_test.h5`` (``examples/<user>/{tokens, title, tags, score, type,
creation_date}``, strings as variable-length UTF-8) and ``stackoverflow.word_count``
(``word count`` lines, most frequent first; the count is the number of users whose train
sentences use the word, TFF's definition, ties in word order). The text is generated, not
real:

* 150 made-up words; a shared first-order chain gives every word four possible successors
  with probabilities 0.55, 0.25, 0.12 and 0.08, so the next word is learnable from the
  previous one;
* a user starts its sentences from 5 words of its own (Dirichlet(1) proportions), so users
  differ; a sentence has 3 to 24 words (longer ones are cut at 20 by the reader, which then
  adds no end token, as TFF's);
* every user has ``max(4, round(mean * lognormal(0, 0.8)))`` sentences (natural size
  heterogeneity), ``test_fraction`` of them (at least one) in the test file, the others in
  the train file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from fedclock.scenarios.schema import GeneratedFiles
from fedclock.scenarios.data.stackoverflow import WORD_COUNTS
from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

__all__ = ["write_stackoverflow"]

_WORDS = 150
_SUCCESSORS = np.array([0.55, 0.25, 0.12, 0.08])


def write_stackoverflow(folder: Path, cfg: GeneratedFiles, seed: int) -> None:
    """Write ``stackoverflow_train.h5``, ``stackoverflow_test.h5`` and ``stackoverflow.word_count``
    into ``folder``."""
    import h5py  # imported when used: a second of start-up otherwise

    rng = numpy_rng(seed, Stream.DATA, DataStream.STACKOVERFLOW_GENERATE)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: list[str] = []
    while len(words) < _WORDS:
        word = "".join(rng.choice(letters, int(rng.integers(2, 8))))
        if word not in words:
            words.append(word)
    successors = np.stack([rng.choice(_WORDS, len(_SUCCESSORS), replace=False) for _ in range(_WORDS)])
    sizes = np.maximum(4, np.round(cfg.mean_samples * rng.lognormal(0.0, 0.8, cfg.users))).astype(int)
    users: dict[str, tuple[list[str], list[str]]] = {}
    for u, n in enumerate(sizes):
        starts = rng.choice(_WORDS, 5, replace=False)
        start_p = rng.dirichlet(np.ones(5))
        sentences = []
        for _ in range(int(n)):
            w = int(rng.choice(starts, p=start_p))
            seq = [w]
            for _ in range(int(rng.integers(3, 25)) - 1):
                w = int(successors[w, rng.choice(len(_SUCCESSORS), p=_SUCCESSORS)])
                seq.append(w)
            sentences.append(" ".join(words[i] for i in seq))
        n_test = max(1, int(round(cfg.test_fraction * n)))
        users[f"{u:08d}"] = (sentences[n_test:], sentences[:n_test])
    text = h5py.string_dtype("utf-8")
    for part, which in (("train", 0), ("test", 1)):
        with h5py.File(folder / f"stackoverflow_{part}.h5", "w") as f:
            for user, pair in users.items():
                sentences = pair[which]
                group = f.create_group(f"examples/{user}")
                group.create_dataset("tokens", data=np.array(sentences, dtype=object), dtype=text)
                for key, value in (("title", "a generated question"), ("tags", "python|generated"),
                                   ("type", "answer"), ("creation_date", "2017-06-01 00:00:00 UTC")):
                    group.create_dataset(key, data=np.array([value] * len(sentences), dtype=object), dtype=text)
                group.create_dataset("score", data=np.zeros(len(sentences), dtype=np.int64))
    users_of = {word: 0 for word in words}
    for train, _ in users.values():
        for word in set(" ".join(train).split()):
            users_of[word] += 1
    ranked = sorted(words, key=lambda word: -users_of[word])
    (folder / WORD_COUNTS).write_text("".join(f"{word} {users_of[word]}\n" for word in ranked), encoding="utf-8")
