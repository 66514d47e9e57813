"""The storage dtypes (bfloat16, float8, float4, e8m0, int4 ... uint2) and text on the cupy backend
(ember_cupy/storage.py), against the NumPy backend code for code: on the host harness here, and
on the GPU where there is one."""

import numpy as np
import pytest

import ember
from ember import dtypes as D

STORAGE = sorted(D.STORAGE, key=lambda d: d.name)
VALUES = np.array(
    [0.3, -1.7, 2.5, 300.0, -0.0, np.nan, 5.5, 1e6, -1e6, np.inf, 7.0, -8.0, 1.0625, 2.0**-130], np.float32
)


@pytest.fixture(params=["host", "gpu"])
def backend(request):
    return request.getfixturevalue(request.param)


def codes(t):
    a = t.numpy()
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_casts_round_like_the_numpy_backend(backend, dtype, rng):
    x = np.concatenate([VALUES, rng.normal(0, 30, 500).astype(np.float32)])
    got = ember.tensor(x, backend=backend).to(dtype)
    want = ember.tensor(x).to(dtype)
    assert got.dtype is dtype and got.backend is backend
    np.testing.assert_array_equal(codes(got), codes(want))
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    ints = np.arange(-20, 20)
    np.testing.assert_array_equal(
        codes(ember.tensor(ints, backend=backend).to(dtype)), codes(ember.tensor(ints).to(dtype))
    )


def test_values_move_on_the_codes_and_compute_on_the_upcast(backend, rng):
    x = rng.normal(0, 3, (4, 6)).astype(np.float32)
    out = {}
    for b in (backend, ember.get_backend("numpy")):
        t = ember.tensor(x, backend=b).to(D.bfloat16)
        padded = ember.nn.functional.pad(t[:2, :3], (2, 2), value=0.3)
        moved = ember.cat([t.T.reshape(3, 8)[::2, 1:], padded]).flip(0)
        picked = ember.where(t > 0, t, ember.full((), 0.7, dtype=D.bfloat16, backend=b))
        out[b.name] = [
            moved,
            picked,
            t + t,
            t.take(ember.tensor([2, 0], backend=b), 1),
            ember.arange(5, dtype=D.bfloat16, backend=b),
        ]
    for got, want in zip(*out.values()):
        assert got.dtype is want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    assert out[backend.name][1].dtype is D.bfloat16 and out[backend.name][2].dtype is D.float32


def test_bytes_numpy_and_transfers(backend):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.5, -0.25, 448.0], dtype=ml_dtypes.float8_e4m3fn)
    t = ember.tensor(a, backend=backend)
    assert t.dtype is D.float8_e4m3fn and t.tolist() == [1.5, -0.25, 448.0]
    assert t.numpy().dtype == ml_dtypes.float8_e4m3fn and t.to("numpy").tolist() == [1.5, -0.25, 448.0]
    w = ember.tensor([[1.0, 2.0]], backend=backend).to(D.bfloat16)
    before = backend.reset_transfers()
    (w.float() * 3).to(D.bfloat16)  # bfloat16 decodes and encodes on the device
    assert backend.reset_transfers() == dict.fromkeys(before, 0)


def test_arithmetic_on_a_stored_buffer_fails_so_dispatch_upcasts(backend):
    from ember_cupy.storage import Stored

    s = ember.tensor([1.0, 2.0], backend=backend).to(D.bfloat16)._data
    assert isinstance(s, Stored)
    with pytest.raises(TypeError):
        backend.impls["ne"](s, s)


def test_text_stays_on_the_host_and_its_comparisons_go_to_the_device(backend):
    x = ember.tensor(["a", "b", "c", "d"], backend=backend)
    y = ember.tensor(["a", "x", "c", "y"], backend=backend)
    assert x.dtype is ember.string and x.backend is backend
    same = x == y
    assert same.dtype is D.bool_ and same.tolist() == [True, False, True, False]
    assert (same.long() * 2).tolist() == [2, 0, 2, 0]  # the bools are a device buffer
    assert ember.where(same, x, y).flip(0).tolist() == ["y", "c", "x", "a"]
    assert x.reshape(2, 2).T[1].tolist() == ["b", "d"] and x.take(ember.tensor([3], backend=backend), 0).tolist() == [
        "d"
    ]
    assert (
        x.to("numpy").tolist() == ["a", "b", "c", "d"]
        and ember.tensor(x.numpy(), backend=backend).tolist() == x.tolist()
    )
    with pytest.raises(ember.DTypeError, match="string tensors have no arithmetic"):
        x + y
