"""``x[key]`` and ``x[key] = v`` against NumPy's indexing, and gradients through indexing."""

import numpy as np
import pytest

import ember


def same(e, ref):
    ref = np.asarray(ref)
    assert isinstance(e, ember.Tensor) and e.shape == ref.shape and str(e.dtype) == str(ref.dtype), (
        e.shape,
        e.dtype,
        ref.shape,
        ref.dtype,
    )
    np.testing.assert_array_equal(e.numpy(), ref)


KEYS = [
    1,
    -1,
    slice(1, None),
    slice(None, None, -1),
    slice(None, None, -2),
    slice(-1, 0, -1),
    (slice(None), slice(3, 0, -2)),
    (Ellipsis, 1),
    (None, slice(None), None),
    (1, Ellipsis, None),
    (Ellipsis,),
    (slice(None), None, 2),
    (0, 1, 2),
    (-1, slice(None, None, 2), None, -2),
    [0, 2],
    [-1, 0, -1],
    [[0, 1], [1, 0]],
    ([0, 1], [1, 2]),
    (slice(None), [0, 2], [1, 0]),
    ([0, 1], slice(None), [1, 0]),
    ([[0], [2]], slice(1, 3), [1, 4]),
    (0, slice(None), [1, 2]),
    (slice(None), 1, [0, 3]),
    (Ellipsis, [2, 0]),
    (None, [1, 2], None),
    ([2, 0], Ellipsis, 0),
    ([1], [[0, 3], [1, 2]], [4]),
    (slice(None), [[0, 1, 2]], slice(None, None, -1)),
    ([], slice(None)),
    True,
    False,
    (0, False),
    (0, True),
    (Ellipsis, True),
    (1, Ellipsis, False, 2),
    (True, [0, 1]),
    (None, False, 0),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem_matches_numpy(key):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    same(ember.tensor(a)[key], a[key])
    # the same key with index tensors instead of lists
    tkey = tuple(
        ember.tensor(k, dtype=ember.int64) if isinstance(k, list) else k
        for k in (key if isinstance(key, tuple) else (key,))
    )
    same(ember.tensor(a)[tkey], a[key])


@pytest.mark.parametrize(
    "key",
    [k for k in KEYS if isinstance(k, bool) or (isinstance(k, tuple) and any(isinstance(v, bool) for v in k))],
    ids=repr,
)
def test_zero_dim_bool_tensor_indices_match_numpy(key):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    ekey = tuple(ember.tensor(v) if isinstance(v, bool) else v for v in (key if isinstance(key, tuple) else (key,)))
    same(ember.tensor(a)[ekey], a[key])


@pytest.mark.parametrize(
    "mask_of,key_of",
    [
        (lambda a: a % 3 == 0, lambda m: m),
        (lambda a: a[:, :, 0] > 20, lambda m: m),
        (lambda a: a[:, 0, 0] > 100, lambda m: m),
        (lambda a: a[0] % 2 == 1, lambda m: (slice(1, None), m)),
        (lambda a: a[0] % 2 == 1, lambda m: (Ellipsis, m)),
        (lambda a: a[:, 0, 0] >= 0, lambda m: (m, slice(1, 3))),
        (lambda a: a[0, :, 0] > 3, lambda m: (None, 1, m, [0, 2, 4])),
        (lambda a: a[0, 0] > 2, lambda m: (Ellipsis, m)),
        (lambda a: a[0, :, 0] > 7, lambda m: ([2, 0], m)),
    ],
)
def test_boolean_mask_matches_numpy(mask_of, key_of):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    m = mask_of(a)
    key = key_of(m)
    x = ember.tensor(a)
    ekey = (
        tuple(ember.tensor(k) if isinstance(k, np.ndarray) else k for k in key)
        if isinstance(key, tuple)
        else ember.tensor(key)
    )
    same(x[ekey], a[key])
    same(x[key], a[key])


def test_boolean_mask_of_wrong_shape_is_an_index_error():
    x = ember.zeros(3, 4)
    with pytest.raises(IndexError):
        x[ember.tensor([True, False])]


def test_index_out_of_range_is_an_index_error():
    x = ember.zeros(3, 4)
    with pytest.raises(IndexError):
        x[3]
    with pytest.raises(IndexError):
        x[:, [0, 4]]
    with pytest.raises(IndexError):
        x[0, 0, 0]


@pytest.mark.parametrize(
    "key,value",
    [
        (1, 5.0),
        ((slice(None), slice(1, 3)), np.full((3, 2), -1.0)),
        ((Ellipsis, -1), np.array([7.0, 8.0, 9.0])),
        ([0, 2], 3.0),
        ((slice(None), [0, 3]), np.arange(6.0).reshape(3, 2)),
        ((1, slice(None, None, -1)), np.arange(4.0)),
    ],
)
def test_setitem_matches_numpy(key, value):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = ember.tensor(a)
    x[key] = ember.tensor(value.astype(np.float32)) if isinstance(value, np.ndarray) else value
    a[key] = value
    same(x, a)


def test_setitem_with_mask_and_on_grad_tensor():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = ember.tensor(a)
    x[x > 5] = 0
    a[a > 5] = 0
    same(x, a)
    w = ember.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        w[0] = 2.0
    with ember.no_grad():
        w[0] = 2.0
    assert w.tolist() == [2.0, 1.0, 1.0]


GRAD_KEYS = [
    1,
    slice(None, None, -2),
    (Ellipsis, slice(1, 4, 2)),
    (None, 0, slice(None), None),
    [0, 0, 2],
    [[1, 1], [2, 0]],
    ([0, 1, 1], [2, 2, 3]),
    ([0, 2], slice(None), [4, 4]),
    (0, slice(None), [1, 1, 2]),
    (slice(None), [3, 0], slice(None, None, -1)),
]


@pytest.mark.parametrize("key", GRAD_KEYS, ids=repr)
def test_gradient_through_indexing_scatters_back(rng, key):
    """d/dx sum(x[key] * w) puts each w back where x[key] read it, repeats accumulating."""
    a = rng.standard_normal((3, 4, 5))
    x = ember.tensor(a, requires_grad=True)
    out = x[key]
    w = rng.standard_normal(out.shape)
    (out * ember.tensor(w)).sum().backward()
    # NumPy's scatter-add of w through the same key (None adds no dim to scatter through).
    parts = [np.asarray(k) if isinstance(k, list) else k for k in (key if isinstance(key, tuple) else (key,))]
    parts = tuple(k for k in parts if k is not None)
    expected = np.zeros_like(a)
    np.add.at(expected, parts, w.reshape(a[parts].shape))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_gradient_through_boolean_mask(rng):
    a = rng.standard_normal((4, 5))
    x = ember.tensor(a, requires_grad=True)
    m = a > 0
    (x[ember.tensor(m)] * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 3.0 * m)


def test_index_tensor_of_float_dtype_is_a_dtype_error():
    with pytest.raises(ember.DTypeError, match="float32"):
        ember.zeros(3)[ember.tensor([0.0, 1.0])]
    with pytest.raises(IndexError):
        ember.zeros(3)[1.5]
