"""plugins/algorithms/tensors.py: the helpers every algorithm shares."""
import math
import warnings

import numpy as np
import torch

from zoo.plugins.algorithms.tensors import explained_variance, to_tensor


def test_read_only_wire_arrays_are_copied_without_warning():
    # np.frombuffer over bytes is read-only, like every array decoded from a frame;
    # torch warns (and would share a read-only buffer) if it were handed as is.
    a = np.frombuffer(bytes([0, 1, 2, 3]), np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = to_tensor(a, "cpu", torch.float32)
    t[0] = 9.0
    assert t.tolist() == [9.0, 1.0, 2.0, 3.0] and a.tolist() == [0, 1, 2, 3]


def test_writable_arrays_are_shared_and_cast_only_when_asked():
    a = np.array([1, 2], np.int64)
    t = to_tensor(a, "cpu")
    assert t.dtype == torch.int64 and t.data_ptr() == a.ctypes.data


def test_explained_variance_by_hand():
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])  # Var = 1.25
    # residuals [0, 0, 0, -1]: Var = 0.1875 -> 1 - 0.1875 / 1.25 = 0.85
    assert math.isclose(explained_variance(torch.tensor([1.0, 2.0, 3.0, 5.0]), y), 0.85, rel_tol=1e-6)
    assert math.isnan(explained_variance(y, torch.full((4,), 2.0)))
