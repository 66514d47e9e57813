"""backends/numpy/openblas.py: NumPy's bundled OpenBLAS called directly: ``axpy`` rounds once
per element, and ``gemm`` at its address makes np.matmul's own call (its bits)."""

import numpy as np
import pytest

from ember.backends.numpy import openblas


def _needs(f):
    if f is None:
        pytest.skip("NumPy's BLAS is not a bundled OpenBLAS with CBLAS entry points")
    return f


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_adds_a_scaled_vector_in_place(dtype):
    axpy = _needs(openblas.axpy_for(dtype))
    x, y = np.arange(5, dtype=dtype), np.ones(5, dtype)
    axpy(4, dtype(2), x, y)  # the first four only
    assert y.tolist() == [1, 3, 5, 7, 1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_at_its_address_has_matmuls_bits(dtype):
    import ctypes

    address = _needs(openblas.gemm_address(dtype))
    i, p, scalar = ctypes.c_int64, ctypes.c_int64, ctypes.c_float if dtype == np.float32 else ctypes.c_double
    w = ctypes.c_int
    gemm = ctypes.CFUNCTYPE(None, w, w, w, i, i, i, scalar, p, i, p, i, scalar, p, i)(address)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 300)).astype(dtype), rng.standard_normal((300, 900)).astype(dtype)
    out = np.zeros((37, 1000), dtype)  # a wider buffer: ldc is its row length
    gemm(101, 111, 111, 37, 900, 300, 1.0, a.ctypes.data, 300, b.ctypes.data, 900, 0.0, out.ctypes.data, 1000)
    assert np.array_equal(out[:, :900], np.matmul(a, b))
    assert not out[:, 900:].any()


def test_other_dtypes_have_neither():
    assert openblas.gemm_address(np.int32) is None
    assert openblas.axpy_for(np.complex64) is None
