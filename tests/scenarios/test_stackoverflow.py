"""Stack Overflow next-word prediction from TFF's files (``scenarios/data/stackoverflow.py``), on
small files written here in TFF's layout: users, counts, shapes, the vocabulary and TFF's
special tokens, per-user test sets; a bad file is one line naming it (exit 2); the quick
library file runs end to end on its generated files."""
from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from fedclock.algorithms.targets import IGNORE_TARGET
from fedclock.scenarios.cli import main
from fedclock.scenarios.data.client_files import load_client_files, natural_dataset
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.schema import DatasetConfig, GeneratedFiles
from fedclock.scenarios.data.stackoverflow import SEQUENCE_LENGTH, WORD_COUNTS
from fedclock.scenarios.data.stackoverflow_generate import write_stackoverflow
from fedclock.scenarios.data.tff_h5 import read_tff_h5
from tests.scenarios.one_line import one_line_error

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "crossdevice"
LONG = " ".join(f"w{i}" for i in range(25))


def _h5(path: Path, users: dict[str, list[str]]) -> None:
    with h5py.File(path, "w") as f:
        for user, sentences in users.items():
            f.create_dataset(f"examples/{user}/tokens", data=np.array(sentences, dtype=object),
                             dtype=h5py.string_dtype("utf-8"))
            f.create_dataset(f"examples/{user}/score", data=np.zeros(len(sentences), dtype=np.int64))


def _files(root: Path) -> None:
    """Three train users, a test file with one of them and a test-only user; the word counts
    list how, i, python, w0..w24 but not ``?`` (out of vocabulary)."""
    _h5(root / "stackoverflow_train.h5", {"00000001": ["how do i", "python ?"], "00000002": [LONG],
                                          "00000003": ["i", "i do", "do"]})
    _h5(root / "stackoverflow_test.h5", {"00000001": ["do python"], "00000009": ["how"]})
    words = ["i", "do", "how", "python"] + [f"w{i}" for i in range(25)]
    (root / WORD_COUNTS).write_text("".join(f"{w} {100 - k}\n" for k, w in enumerate(words)))


def test_users_sentences_vocabulary_and_own_test_sets(tmp_path: Path) -> None:
    _files(tmp_path)
    cfg = DatasetConfig(name="stackoverflow", format="tff_h5", root=tmp_path, partition={"type": "natural"})
    fed = build_federation(cfg, 3, seed=0)
    vocab = 29  # words in the count file: indices 1..29; pad 0, oov 30, bos 31, eos 32
    assert fed.num_classes == vocab + 4 and fed.input_shape == (SEQUENCE_LENGTH,)
    assert fed.client_sizes().tolist() == [2, 1, 3] and [len(t) for t in fed.client_test] == [1, 0, 0]
    assert fed.y.shape[1:] == (SEQUENCE_LENGTH,) and fed.y_test.shape == (2, SEQUENCE_LENGTH)
    first = fed.client_data(0)
    pad = [0] * (SEQUENCE_LENGTH - 5)
    ignored = [IGNORE_TARGET] * (SEQUENCE_LENGTH - 4)
    assert first.x_train[0].long().tolist() == [31, 3, 2, 1, 32] + pad  # bos how do i eos
    assert first.y_train[0].tolist() == [3, 2, 1, 32] + ignored  # how do i eos, padding ignored
    assert first.y_train[1].tolist()[:3] == [4, 30, 32]  # python, '?' out of vocabulary, eos
    assert first.y_test[0].tolist()[:3] == [2, 4, 32]
    long = fed.client_data(1).y_train[0].tolist()  # 25 words cut at 20: no end token, no padding
    assert long == list(range(5, 5 + SEQUENCE_LENGTH)) and fed.client_data(1).x_train[0, 0].item() == 31
    assert sorted(fed.y_test[:, 0].tolist()) == [2, 3]  # the global test set holds the test-only user too


