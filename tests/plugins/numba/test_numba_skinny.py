"""ember_numba/skinny.py: the skinny product (weights read in place, vector microkernel) against
float64 products, its bits on any thread count, and the callers that must agree with it to the
bit (blas.matmul, the 1x1 rewrite, batch-1 convolutions). Nothing is cached between calls, so
weights changed between calls (in place, or new arrays) give the new product."""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

import ember  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")


def _bits(a):
    return np.asarray(a).view(np.uint32)


@pytest.fixture
def skinny_always(monkeypatch):
    """The skinny product for small weights too, on any machine (LLVM splits the vectors where
    there is no AVX-512: slower, the same values)."""
    from ember_numba import skinny

    monkeypatch.setattr(skinny, "MIN_WEIGHT_BYTES", 0)
    monkeypatch.setattr(skinny, "VECTORS", True)
    calls = []
    product = skinny.matmul
    monkeypatch.setattr(skinny, "matmul", lambda *a, **k: calls.append(a[0].shape) or product(*a, **k))
    monkeypatch.setattr(
        skinny, "calls", calls, raising=False
    )  # the weights' shape of each call, for the tests to see it taken
    return skinny


def _close(got, w, x):
    want = w.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(w).astype(np.float64) @ np.abs(x).astype(np.float64)  # the sum's magnitude, for its rounding
    assert got.dtype == np.float32 and got.shape == want.shape
    assert (np.abs(got - want) <= 1e-6 * w.shape[1] ** 0.5 * scale + 1e-30).all()


# tiles of 12 x 1, 8 x 2 and 8 x 3, then single rows; 1 to 5 vectors of columns, and one or two columns
# as dot products (K a multiple of 16) or padded to a vector (other K, more columns)
@pytest.mark.parametrize(
    "o,k,p",
    [(24, 64, 49), (37, 300, 17), (3, 5, 1), (17, 33, 64), (100, 7, 40), (12, 16, 16), (64, 128, 200)]
    + [(29, 48, 34), (5, 32, 2), (9, 16, 1), (21, 160, 80), (13, 64, 51)],
)
def test_skinny_matmul_is_the_product(o, k, p):
    from ember_numba import skinny

    rng = np.random.RandomState(o + k + p)
    w, x = rng.standard_normal((o, k)).astype(np.float32), rng.standard_normal((k, p)).astype(np.float32)
    got = skinny.matmul(w, x)
    _close(got, w, x)
    out = np.full((o, p), np.nan, np.float32)
    assert skinny.matmul(w, x, out) is out
    np.testing.assert_array_equal(_bits(out), _bits(got))


