"""sort, argsort, topk and cumsum (the ordering primitives, primitives/sorting.py) through the
front end, against torch's answers (stored in tests/references) on every CPU backend."""

import numpy as np
import pytest
from references import known

import ember

BACKENDS = ["numpy", "python"]


def _values(rng):
    """Ties (a few distinct values), NaN, infinities and a negative zero."""
    x = rng.integers(-3, 4, (4, 7)).astype(np.float32)
    x[0, 2], x[1, 5], x[2, 0], x[3, 3] = np.nan, np.inf, -np.inf, -0.0
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dim,descending", [(-1, False), (1, True), (0, False), (0, True)])
def test_sort_matches_torch_stable_sort(torch, rng, backend, dim, descending):
    x = _values(rng)
    values, indices = ember.tensor(x, backend=backend).sort(dim, descending=descending)
    want = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(values.numpy(), known(want.values))
    np.testing.assert_array_equal(indices.numpy(), known(want.indices))
    assert indices.dtype is ember.int64
    np.testing.assert_array_equal(
        ember.argsort(ember.tensor(x, backend=backend), dim, descending).numpy(), known(want.indices)
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k,dim,largest", [(3, -1, True), (2, 0, False), (7, 1, False), (0, 1, True)])
def test_topk_values_match_torch_and_ties_take_the_lower_index(torch, rng, backend, k, dim, largest):
    x = _values(rng)
    got = ember.topk(ember.tensor(x, backend=backend), k, dim, largest=largest)
    want = torch.topk(torch.tensor(x), k, dim, largest=largest)
    np.testing.assert_array_equal(got.values.numpy(), known(want.values))
    # torch leaves the order of equal values open; ember's rule (ONNX TopK's) is the stable sort's
    stable = torch.sort(torch.tensor(x), dim=dim, descending=largest, stable=True).indices
    np.testing.assert_array_equal(got.indices.numpy(), np.take(known(stable), np.arange(k), axis=dim))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sort_and_topk_gradients_go_back_to_where_the_values_came_from(torch, rng, backend):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    e = ember.tensor(x, backend=backend, requires_grad=True)
    (e.topk(2, 1).values * ember.tensor(w, backend=backend)).sum().backward()
    t = torch.tensor(x, requires_grad=True)
    (t.topk(2, 1).values * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(e.grad.numpy(), known(t.grad))
    e.grad = None
    (e.sort(0, descending=True).values * ember.tensor(x, backend=backend)).sum().backward()
    t.grad = None
    (t.sort(0, descending=True).values * torch.tensor(x)).sum().backward()
    np.testing.assert_allclose(e.grad.numpy(), known(t.grad), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool"])
def test_cumsum_matches_torch_dtype_and_values(torch, rng, backend, dtype):
    x = rng.integers(0, 3, (3, 5)).astype(dtype)
    for dim in (0, 1, -1):
        got = ember.tensor(x, backend=backend).cumsum(dim)
        want = known(torch.cumsum(torch.tensor(x), dim))
        assert got.dtype.name == want.dtype.name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_cumsum_gradient_is_the_reverse_cumsum(torch, rng):
    x = rng.standard_normal((4, 6))
    e = ember.tensor(x, requires_grad=True)
    g = ember.grad(lambda t: (t.cumsum(1) ** 2).sum())
    t = torch.tensor(x, requires_grad=True)
    (t.cumsum(1) ** 2).sum().backward()
    np.testing.assert_allclose(g(e).numpy(), known(t.grad), rtol=1e-12)


def test_bad_k_and_dim_name_the_cause_and_the_line():
    x = ember.ones(3, 4)
    with pytest.raises(ember.ShapeError, match=r"topk: k=5 is out of range for dim 1 of size 4") as err:
        x.topk(5)
    assert "test_sorting.py" in str(err.value)
    with pytest.raises(ember.ShapeError, match="dim 2 is out of range"):
        x.sort(2)


def test_0d_tensors_sort_to_themselves():
    x = ember.tensor(2.5)
    assert x.sort().values.item() == 2.5 and x.sort().indices.item() == 0
    assert x.topk(1).values.item() == 2.5 and x.cumsum(0).item() == 2.5


@pytest.mark.parametrize("backend", BACKENDS + ["numba"])
def test_under_jit_the_ordering_primitives_compute_the_same(rng, backend):
    if backend == "numba":
        pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

    def f(x, i):
        top = x.topk(2, 1)
        return (
            (top.values * 2).sum()
            + x.sort(0, descending=True).values[0].sum()
            + x.cumsum(1).sum()
            + (x % 0.7).sum()
            + ((i & 3) ^ (i >> 1)).sum().float()
            + top.indices.sum().float()
        )

    x = ember.tensor(rng.standard_normal((4, 5)).astype(np.float32), backend=backend)
    i = ember.tensor(np.arange(10), backend=backend)
    jf = ember.jit(f)
    assert jf(x, i).item() == jf(x, i).item() == f(x, i).item()
    grad = ember.grad(lambda t: (t.topk(2, 1).values ** 2).sum() + t.cumsum(0).sum())
    np.testing.assert_allclose(ember.jit(grad)(x).numpy(), grad(x).numpy(), rtol=1e-6)