def test_the_generated_files_have_tff_layout(tmp_path: Path) -> None:
    write_stackoverflow(tmp_path, GeneratedFiles(users=4, mean_samples=6), seed=3)
    with h5py.File(tmp_path / "stackoverflow_train.h5", "r") as f:
        user = f["examples"][sorted(f["examples"])[0]]
        assert {"tokens", "title", "tags", "score", "type", "creation_date"} <= set(user)
        assert isinstance(user["tokens"][0], bytes) and len(user["tokens"][0].split(b" ")) >= 3
    counts = [int(line.split()[1]) for line in (tmp_path / WORD_COUNTS).read_text().splitlines()]
    assert counts == sorted(counts, reverse=True) and len(counts) == 150


def _run(tmp_path: Path, dataset: dict, **sections: object) -> str:
    scenario = {"name": "bad", "dataset": {"name": "stackoverflow", "format": "tff_h5", **dataset,
                                           "partition": {"type": "natural"}},
                "model": {"name": "word_lstm_small"}, "population": {"num_clients": 3},
                "algorithm": {"name": "fedavg"}, "stop": {"rounds": 1}, "runtime": {"backend": "inline"}, **sections}
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump(scenario))
    return one_line_error(["run", str(file), "--quiet", "--out", str(tmp_path / "out")])


def test_sampling_reads_the_same_users_and_numbers_as_reading_every_user(tmp_path: Path) -> None:
    """Users are chosen from their counts before their sentences are read: the same users,
    samples and order as reading every user and then filtering (the way before), and a user
    left out is never read (its broken tokens go unnoticed; reading every user reports them)."""
    write_stackoverflow(tmp_path, GeneratedFiles(users=24, mean_samples=5), seed=1)
    cfg = DatasetConfig(name="stackoverflow", format="tff_h5", root=tmp_path,
                        partition={"type": "natural", "min_samples": 6, "sample_clients": 5})
    lazy = load_client_files(cfg, seed=4, num_clients=5)
    users, classes = read_tff_h5("stackoverflow", tmp_path)
    whole = natural_dataset(cfg, users, classes, 4, 5, tmp_path)
    for a, b in ((lazy.x_train, whole.x_train), (lazy.y_train, whole.y_train), (lazy.x_test, whole.x_test),
                 (lazy.y_test, whole.y_test)):
        assert a.shape == b.shape and bool((a == b).all())
    assert [p.tolist() for p in lazy.natural_clients or ()] == [p.tolist() for p in whole.natural_clients or ()]
    read = read_tff_h5("stackoverflow", tmp_path, lambda train, test: np.array([2]))[0]
    assert [u.user for u in read] == [users[2].user]
    left_out = next(u.user for u in users if u.num_samples < 6)
    with h5py.File(tmp_path / "stackoverflow_train.h5", "a") as f:
        del f[f"examples/{left_out}/tokens"]
        f.create_dataset(f"examples/{left_out}/tokens", data=np.arange(3))
    assert load_client_files(cfg, seed=4, num_clients=5).x_train.shape == lazy.x_train.shape
    with pytest.raises(Exception, match="tokens must be strings"):
        read_tff_h5("stackoverflow", tmp_path)


def test_max_train_per_client_keeps_each_users_first_sentences(tmp_path: Path) -> None:
    """The FedOpt cap (``partition.max_train_per_client``): a user's first sentences in file order,
    its test sentences all kept; LEAF-like readers (users read whole) cut the same way."""
    _files(tmp_path)
    cfg = DatasetConfig(name="stackoverflow", format="tff_h5", root=tmp_path,
                        partition={"type": "natural", "max_train_per_client": 2})
    fed = build_federation(cfg, 3, seed=0)
    assert fed.client_sizes().tolist() == [2, 1, 2] and [len(t) for t in fed.client_test] == [1, 0, 0]
    assert fed.client_data(2).y_train[:, 0].tolist() == [1, 1]  # "i", "i do": the first two of three
    users, classes = read_tff_h5("stackoverflow", tmp_path)
    whole = natural_dataset(cfg, users, classes, 0, 3, tmp_path)
    lazy = load_client_files(cfg, seed=0, num_clients=3)
    assert whole.y_train.shape == lazy.y_train.shape == (5, SEQUENCE_LENGTH)
    assert bool((whole.y_train == lazy.y_train).all()) and bool((whole.y_test == lazy.y_test).all())
    with pytest.raises(ValueError, match="partition.max_train_per_client: applies to client files"):
        DatasetConfig(name="mnist", partition={"type": "natural", "max_train_per_client": 2})


