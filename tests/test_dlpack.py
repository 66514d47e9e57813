"""DLPack: zero-copy both ways with NumPy (and torch CPU); copies where a backend cannot share."""

import numpy as np
import pytest

import ember


def test_zero_copy_from_and_to_numpy():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ember.from_dlpack(a)
    assert t.shape == (2, 3) and t.dtype == ember.float32
    a[0, 0] = 42
    assert t.tolist()[0][0] == 42.0
    back = np.from_dlpack(t)
    assert np.shares_memory(back, a)
    assert t.__dlpack_device__() == (1, 0)


def test_writes_show_through_both_ways_with_numpy():
    """What the torch test below checks, with NumPy as the other side: a write to the
    producer's buffer shows in ember's tensor, and an in-place ember op in the consumer's view."""
    src = np.arange(4, dtype=np.float64)
    t = ember.from_dlpack(src)
    src[1] = -1
    assert t.tolist() == [0.0, -1.0, 2.0, 3.0] and t.dtype == ember.float64
    e = ember.zeros(3)
    view = np.from_dlpack(e)
    e.add_(2.0)
    assert view.tolist() == [2.0, 2.0, 2.0]
    e.mul_(ember.tensor([1.0, 2.0, 3.0]))
    assert view.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.torch  # exchanges memory with live torch tensors: nothing to store
def test_with_torch_cpu_both_ways(torch):
    src = torch.arange(4, dtype=torch.float64)
    t = ember.from_dlpack(src)
    src[1] = -1
    assert t.tolist() == [0.0, -1.0, 2.0, 3.0] and t.dtype == ember.float64
    e = ember.zeros(3)
    view = torch.from_dlpack(e)
    e.add_(2.0)
    assert view.tolist() == [2.0, 2.0, 2.0]


def test_python_backend_copies_and_refuses_non_producers():
    p = ember.tensor([1.0, 2.0], backend="python")
    assert np.from_dlpack(p).tolist() == [1.0, 2.0]
    assert ember.from_dlpack(np.ones(2), backend="python").backend.name == "python"
    with pytest.raises(TypeError, match="DLPack producer"):
        ember.from_dlpack([1, 2])


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_a_storage_dtype_names_the_way_out(backend):
    t = ember.ones(3, backend=backend).to(ember.bfloat16)
    with pytest.raises(
        ember.DTypeError, match=r"bfloat16 tensor has no DLPack exchange.*t\.float\(\).*test_dlpack\.py"
    ):
        t.__dlpack__()