def test_skinny_matmul_says_what_it_cannot_take():
    from ember_numba import skinny

    with pytest.raises(TypeError, match="float32"):
        skinny.matmul(np.ones((4, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"\(4, 3\) and \(2, 2\)"):
        skinny.matmul(np.ones((4, 3), np.float32), np.ones((2, 2), np.float32))
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(skinny.matmul(w.T, np.ones((4, 1), np.float32))[:, 0], w.sum(0))  # strided w


def test_skinny_matmul_bits_do_not_depend_on_the_threads():
    from ember_numba import skinny

    rng = np.random.RandomState(1)
    w, x = rng.standard_normal((300, 256)).astype(np.float32), rng.standard_normal((256, 49)).astype(np.float32)
    blocks = []
    one = skinny.matmul(w, x, threads=1)
    two = skinny.matmul(w, x, threads=2, then=lambda *b: blocks.append(b))
    np.testing.assert_array_equal(_bits(one), _bits(two))
    assert sorted(blocks) == [(0, 72, 0, 49), (72, 144, 0, 49), (144, 216, 0, 49), (216, 300, 0, 49)]


def test_skinny_matmul_follows_weights_changed_between_calls():
    """No packed copy is kept: in-place updates (an optimizer step), a new array at the old
    array's address (load_state_dict) and views all give the product of the weights now."""
    from ember_numba import skinny

    rng = np.random.RandomState(2)
    w, x = rng.standard_normal((48, 64)).astype(np.float32), rng.standard_normal((64, 49)).astype(np.float32)
    first = skinny.matmul(w, x)
    w -= 0.5 * rng.standard_normal(w.shape).astype(np.float32)  # in place, as a training step
    second = skinny.matmul(w, x)
    _close(second, w, x)
    assert not np.array_equal(first, second)
    w[...] = 0
    assert not skinny.matmul(w, x).any()


def test_blas_matmul_takes_the_skinny_product_with_its_bits(skinny_always):
    from ember_numba import blas

    rng = np.random.RandomState(3)
    w = rng.standard_normal((40, 72)).astype(np.float32)
    x = rng.standard_normal((3, 72, 49)).astype(np.float32)  # a stack: one product per matrix
    got = blas.matmul(w, x)
    for i in range(3):
        np.testing.assert_array_equal(_bits(got[i]), _bits(skinny_always.matmul(w, x[i])))
    assert blas.matmul(w, x[0].astype(np.float64)).dtype == np.float64  # mixed dtypes: NumPy's rules
    assert not skinny_always.takes(w, rng.standard_normal((72, 65)).astype(np.float32))  # too wide
    assert not skinny_always.takes(w, rng.standard_normal((72, 1)).astype(np.float32))  # a matrix-vector product


@pytest.mark.parametrize("one", [True, False], ids=["one-thread", "threads"])
@pytest.mark.parametrize("residual", [True, False])
def test_pointwise_rewrite_is_the_nodes_with_the_skinny_product(skinny_always, one, residual, monkeypatch):
    """The 1x1 rewrite at batch 1 (ResNet-50's last stage: 49 pixels) gives the nodes' bits,
    the product being the skinny one in both."""
    from ember_numba import launch, rewrites

    class Always:
        def choose(self, key, watch=False):
            return one, False, None

        def record(self, *args):
            pass

    monkeypatch.setattr(rewrites, "POINTWISE_THREADS", Always())
    monkeypatch.setattr(rewrites, "MIN_FLOPS", 0)
    monkeypatch.setattr(launch, "threads", lambda: 2)
    impls = ember.get_backend("numba").impls
    rng = np.random.RandomState(4)
    o, c, h = 200, 96, 7
    w, x = rng.standard_normal((o, c)).astype(np.float32), rng.standard_normal((1, c, h * h)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    r = rng.standard_normal((1, o, h, h)).astype(np.float32) if residual else None
    v = impls["add"](impls["reshape"](impls["matmul"](w, x), (1, o, h, h)), bias.reshape(1, -1, 1, 1))
    if residual:
        v = impls["add"](v, r)
    want = np.where(v > 0, v, 0)
    got = rewrites.pointwise_bias_relu(w, x, bias, r, shape=(1, o, h, h))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    _close(impls["matmul"](w, x)[0], w, x[0])
    assert skinny_always.calls.count((o, c)) == 3


@pytest.mark.parametrize("threads", [1, 2])
def test_batch1_convolution_takes_it_and_its_rewrite_agrees(skinny_always, threads, monkeypatch):
    """A batch-1 3x3 convolution on a 7x7 map (im2col columns, 49 pixels) on one thread or two:
    within float32 rounding of float64, and conv2d_bias_relu gives conv2d's nodes' bits."""
    from ember_numba import conv, launch, rewrites

    monkeypatch.setattr(conv, "threads", lambda: threads)
    monkeypatch.setattr(launch, "threads", lambda: threads)
    rng = np.random.RandomState(5)
    x, w = rng.standard_normal((1, 32, 7, 7)).astype(np.float32), rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    geo = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    y = conv._conv2d(x, w, **geo)
    assert skinny_always.calls == [(64, 32 * 9)]
    want = ember.get_backend("numpy").impls["conv2d"](
        x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), (1, 1), 1
    )
    assert np.abs(y - want).max() <= 1e-5 * np.abs(want).max()
    p = y + bias.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(_bits(rewrites.conv2d_bias_relu(x, w, bias, **geo)), _bits(np.where(p > 0, p, 0)))


# stacked products (Winograd F(4x4)'s 36 a chunk): rows in tiles of 12 or 8 and single rows,
# 1 to 8 vectors of columns, sums of 1 to 128 terms
@pytest.mark.parametrize(
    "s,o,k,p", [(36, 288, 32, 64), (3, 29, 64, 32), (2, 5, 7, 16), (4, 13, 1, 128), (1, 12, 48, 48), (2, 40, 128, 128)]
)
def test_stacked_is_each_product(s, o, k, p, monkeypatch):
    from ember_numba import skinny

    monkeypatch.setattr(skinny, "VECTORS", True)  # the row kernel on any machine (LLVM splits the vectors)
    rng = np.random.RandomState(s + o + k + p)
    a, b = rng.standard_normal((s, o, k)).astype(np.float32), rng.standard_normal((s, k, p)).astype(np.float32)
    calls = []
    rows = skinny._stacked_rows
    monkeypatch.setattr(skinny, "_stacked_rows", lambda *args: calls.append(1) or rows(*args))
    out = np.full((s, o, p), np.nan, np.float32)
    assert skinny.stacked(a, b, out) is out and calls == [1]
    for i in range(s):
        _close(out[i], a[i], b[i])
    # each output one chain of multiply-adds in k's order: the same bits from any block of rows
    part = np.empty((s, o - 1, p), np.float32)
    skinny.stacked(np.ascontiguousarray(a[:, 1:]), b, part)
    np.testing.assert_array_equal(_bits(part), _bits(out[:, 1:]))


def test_stacked_leaves_other_products_to_blas(monkeypatch):
    from ember_numba import skinny

    monkeypatch.setattr(skinny, "VECTORS", True)
    monkeypatch.setattr(skinny, "_stacked_rows", lambda *args: pytest.fail("the row kernel took it"))
    rng = np.random.RandomState(3)
    for a, b in [
        (rng.standard_normal((2, 8, 129)), rng.standard_normal((2, 129, 16))),  # too many terms
        (rng.standard_normal((2, 8, 16)), rng.standard_normal((2, 16, 20))),  # not whole vectors
        (rng.standard_normal((2, 8, 16)), rng.standard_normal((2, 16, 144))),  # too many columns
        (rng.standard_normal((2, 16, 8)).transpose(0, 2, 1), rng.standard_normal((2, 16, 16))),  # a view
    ]:
        a, b = a.astype(np.float32), b.astype(np.float32)
        out = np.empty((2, a.shape[1], b.shape[2]), np.float32)
        np.testing.assert_array_equal(skinny.stacked(a, b, out), np.matmul(a, b))
    double = np.ones((2, 8, 16)), np.ones((2, 16, 16))
    assert skinny.stacked(*double, np.empty((2, 8, 16))).dtype == np.float64
    view = np.ones((2, 16, 32), np.float32).transpose(0, 2, 1)
    assert skinny.stacked_operand(view).flags.c_contiguous
    big = np.ones((2, 16, 256), np.float32).transpose(0, 2, 1)
    assert skinny.stacked_operand(big) is big


def test_docstring_examples():
    import doctest

    from ember_numba import skinny

    result = doctest.testmod(skinny, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