@pytest.mark.parametrize("how", ["not_h5", "no_counts", "bad_counts", "no_tokens", "number_tokens"])
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, how: str) -> None:
    root = tmp_path / "so"
    root.mkdir()
    _files(root)
    if how == "not_h5":
        (root / "stackoverflow_test.h5").write_text("not hdf5")
    elif how == "no_counts":
        (root / WORD_COUNTS).unlink()
    elif how == "bad_counts":
        (root / WORD_COUNTS).write_text("i 3\ndo\n")
    else:
        with h5py.File(root / "stackoverflow_train.h5", "a") as f:
            del f["examples/00000002/tokens"]
            if how == "number_tokens":
                f.create_dataset("examples/00000002/tokens", data=np.arange(3))
    err = _run(tmp_path, {"root": str(root)})
    named = {"not_h5": "stackoverflow_test.h5", "no_counts": WORD_COUNTS, "bad_counts": f"{WORD_COUNTS}: line 2",
             "no_tokens": "client '00000002' has no 'tokens'", "number_tokens": "tokens must be strings"}[how]
    assert named in err, err


def test_algorithms_and_partitions_that_need_one_label_per_sample_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "so"
    root.mkdir()
    _files(root)
    err = _run(tmp_path, {"root": str(root)}, algorithm={"name": "fedpac"})
    assert "algorithm.name: fedpac does not train on per-token targets" in err and "fedavg" in err
    assert "class's centroid" in err and "fedbabu" in err  # why, and the personalized ones that do
    (tmp_path / "ssl").mkdir()
    err = _run(tmp_path / "ssl", {"root": str(root)}, algorithm={"name": "fedper", "objective": "simclr"})
    assert "algorithm.objective: simclr" in err and "allowed: supervised" in err
    scenario = {"root": str(root), "partition": {"type": "dirichlet", "alpha": 0.5}}
    cfg = DatasetConfig(name="stackoverflow", format="tff_h5", **scenario)
    with pytest.raises(Exception, match="dirichlet splits by class.*allowed: natural, iid"):
        build_federation(cfg, 2, seed=0)


def test_quick_library_file_runs_end_to_end(tmp_path: Path) -> None:
    """The quick file cut to its FedAdam run for two rounds: per-token loss and accuracy come
    out of evaluation (the initial loss is the uniform guess's ln(classes), 150 words + 4).
    Why it may take over 5 s: most of the time is the run's fixed cost of counting the LSTM's
    FLOPs on meta tensors (five probes of one or two steps, each a few hundred operations per
    time step unrolled), which no smaller setting removes; two rounds is the least that shows
    the loss move."""
    sections = yaml.safe_load((LIBRARY / "stackoverflow_quick.yaml").read_text())
    sections.update(runs=sections["runs"][1:], stop={"rounds": 2}, evaluation={"every": 2, "personalized": True})
    file = tmp_path / "quick.yaml"
    file.write_text(yaml.safe_dump(sections))
    assert main(["run", str(file), "--quiet", "--out", str(tmp_path / "out")]) == 0
    metrics = pd.read_parquet(tmp_path / "out" / "metrics.parquet")  # one run: its files in --out
    assert metrics["version"].tolist() == [0, 2]
    assert metrics["global_loss"].iloc[0] == pytest.approx(math.log(154), abs=0.05)
    assert metrics["global_loss"].iloc[-1] < metrics["global_loss"].iloc[0]
    assert 0 < metrics["global_accuracy"].iloc[-1] < 1 and 0 < metrics["personal_accuracy_mean"].iloc[-1] < 1
