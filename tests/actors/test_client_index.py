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
