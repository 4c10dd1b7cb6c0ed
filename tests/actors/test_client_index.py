"""``ClientIndex``: every client's sample indices in one flat array and offsets, handed out
as the arrays a list of per-client arrays held."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from fedclock.actors.federation import ClientIndex, Federation


def test_client_index_holds_the_same_arrays_in_one_flat_array() -> None:
    arrays = [np.array([4, 2, 9]), np.array([], dtype=np.int64), np.array([7])]
    index = ClientIndex.of(arrays)
    assert index.flat.tolist() == [4, 2, 9, 7] and index.offsets.tolist() == [0, 3, 3, 4]
    assert len(index) == 3 and index.sizes().tolist() == [3, 0, 1]
    assert [a.tolist() for a in index] == [[4, 2, 9], [], [7]]
    assert index[-1].tolist() == [7] and [a.tolist() for a in index[1:]] == [[], [7]]
    assert index[0].dtype == np.int64 and ClientIndex.of(index) is index
    with pytest.raises(IndexError):
        index[3]
    again = pickle.loads(pickle.dumps(index))
    assert again.flat.tolist() == index.flat.tolist() and again.offsets.tolist() == index.offsets.tolist()


def test_federation_keeps_its_client_arrays_as_a_client_index() -> None:
    fed = Federation(x=torch.zeros(5, 2), y=torch.tensor([0, 1, 1, 0, 1]), client_train=[np.array([0, 1]),
                     np.array([2, 3, 4])], client_test=[np.array([3]), np.array([], dtype=np.int64)],
                     x_test=torch.zeros(1, 2), y_test=torch.zeros(1, dtype=torch.int64), num_classes=2,
                     dataset_name="toy")
    assert isinstance(fed.client_train, ClientIndex) and isinstance(fed.client_test, ClientIndex)
    assert fed.num_clients == 2 and fed.client_sizes().tolist() == [2, 3]
    assert fed.label_histogram().tolist() == [[1, 1], [1, 2]]
    data = fed.client_data(1)
    assert data.y_train.tolist() == [1, 0, 1] and len(data.y_test) == 0


def test_federation_pickles_its_sample_tensors_as_numpy_buffers_out_of_band() -> None:
    """Protocol 5 (as Ray's object store pickles) hands the four sample tensors over as
    out-of-band buffers: the unpickled federation's tensors use the very same memory (no copy
    per executor) and hold the same values; a tensor NumPy cannot hold stays a tensor."""
    fed = Federation(x=torch.arange(6.0).reshape(3, 2), y=torch.tensor([0, 1, 1]),
                     client_train=[np.array([0, 1]), np.array([2])], client_test=[np.array([2]), np.array([0])],
                     x_test=torch.ones(2, 2), y_test=torch.tensor([1, 0]), num_classes=2, dataset_name="t")
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(fed, protocol=5, buffer_callback=buffers.append)
    again = pickle.loads(data, buffers=buffers)
    assert len(buffers) == 8  # x, y, x_test, y_test, and the train and test index arrays and offsets
    assert again.x.data_ptr() == fed.x.data_ptr() and again.y_test.data_ptr() == fed.y_test.data_ptr()
    assert again.x.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]] and again.y.dtype == torch.int64
    assert again.client_data(1).x_train.tolist() == [[4.0, 5.0]]
    plain = pickle.loads(pickle.dumps(fed))  # in-band: its own copy
    assert plain.x.data_ptr() != fed.x.data_ptr() and plain.x.equal(fed.x)
    half = Federation(x=torch.zeros(2, 1, dtype=torch.bfloat16), y=torch.tensor([0, 1]),
                      client_train=[np.array([0, 1])], client_test=[np.array([], dtype=np.int64)],
                      x_test=torch.zeros(1, 1, dtype=torch.bfloat16), y_test=torch.tensor([0]), num_classes=2,
                      dataset_name="t")
    assert pickle.loads(pickle.dumps(half, protocol=5)).x.dtype == torch.bfloat16
