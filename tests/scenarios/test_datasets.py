"""Dataset loading: bundled digits, generated synthetic data, and the real on-disk formats
of MNIST, Fashion-MNIST, EMNIST and CIFAR written as tiny files into a temporary folder."""
from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fedclock.scenarios.data.datasets import DatasetError, data_root, load_dataset
from fedclock.scenarios.schema import DatasetConfig


# --------------------------------------------------------------------------- writers
def _idx_bytes(array: np.ndarray) -> bytes:
    magic = 0x00000800 | array.ndim
    return struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape) + array.astype(np.uint8).tobytes()


def _write_idx(path: Path, array: np.ndarray, compress: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _idx_bytes(array)
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _fake_images(rng: np.random.Generator, n: int, side: int = 28) -> np.ndarray:
    return rng.integers(0, 256, size=(n, side, side), dtype=np.uint8)


def _write_mnist_like(raw: Path, names: list[str], n_train: int, n_test: int, num_classes: int,
                      seed: int = 0, label_offset: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        names[0]: _fake_images(rng, n_train), names[1]: rng.integers(0, num_classes, n_train) + label_offset,
        names[2]: _fake_images(rng, n_test), names[3]: rng.integers(0, num_classes, n_test) + label_offset,
    }
    for name, arr in arrays.items():
        _write_idx(raw / name, arr)
    return arrays


MNIST_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"]


def _write_cifar(base: Path, files: dict[str, int], key: str, num_classes: int) -> dict[str, np.ndarray]:
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    labels = {}
    for name, n in files.items():
        entry = {"batch_label": name, "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 key: rng.integers(0, num_classes, n).tolist(), "filenames": [f"{i}.png" for i in range(n)]}
        if key == "fine_labels":
            entry["coarse_labels"] = [0] * n
        with open(base / name, "wb") as f:
            pickle.dump(entry, f)
        labels[name] = np.asarray(entry[key])
    return labels


def _cfg(name: str, root: Path, **kw: object) -> DatasetConfig:
    return DatasetConfig(name=name, root=root, **kw)


def test_data_root_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCLOCK_DATA", str(tmp_path / "env"))
    assert data_root(DatasetConfig(root=tmp_path / "cfg")) == tmp_path / "cfg"
    assert data_root(DatasetConfig()) == tmp_path / "env"
    monkeypatch.delenv("FEDCLOCK_DATA")
    assert data_root(DatasetConfig()) == Path.home() / ".fedclock" / "data"


# --------------------------------------------------------------------------- digits
def test_digits_shapes_split_and_normalization() -> None:
    ds = load_dataset(DatasetConfig(name="digits", global_test_fraction=0.25), seed=0, num_clients=5)
    assert len(ds.y_train) + len(ds.y_test) == 1797
    assert abs(len(ds.y_test) - 0.25 * 1797) <= 10
    assert ds.input_shape == (1, 8, 8) and ds.x_test.shape[1:] == (1, 8, 8)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.num_classes == 10 and ds.natural_clients is None
    assert abs(float(ds.x_train.mean())) < 1e-4 and abs(float(ds.x_train.std()) - 1) < 1e-3
    # stratified: every class lands in the test set in about the right share
    test_counts = np.bincount(ds.y_test.numpy(), minlength=10)
    all_counts = test_counts + np.bincount(ds.y_train.numpy(), minlength=10)
    assert np.all(np.abs(test_counts - 0.25 * all_counts) <= 1)


def test_digits_split_is_seeded() -> None:
    a = load_dataset(DatasetConfig(name="digits"), seed=3, num_clients=2)
    b = load_dataset(DatasetConfig(name="digits"), seed=3, num_clients=2)
    c = load_dataset(DatasetConfig(name="digits"), seed=4, num_clients=2)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.y_test, c.y_test)


def test_digits_resize_and_subsample() -> None:
    ds = load_dataset(DatasetConfig(name="digits", image_size=28, max_train_samples=100), seed=0, num_clients=2)
    assert ds.input_shape == (1, 28, 28) and ds.x_test.shape[1:] == (1, 28, 28)
    assert len(ds.y_train) == 100


def test_the_digits_file_reads_as_scikit_learn_loads_it() -> None:
    from sklearn.datasets import load_digits

    from fedclock.scenarios.data.datasets import _digits_arrays

    (x, y), (x_ref, y_ref) = _digits_arrays(), load_digits(return_X_y=True)
    assert x.dtype == x_ref.dtype and y.dtype == y_ref.dtype
    assert np.array_equal(x, x_ref) and np.array_equal(y, y_ref) and x.shape == (1797, 64)


# --------------------------------------------------------------------------- synthetic
def _synthetic(seed: int = 0, clients: int = 20, **kw: object) -> object:
    cfg = DatasetConfig(name="synthetic", synthetic_samples=4000, partition={"type": "natural"}, **kw)
    return load_dataset(cfg, seed=seed, num_clients=clients)


def _mean_label_entropy(ds: object) -> float:
    ent = []
    for idx in ds.natural_clients:
        p = np.bincount(ds.y_train.numpy()[idx], minlength=ds.num_classes) / len(idx)
        p = p[p > 0]
        ent.append(float(-(p * np.log(p)).sum()))
    return float(np.mean(ent))


def test_synthetic_shapes_labels_and_natural_split() -> None:
    ds = _synthetic(synthetic_features=30, synthetic_classes=5)
    assert ds.input_shape == (30,) and ds.num_classes == 5
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert int(ds.y_train.min()) >= 0 and int(ds.y_train.max()) < 5
    assert len(ds.natural_clients) == 20
    sizes = [len(c) for c in ds.natural_clients]
    assert sum(sizes) == len(ds.y_train) and min(sizes) >= 1
    assert len(ds.y_train) + len(ds.y_test) == 4000
    assert abs(len(ds.y_test) - 0.2 * 4000) <= 20
    joined = np.concatenate(ds.natural_clients)
    assert np.array_equal(np.sort(joined), np.arange(len(ds.y_train)))
    assert len(set(sizes)) > 5  # power-law sizes, not equal


def test_synthetic_is_deterministic() -> None:
    a, b, c = _synthetic(seed=7), _synthetic(seed=7), _synthetic(seed=8)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert all(np.array_equal(p, q) for p, q in zip(a.natural_clients, b.natural_clients))
    assert not torch.equal(a.y_train[:100], c.y_train[:100])


def test_synthetic_beta_increases_label_skew() -> None:
    mild = _mean_label_entropy(_synthetic(synthetic_alpha=0.0, synthetic_beta=0.0))
    strong = _mean_label_entropy(_synthetic(synthetic_alpha=5.0, synthetic_beta=5.0))
    assert strong < mild


def test_synthetic_subsample_keeps_every_client() -> None:
    ds = _synthetic(max_train_samples=500)
    sizes = [len(c) for c in ds.natural_clients]
    assert min(sizes) >= 1 and abs(sum(sizes) - 500) <= 20
    assert sum(sizes) == len(ds.y_train)


def test_synthetic_samples_are_each_clients_draws_in_client_order() -> None:
    """The generator writes every client's draws straight into the flat arrays: the result
    equals drawing each client's samples (FedProx Synthetic, datasets.load_synthetic's docstring)
    and concatenating them, and the natural split is offsets into them, not an array per client."""
    from fedclock.actors.federation import ClientIndex
    from fedclock.scenarios.data import datasets
    from fedclock.scheduling.rng import DataStream, Stream, numpy_rng

    cfg = DatasetConfig(name="synthetic", synthetic_samples=300, synthetic_features=6, synthetic_classes=3,
                        partition={"type": "natural"})
    ds = load_dataset(cfg, seed=5, num_clients=7)
    rng = numpy_rng(5, Stream.DATA, DataStream.SYNTHETIC)
    sizes = datasets._synthetic_sizes(rng, 7, 300)
    sd = np.power(np.arange(1, 7, dtype=np.float64), -1.2) ** 0.5
    u, big_b = rng.normal(0.0, cfg.synthetic_alpha, 7), rng.normal(0.0, cfg.synthetic_beta, 7)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for k in range(7):
        w, b, v = rng.normal(u[k], 1.0, (3, 6)), rng.normal(u[k], 1.0, 3), rng.normal(big_b[k], 1.0, 6)
        x = v + rng.standard_normal((sizes[k], 6)) * sd
        parts.append((x, np.argmax(x @ w.T + b, axis=1)))
    n_test = [min(int(n) - 1, int(np.floor(0.2 * n + 0.5))) for n in sizes]
    train_x = np.concatenate([x[t:] for (x, _), t in zip(parts, n_test)]).astype(np.float32)
    test_y = np.concatenate([y[:t] for (_, y), t in zip(parts, n_test)])
    assert np.array_equal(ds.x_train.numpy(), train_x) and np.array_equal(ds.y_test.numpy(), test_y)
    assert isinstance(ds.natural_clients, ClientIndex)
    assert [len(c) for c in ds.natural_clients] == [int(n) - t for n, t in zip(sizes, n_test)]


def test_synthetic_rejects_image_size() -> None:
    # the scenario model rejects it, so `fedclock validate` reports it before any data is made
    with pytest.raises(ValidationError, match="image_size: synthetic data are vectors"):
        _synthetic(image_size=28)


# --------------------------------------------------------------------------- MNIST family
@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_mnist_like_loads_gz_idx(tmp_path: Path, name: str, folder: str) -> None:
    arrays = _write_mnist_like(tmp_path / folder / "raw", MNIST_NAMES, 40, 12, 10)
    ds = load_dataset(_cfg(name, tmp_path), seed=0, num_clients=4)
    assert ds.x_train.shape == (40, 1, 28, 28) and ds.x_test.shape == (12, 1, 28, 28)
    assert np.array_equal(ds.y_train.numpy(), arrays[MNIST_NAMES[1]])
    assert np.array_equal(ds.y_test.numpy(), arrays[MNIST_NAMES[3]])
    assert ds.num_classes == 10 and ds.y_train.dtype == torch.int64
    assert abs(float(ds.x_train.mean())) < 1e-4
    # pixel order survives: the normalized image is an affine map of the raw one
    raw0 = torch.from_numpy(arrays[MNIST_NAMES[0]][0].astype(np.float32))
    corr = torch.corrcoef(torch.stack([raw0.flatten(), ds.x_train[0, 0].flatten()]))[0, 1]
    assert float(corr) > 0.999
    loaded = load_dataset(_cfg(name, tmp_path, max_train_samples=10, image_size=14), seed=0, num_clients=2)
    assert loaded.x_train.shape == (10, 1, 14, 14) and loaded.x_test.shape == (12, 1, 14, 14)


def test_mnist_plain_idx_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"
    for name, arr in zip(MNIST_NAMES, [_fake_images(rng, 8), rng.integers(0, 10, 8),
                                       _fake_images(rng, 4), rng.integers(0, 10, 4)]):
        _write_idx(raw / name, arr, compress=False)
    ds = load_dataset(_cfg("mnist", tmp_path), seed=0, num_clients=1)
    assert ds.x_train.shape == (8, 1, 28, 28) and len(ds.y_test) == 4


def test_emnist_layout_transpose_and_letters(tmp_path: Path) -> None:
    names = [f"emnist-letters-{p}-{k}-idx{d}-ubyte" for p in ("train", "test") for k, d in (("images", 3),
                                                                                              ("labels", 1))]
    arrays = _write_mnist_like(tmp_path / "EMNIST" / "raw", names, 30, 10, 26, label_offset=1)
    ds = load_dataset(_cfg("emnist", tmp_path, emnist_split="letters"), seed=0, num_clients=2)
    assert ds.num_classes == 26 and ds.x_train.shape == (30, 1, 28, 28)
    assert np.array_equal(ds.y_train.numpy(), arrays[names[1]] - 1)
    raw0 = torch.from_numpy(arrays[names[0]][0].astype(np.float32)).T  # EMNIST is stored transposed
    corr = torch.corrcoef(torch.stack([raw0.flatten(), ds.x_train[0, 0].flatten()]))[0, 1]
    assert float(corr) > 0.999


def test_emnist_balanced(tmp_path: Path) -> None:
    names = [f"emnist-balanced-{p}-{k}-idx{d}-ubyte" for p in ("train", "test") for k, d in (("images", 3),
                                                                                               ("labels", 1))]
    _write_mnist_like(tmp_path / "EMNIST" / "raw", names, 20, 5, 47)
    ds = load_dataset(_cfg("emnist", tmp_path), seed=0, num_clients=2)
    assert ds.num_classes == 47 and len(ds.y_train) == 20 and len(ds.y_test) == 5


def test_mnist_missing_names_folder_and_fix(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        load_dataset(_cfg("mnist", tmp_path), seed=0, num_clients=1)
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path) in msg
    assert "MNIST/raw/train-images-idx3-ubyte" in msg and "dataset.download: true" in msg


def test_mnist_truncated_file_is_named(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    _write_mnist_like(raw, MNIST_NAMES, 10, 5, 10)
    gz = raw / "t10k-images-idx3-ubyte.gz"
    data = gzip.decompress(gz.read_bytes())
    gz.unlink()
    (raw / "t10k-images-idx3-ubyte").write_bytes(data[:-100])
    with pytest.raises(DatasetError, match="t10k-images-idx3-ubyte is truncated or corrupt"):
        load_dataset(_cfg("mnist", tmp_path), seed=0, num_clients=1)


def test_mnist_corrupt_gz_is_named(tmp_path: Path) -> None:
    raw = tmp_path / "FashionMNIST" / "raw"
    _write_mnist_like(raw, MNIST_NAMES, 10, 5, 10)
    gz = raw / "train-labels-idx1-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:15])
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte\.gz is truncated or corrupt"):
        load_dataset(_cfg("fashion_mnist", tmp_path), seed=0, num_clients=1)
    assert not (raw / "train-labels-idx1-ubyte").exists()


def test_mnist_mismatched_counts(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    _write_mnist_like(raw, MNIST_NAMES, 10, 5, 10)
    _write_idx(raw / MNIST_NAMES[1], np.zeros(9, dtype=np.uint8))
    with pytest.raises(DatasetError, match="10 images but .* 9 labels"):
        load_dataset(_cfg("mnist", tmp_path), seed=0, num_clients=1)


def test_download_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets as tvd

    def offline(self: object) -> None:
        raise URLError("no network")

    monkeypatch.setattr(tvd.MNIST, "download", offline)
    with pytest.raises(DatasetError, match="dataset.download: could not download MNIST") as err:
        load_dataset(_cfg("mnist", tmp_path, download=True), seed=0, num_clients=1)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- CIFAR
def test_cifar10_loads_pickles(tmp_path: Path) -> None:
    files = {f"data_batch_{i}": 6 for i in range(1, 6)} | {"test_batch": 7}
    labels = _write_cifar(tmp_path / "cifar-10-batches-py", files, "labels", 10)
    with open(tmp_path / "cifar-10-batches-py" / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [str(i) for i in range(10)]}, f)
    ds = load_dataset(_cfg("cifar10", tmp_path), seed=0, num_clients=3)
    assert ds.x_train.shape == (30, 3, 32, 32) and ds.x_test.shape == (7, 3, 32, 32)
    expected = np.concatenate([labels[f"data_batch_{i}"] for i in range(1, 6)])
    assert np.array_equal(ds.y_train.numpy(), expected)
    assert np.array_equal(ds.y_test.numpy(), labels["test_batch"])
    assert ds.num_classes == 10
    channel_means = ds.x_train.mean(dim=(0, 2, 3))
    assert torch.allclose(channel_means, torch.zeros(3), atol=1e-4)


def test_cifar100_loads_fine_labels(tmp_path: Path) -> None:
    labels = _write_cifar(tmp_path / "cifar-100-python", {"train": 12, "test": 4}, "fine_labels", 100)
    ds = load_dataset(_cfg("cifar100", tmp_path), seed=0, num_clients=2)
    assert ds.num_classes == 100 and ds.x_train.shape == (12, 3, 32, 32)
    assert np.array_equal(ds.y_train.numpy(), labels["train"])
    assert np.array_equal(ds.y_test.numpy(), labels["test"])


def test_cifar_missing_and_truncated(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        load_dataset(_cfg("cifar10", tmp_path), seed=0, num_clients=1)
    assert "cifar-10-batches-py" in str(err.value) and "dataset.download: true" in str(err.value)
    base = tmp_path / "cifar-100-python"
    _write_cifar(base, {"train": 12, "test": 4}, "fine_labels", 100)
    (base / "test").write_bytes((base / "test").read_bytes()[:200])
    with pytest.raises(DatasetError, match="cifar-100-python/test is truncated or corrupt"):
        load_dataset(_cfg("cifar100", tmp_path), seed=0, num_clients=1)


@pytest.mark.parametrize("compress", [True, False])
def test_fashion_mnist_flat_folder_of_published_files(tmp_path: Path, compress: bool) -> None:
    """The four IDX files lying directly in dataset.root (as published, gz or not) load like the
    torchvision layout, and the folder is not written to (a shared copy may be read-only)."""
    rng = np.random.default_rng(3)
    arrays = [_fake_images(rng, 9), rng.integers(0, 10, 9), _fake_images(rng, 5), rng.integers(0, 10, 5)]
    for name, arr in zip(MNIST_NAMES, arrays):
        _write_idx(tmp_path / name, arr, compress=compress)
    before = sorted(p.name for p in tmp_path.iterdir())
    ds = load_dataset(_cfg("fashion_mnist", tmp_path), seed=0, num_clients=1)
    assert ds.x_train.shape == (9, 1, 28, 28) and ds.x_test.shape == (5, 1, 28, 28)
    assert np.array_equal(ds.y_train.numpy(), arrays[1]) and np.array_equal(ds.y_test.numpy(), arrays[3])
    raw0 = torch.from_numpy(arrays[0][0].astype(np.float32))
    assert float(torch.corrcoef(torch.stack([raw0.flatten(), ds.x_train[0, 0].flatten()]))[0, 1]) > 0.999
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_flat_folder_truncated_gz_is_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    for name, arr in zip(MNIST_NAMES, [_fake_images(rng, 4), rng.integers(0, 10, 4), _fake_images(rng, 2),
                                       rng.integers(0, 10, 2)]):
        _write_idx(tmp_path / name, arr)
    gz = tmp_path / "t10k-labels-idx1-ubyte.gz"
    gz.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes())[:-1]))
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte is truncated or corrupt \(expected 10 bytes"):
        load_dataset(_cfg("fashion_mnist", tmp_path), seed=0, num_clients=1)
