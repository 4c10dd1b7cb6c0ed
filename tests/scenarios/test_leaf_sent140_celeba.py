"""LEAF's Sent140 and CelebA files (:mod:`fedclock.scenarios.data.leaf`), written here in exactly
LEAF's shapes: Sent140's ``x`` are the tweet records LEAF's preprocessing writes (the CSV row
without its polarity), ``y`` 0/1; CelebA's ``x`` are image file names under
``raw/img_align_celeba``, ``y`` 0/1. Word indices and pixels are checked against values
worked out by hand; bad files are one line naming the file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedclock.scenarios.data.datasets import DatasetError
from fedclock.scenarios.data.federation import build_federation
from fedclock.scenarios.data.leaf import CELEBA_IMAGES, SENT140_VOCAB, SENT140_WORDS
from fedclock.scenarios.schema import DatasetConfig

UNK = SENT140_VOCAB


def _write(folder: Path, part: str, users: dict[str, tuple[list, list]]) -> None:
    (folder / part).mkdir(parents=True, exist_ok=True)
    (folder / part / f"all_data_niid_0_keep_0_{part}_9.json").write_text(json.dumps(
        {"users": list(users), "num_samples": [len(x) for x, _ in users.values()],
         "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}))


def _tweet(user: str, text: str, n: int) -> list[str]:
    """One record as LEAF's ``data_to_json.py`` writes it: id, date, query, user, tweet, tag."""
    return [str(1467810000 + n), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", user, text, "training"]


def _sent140(root: Path) -> None:
    _write(root, "train", {"alice": ([_tweet("alice", "I love it!", 0), _tweet("alice", "love love you", 1)], [1, 1]),
                           "bob": ([_tweet("bob", "Hate it.", 2)], [0])})
    _write(root, "test", {"alice": ([_tweet("alice", "you are it " + "x " * 30, 3)], [0]),
                          "bob": ([_tweet("bob", "can't wait", 4)], [1])})


def _sent140_cfg(root: Path) -> DatasetConfig:
    return DatasetConfig(name="sent140", format="leaf", root=root, partition={"type": "natural"})


def test_sent140_tweets_become_word_indices_over_the_training_vocabulary(tmp_path: Path) -> None:
    """Training words by count, ties alphabetical: love 3, it 2, then ! . Hate I you (1 each):
    indices 0..6. "I love it!" is [I, love, it, !] = [5, 0, 1, 2], padded with the unknown
    index; a test word never seen in training ("are", "can't") is unknown; a long tweet is
    cut at 25 words."""
    _sent140(tmp_path)
    fed = build_federation(_sent140_cfg(tmp_path), 2, seed=0)
    assert fed.num_classes == 2 and fed.input_shape == (SENT140_WORDS,)
    alice, bob = fed.client_data(0), fed.client_data(1)
    assert alice.x_train[0].tolist() == [5, 0, 1, 2] + [UNK] * 21
    assert alice.x_train[1].tolist() == [0, 0, 6] + [UNK] * 22
    assert bob.x_train[0].tolist() == [4, 1, 3] + [UNK] * 22
    assert alice.x_test[0, :3].tolist() == [6, UNK, 1] and len(alice.x_test[0]) == SENT140_WORDS
    assert bob.x_test[0].tolist() == [UNK] * 25
    assert alice.y_train.tolist() == [1, 1] and bob.y_train.tolist() == [0]
    assert alice.y_test.tolist() == [0] and bob.y_test.tolist() == [1]


def _face(path: Path, colour: tuple[int, int, int]) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (178, 218), colour).save(path)  # CelebA's aligned size; one colour survives resizing


def _celeba(root: Path) -> None:
    images = root / CELEBA_IMAGES
    for k, colour in enumerate([(255, 0, 0), (0, 128, 0), (10, 20, 30), (200, 100, 50)]):
        _face(images / f"{k + 1:06d}.png", colour)
    _write(root, "train", {"7": (["000001.png", "000002.png"], [1, 0]), "12": (["000003.png"], [1])})
    _write(root, "test", {"7": (["000004.png"], [0])})


def test_celeba_images_are_read_as_leafs_model_reads_them(tmp_path: Path) -> None:
    """84x84 RGB, channels first, 0..255 unscaled (LEAF's CelebA model reads them so)."""
    _celeba(tmp_path)
    fed = build_federation(DatasetConfig(name="celeba", format="leaf", root=tmp_path,
                                         partition={"type": "natural"}), 2, seed=0)
    assert fed.num_classes == 2 and fed.input_shape == (3, 84, 84)
    first, second = fed.client_data(0), fed.client_data(1)
    assert first.x_train[0, :, 40, 40].tolist() == [255, 0, 0] and first.x_train[1, :, 0, 83].tolist() == [0, 128, 0]
    assert second.x_train[0, :, 83, 0].tolist() == [10, 20, 30]
    assert first.x_test[0, :, 5, 5].tolist() == [200, 100, 50] and len(second.y_test) == 0
    assert first.y_train.tolist() == [1, 0] and second.y_train.tolist() == [1] and first.y_test.tolist() == [0]
    assert torch.equal(first.x_train[0], first.x_train[0, :, :1, :1].expand(3, 84, 84))


@pytest.mark.parametrize("case, names", [
    ("celeba-missing", ["000009.png", "no such image", "raw/img_align_celeba"]),
    ("celeba-not-image", ["000001.png", "not a readable image"]),
    ("sent140-record", ["all_data_niid_0_keep_0_train_9.json", "user 'alice'", "tweet records"]),
    ("sent140-label", ["all_data_niid_0_keep_0_train_9.json", "label 4, outside 0..1"]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, case: str, names: list[str]) -> None:
    if case.startswith("celeba"):
        _celeba(tmp_path)
        if case == "celeba-missing":
            _write(tmp_path, "train", {"7": (["000009.png"], [1])})
        else:
            (tmp_path / CELEBA_IMAGES / "000001.png").write_bytes(b"not a png")
        cfg = DatasetConfig(name="celeba", format="leaf", root=tmp_path, partition={"type": "natural"})
    else:
        _sent140(tmp_path)
        record = ["only the tweet"] if case == "sent140-record" else _tweet("alice", "fine", 0)
        _write(tmp_path, "train", {"alice": ([record], [1 if case == "sent140-record" else 4])})
        cfg = _sent140_cfg(tmp_path)
    with pytest.raises(DatasetError) as info:
        build_federation(cfg, 2, seed=0)
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in names), message


def test_generate_refuses_sent140_and_celeba() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="generate: writes femnist, shakespeare or synthetic_leaf files, not "
                                              "celeba"):
        DatasetConfig(name="celeba", format="leaf", generate={"users": 3})
