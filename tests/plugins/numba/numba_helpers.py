"""The comparisons the ember-numba kernel tests share: a kernel's array against NumPy's, and
ember.fused's reference decomposition of a fused op run on the NumPy backend."""

import numpy as np

import ember
from ember.conformance import fused_ops

FUSED = fused_ops()


def close(got, want, rtol=1e-5, atol=1e-6):
    """``got`` is an array of ``want``'s dtype and shape, and close to it (NaNs where it has them)."""
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, (
        type(got),
        getattr(got, "dtype", None),
        getattr(got, "shape", None),
        want.dtype,
        want.shape,
    )
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def reference(name, *args, **params):
    """The fused op ``name`` as its decomposition computes it on NumPy (arrays in, arrays out;
    ``None`` passes through)."""
    with ember.no_grad():
        out = FUSED[name](*(None if a is None else ember.tensor(a, backend="numpy") for a in args), **params)
    return tuple(None if t is None else t.numpy() for t in out) if isinstance(out, tuple) else out.numpy()
