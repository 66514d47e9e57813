"""ember-numba's ordering kernels (sorting.py) against the NumPy reference: the same indices
(ties and NaN included) and the same running sums, to the bit."""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from ember.backends.numpy import backend as nb  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")


def _ties(rng, shape, dtype):
    """Few distinct values (ties everywhere), some NaN and infinities."""
    x = rng.integers(-3, 4, shape).astype(dtype)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = np.nan
    flat[rng.integers(0, flat.size, 3)] = np.inf
    flat[rng.integers(0, flat.size, 3)] = -np.inf
    return x


SHAPES = [((40, 257), -1), ((40, 257), 0), ((6, 50, 9), 1), ((3000,), 0)]


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_argtopk_and_argsort_kernels_give_the_reference_indices(
    shape, axis, dtype, backend, kernels_always, launches, rng
):
    x = _ties(rng, shape, dtype)
    for k in (1, 5, shape[axis]):
        for largest in (True, False):
            np.testing.assert_array_equal(
                backend.impls["argtopk"](x, k, axis, largest), nb.IMPLS["argtopk"](x, k, axis, largest)
            )
    for descending in (False, True):
        np.testing.assert_array_equal(
            backend.impls["argsort"](x, axis, descending), nb.IMPLS["argsort"](x, axis, descending)
        )
    names = {f.__name__ for f in launches}
    assert {"_argsort_rows", "_topk_rows"} <= names, names


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
def test_cumsum_kernel_adds_in_the_reference_order(shape, axis, backend, kernels_always, launches, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    for reverse in (False, True):
        np.testing.assert_array_equal(backend.impls["cumsum"](x, axis, reverse), nb.IMPLS["cumsum"](x, axis, reverse))
    assert "_cumsum_rows" in {f.__name__ for f in launches}


def test_views_and_integers_take_the_reference(backend, kernels_always, launches, rng):
    x = rng.integers(-5, 5, (50, 60))
    np.testing.assert_array_equal(backend.impls["argtopk"](x, 3, 1, True), nb.IMPLS["argtopk"](x, 3, 1, True))
    np.testing.assert_array_equal(
        backend.impls["cumsum"](x.T.astype(np.float32), 0), nb.IMPLS["cumsum"](x.T.astype(np.float32), 0)
    )
    assert not launches
