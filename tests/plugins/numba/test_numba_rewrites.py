"""ember-numba's kernels for the NumPy runner's graph rewrites (ember_numba/rewrites.py): each
gives the values of the nodes it replaces as this backend computes them, bit for bit. (That a
compiled LeNet step on numba takes them, with eager numba's gradients to the bit, is checked
beside the NumPy backend's rewrites: tests/backends/test_numpy_rewrites.py.)"""

import functools

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

import ember  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")

POOL = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": False}


def _bits(a):
    a = np.asarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@functools.cache  # a property of this process's BLAS: probed once, not per parametrized case
def _blas_bits_follow_blocking() -> bool:
    """Does this OpenBLAS give a product different bits when it is computed in blocks of rows,
    or on another number of threads? With ``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 AMD EPYC
    (set on such machines for older OpenBLAS builds) it does, for 5% of a 256x64 @ 64x3136
    product's elements; without it, or elsewhere, the bits are the same."""
    from threadpoolctl import threadpool_limits

    rng = np.random.RandomState(0)
    w, x = rng.standard_normal((256, 64)).astype(np.float32), rng.standard_normal((64, 3136)).astype(np.float32)
    with threadpool_limits(1):
        whole = w @ x
        rows = np.concatenate([w[i : i + 64] @ x for i in range(0, 256, 64)])
    with threadpool_limits(2):
        two = w @ x
    return not (np.array_equal(_bits(whole), _bits(rows)) and np.array_equal(_bits(whole), _bits(two)))


@pytest.mark.parametrize("hw", [(8, 8), (11, 9)])  # covered by the windows / a row and column left over
@pytest.mark.parametrize("given", [True, False])
@pytest.mark.parametrize("k", [2, 3], ids=["2x2-vector-kernel", "3x3-gated-first"])
def test_relu_pool_backward_is_the_relu_gradient_of_the_pool_backward(hw, given, k):
    from ember_numba import rewrites
    from ember_numba.fused import pooling

    pool = dict(POOL, kernel_size=(k, k), stride=(k, k))
    rng = np.random.RandomState(3)
    y = rng.randint(-2, 3, size=(2, 3, *hw)).astype(np.float32)  # ties and zeros
    r = np.where(y > 0, y, 0).astype(np.float32)
    best = pooling.max_pool2d(r, **pool)
    g = rng.standard_normal(best.shape).astype(np.float32)
    g[0, 0, 0, :2] = -0.0  # the pool's backward here adds into zeros: +0.0, as the kernel gives
    want = np.where(y > 0, pooling.max_pool2d_backward(g, r, **pool), 0)
    got = rewrites.relu_max_pool2d_backward(g, r, best if given else None, **pool)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("chunk_bytes", [1, 700, 1 << 22], ids=["one-sample", "few-samples", "whole-batch"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_bias_relu_is_the_three_nodes_on_every_chunking(chunk_bytes, dtype, monkeypatch):
    from ember_numba import conv, rewrites

    monkeypatch.setattr(conv, "MIN_SIZE", 0)  # the chunked kernels, however small
    monkeypatch.setattr(conv, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(conv, "MIN_COLUMNS", 1)
    rng = np.random.RandomState(4)
    x, w = rng.standard_normal((5, 3, 9, 8)).astype(dtype), rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    bias = rng.standard_normal(4).astype(dtype)
    bias[1] = np.nan  # a NaN sum fails gt: zero, as the reference's where gives
    geo = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    p = conv._conv2d(x, w, **geo) + bias.reshape(1, -1, 1, 1)
    want = np.where(p > 0, p, 0)
    got = rewrites.conv2d_bias_relu(x, w, bias, **geo)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_conv_bias_relu_on_the_references_output():
    from ember_numba import rewrites

    rng = np.random.RandomState(5)  # too small for the kernels: the reference's convolution
    x, w = rng.standard_normal((1, 1, 4, 4)).astype(np.float32), rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    p = ember.get_backend("numpy").impls["conv2d"](x, w, (1, 1), (0, 0), (1, 1), 1) + bias.reshape(1, -1, 1, 1)
    got = rewrites.conv2d_bias_relu(x, w, bias, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
    np.testing.assert_array_equal(_bits(got), _bits(np.where(p > 0, p, 0)))


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_bias_is_the_two_nodes(batch, dtype, monkeypatch):
    from ember_numba import conv, rewrites

    monkeypatch.setattr(conv, "MIN_SIZE", 0)
    rng = np.random.RandomState(6)
    x, w = rng.standard_normal((batch, 3, 9, 8)).astype(dtype), rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    bias = rng.standard_normal(4).astype(dtype)
    geo = dict(stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1)
    want = conv._conv2d(x, w, **geo) + bias.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(_bits(rewrites.conv2d_bias(x, w, bias, **geo)), _bits(want))


class _Always:
    """A ThreadChoice that always takes one thread, or always all."""

    def __init__(self, one):
        self.one = one

    def choose(self, key, watch=False):
        return self.one, False, None

    def record(self, *args):
        pass


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("batch,one", [(1, True), (1, False), (2, False)], ids=["1-one-thread", "1-blocks", "2"])
def test_pointwise_bias_relu_is_the_nodes(batch, one, relu, residual, monkeypatch):
    """A 1x1 convolution lowered as a product (ember.onnx): the product as BLAS blocks (or one
    call) with the sums and ReLU on each block gives the nodes' bits on this backend."""
    from ember_numba import launch, rewrites

    monkeypatch.setattr(rewrites, "POINTWISE_THREADS", _Always(one))
    monkeypatch.setattr(launch, "threads", lambda: 2)
    impls = ember.get_backend("numba").impls
    rng = np.random.RandomState(8)
    o, c, h, w_ = 256, 64, 56, 56  # a product past blas.MIN_FLOPS: blocks at batch 1
    w, x = rng.standard_normal((o, c)).astype(np.float32), rng.standard_normal((batch, c, h * w_)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    r = rng.standard_normal((batch, o, h, w_)).astype(np.float32) if residual else None
    v = impls["add"](impls["reshape"](impls["matmul"](w, x), (batch, o, h, w_)), bias.reshape(1, -1, 1, 1))
    if residual:
        v = impls["add"](v, r)
    want = np.where(v > 0, v, 0) if relu else v
    shape = (batch, o, h, w_)
    if relu:
        got = rewrites.pointwise_bias_relu(w, x, bias, r, shape=shape)
    elif residual:
        got = rewrites.pointwise_bias_relu(w, x, bias, r, shape=shape, relu=False)
    else:
        got = rewrites.pointwise_bias(w, x, bias, shape=shape)
    if _blas_bits_follow_blocking():
        # The premise fails on this machine: the matmul node itself gets other bits from BLAS
        # on one thread or two (blas.matmul chooses by measurement), so the rewrite is held to
        # the product's float32 rounding (64 terms) instead of to its bits.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
        return
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _signed_zeros_and_nan(a):
    flat = a.reshape(-1)
    flat[::7] = 0.0
    flat[1::11] = -0.0
    flat[2::13] = np.nan
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "reference"])
def test_batch_norm_relu_is_batch_norm_then_the_sum_and_where(dtype, residual, kernel, monkeypatch):
    """The kernel's output is batch norm's, then ``+ residual`` and ``where(gt(y, 0), y, 0)``
    as NumPy computes them, bit for bit; its statistics are batch norm's. Before batch norm's
    kernel is hot (the reference's first calls) the same holds with the reference's output."""
    from ember_numba import launch, rewrites
    from ember_numba.fused import channels

    monkeypatch.setattr(launch, "HOT", 1 if kernel else 10**9)
    rng = np.random.RandomState(5)
    x = _signed_zeros_and_nan(rng.standard_normal((3, 6, 5, 7)).astype(dtype))
    x[:, 5] = 1.5  # a constant channel: batch norm gives exact zeros there
    w, b = rng.standard_normal(6).astype(dtype), rng.standard_normal(6).astype(dtype)
    r = _signed_zeros_and_nan(rng.standard_normal(x.shape).astype(dtype)) if residual else None
    y, mean, var = channels.batch_norm(x, w, b, eps=1e-5)
    if residual:
        y = np.add(y, r)
    want = np.where(y > 0, y, 0).astype(dtype)
    got, got_mean, got_var = rewrites.batch_norm_relu(x, w, b, r, eps=1e-5)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(_bits(got_mean), _bits(mean))
    np.testing.assert_array_equal(_bits(got_var), _bits(var))
    assert not np.signbit(got[got == 0]).any()  # where's zeros are +0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [(4, 8, 16, 16), (3, 5)], ids=["kernel", "small: NumPy's"])
def test_relu_backward_is_the_gradient_where(dtype, size, monkeypatch):
    """``where(r > 0, g, 0)`` for ReLU's output ``r``, g's bits kept (-0.0, NaN), +0.0 elsewhere,
    into the runner's buffer when it gives one; a strided gradient read where it lies; with
    a second gradient ``h``, ``where(r > 0, g + h, 0)`` with the sum rounded as NumPy's."""
    from ember_numba import rewrites

    rng = np.random.RandomState(6)
    x = _signed_zeros_and_nan(rng.standard_normal(size).astype(dtype))
    r = np.where(x > 0, x, 0).astype(dtype)
    g = _signed_zeros_and_nan(rng.standard_normal(size).astype(dtype))
    want = np.where(x > 0, g, 0).astype(dtype)
    np.testing.assert_array_equal(_bits(rewrites.relu_backward(g, r)), _bits(want))
    out = np.empty_like(g)
    assert rewrites.relu_backward(g, r, out=out) is out
    np.testing.assert_array_equal(_bits(out), _bits(want))
    wide = np.empty((*size[:-1], 2 * size[-1]), dtype)
    wide[..., ::2] = g
    np.testing.assert_array_equal(_bits(rewrites.relu_backward(wide[..., ::2], r)), _bits(want))
    h = _signed_zeros_and_nan(rng.standard_normal(size).astype(dtype))  # a residual block's other gradient
    with np.errstate(invalid="ignore"):
        want = np.where(x > 0, g + h, 0).astype(dtype)
    np.testing.assert_array_equal(_bits(rewrites.relu_backward(g, r, h)), _bits(want))


@pytest.mark.parametrize("layout", ["broadcast", "channels first", "reversed", "2-d transposed"])
def test_relu_backward_reads_a_gradient_of_any_layout(layout, monkeypatch):
    """ResNet's gradients come to ReLU's backward as the pooling-by-mean gradient broadcast over
    the map, or a convolution's gradient channels first: the same bits as NumPy's kernel, with
    and without the residual's gradient, into a C-contiguous result; negative strides (a
    reversed view) go to NumPy's kernel."""
    from ember.backends.numpy import rewrites as numpy_rewrites
    from ember_numba import rewrites

    rng = np.random.RandomState(7)
    n, c, hw = 16, 40, 4  # past kernels.MIN_SIZE (the file's fixture: all threads from any size)
    shape = (n, c, hw, hw) if layout != "2-d transposed" else (n * 4, c * 4)

    def values(*dims):
        return _signed_zeros_and_nan(rng.standard_normal(dims).astype(np.float32))

    g = {
        "broadcast": lambda: np.broadcast_to(values(c, n).T[:, :, None, None], shape),
        "channels first": lambda: values(c, n, hw, hw).transpose(1, 0, 2, 3),
        "reversed": lambda: values(*shape)[::-1],
        "2-d transposed": lambda: values(*shape[::-1]).T,
    }[layout]()
    assert not g.flags.c_contiguous
    x = rng.standard_normal(shape).astype(np.float32)
    r, h = np.where(x > 0, x, 0).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    reference, fallbacks = numpy_rewrites.relu_backward, []
    monkeypatch.setattr(numpy_rewrites, "relu_backward", lambda *a: fallbacks.append(1) or reference(*a))
    for other in (None, h):
        for _ in range(4):  # past the first calls: the compiled kernel, on one thread and on all
            got = rewrites.relu_backward(g, r, other)
        with np.errstate(invalid="ignore"):
            want = reference(np.ascontiguousarray(g), r, other)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(_bits(got), _bits(want))
    assert len(fallbacks) == (8 if layout == "reversed" else 0)


@pytest.mark.parametrize("chunk_bytes", [1, 3000, 1 << 22], ids=["one-sample", "few-samples", "whole-batch"])
@pytest.mark.parametrize(
    "x_shape,w_shape,padding",
    [
        ((5, 1, 14, 15), (4, 1, 3, 3), (0, 0)),  # a row and a column no window reads
        ((20, 1, 26, 26), (4, 1, 3, 3), (0, 0)),  # chunks of several samples, a product a sample
        ((12, 3, 10, 11), (6, 3, 3, 3), (1, 1)),  # chunks of several samples, one product
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_pooled_conv_grads_are_the_nodes_gradients(chunk_bytes, x_shape, w_shape, padding, bias, monkeypatch):
    """A first layer's weight and bias gradients a chunk at a time from the pooled gradient:
    the nodes' values, to the bit on small integers (every sum exact; ties in the windows), to
    float32 rounding on random values."""
    from ember_numba import conv, rewrites
    from ember_numba.fused import pooling

    monkeypatch.setattr(conv, "MIN_SIZE", 0)
    monkeypatch.setattr(conv, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(conv, "MIN_COLUMNS", 1)
    geo = {"stride": (1, 1), "padding": padding, "dilation": (1, 1), "groups": 1}
    for ints in (True, False):
        rng = np.random.RandomState(7)
        draw = (lambda shape: rng.randint(-2, 3, size=shape)) if ints else rng.standard_normal
        x, w, b = (draw(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
        r = rewrites.conv2d_bias_relu(x, w, b, **geo)
        best = pooling.max_pool2d(r, **POOL)
        g = draw(best.shape).astype(np.float32)
        dr = rewrites.relu_max_pool2d_backward(g, r, best, **POOL)
        want = [conv._conv2d_grad_weight(x, dr, w_shape, *list(geo.values())[:3]), dr.sum((0, 2, 3), keepdims=True)]
        got = rewrites.relu_max_pool2d_conv_grads(
            x, g, r, best, pool=POOL, conv_params={"weight_shape": w_shape, **geo}, bias=bias
        )
        assert len(got) == 1 + bias
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == e.dtype
            if ints:
                np.testing.assert_array_equal(a, e)
            else:
                np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6 * np.abs(e).max())


def test_pooled_conv_grads_of_other_pools_take_the_nodes_kernels(monkeypatch):
    """A 3x3 pool is not the vector kernel's: the nodes' kernels, one after another, their bits."""
    from ember_numba import conv, rewrites
    from ember_numba.fused import pooling

    monkeypatch.setattr(conv, "MIN_SIZE", 0)
    pool = dict(POOL, kernel_size=(3, 3), stride=(3, 3))
    geo = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    rng = np.random.RandomState(8)
    x, w, b = rng.standard_normal((3, 1, 11, 11)), rng.standard_normal((2, 1, 3, 3)), rng.standard_normal(2)
    x, w, b = (a.astype(np.float32) for a in (x, w, b))
    r = rewrites.conv2d_bias_relu(x, w, b, **geo)
    g = rng.standard_normal(pooling.max_pool2d(r, **pool).shape).astype(np.float32)
    dr = rewrites.relu_max_pool2d_backward(g, r, None, **pool)
    got = rewrites.relu_max_pool2d_conv_grads(
        x, g, r, pool=pool, conv_params={"weight_shape": w.shape, **geo}, bias=True
    )
    np.testing.assert_array_equal(
        _bits(got[0]), _bits(conv._conv2d_grad_weight(x, dr, w.shape, (1, 1), (0, 0), (1, 1)))
    )
    np.testing.assert_array_equal(_bits(got[1]), _bits(dr.sum((0, 2, 3), keepdims=True)))


@pytest.mark.parametrize("hw", [(8, 8), (11, 13), (4, 40)])  # covered / a row and column over / two blocks a row
def test_pool_positions_and_their_backward_are_the_pool_and_its_relu_backward(hw):
    """The 2x2 pool with each window's first maximum's position, and the full-size gradient made
    from those positions and the pooled output alone: the pool's and the ReLU + pool backward's
    bits (ties, zeros, a -0.0 gradient)."""
    from ember_numba import rewrites
    from ember_numba.fused import pooling

    rng = np.random.RandomState(9)
    y = rng.randint(-2, 3, size=(3, 2, *hw)).astype(np.float32)
    r = np.where(y > 0, y, 0).astype(np.float32)
    want = pooling.max_pool2d(r, **POOL)
    out, pos = np.empty(want.shape, np.float32), np.empty(want.shape, np.int8)
    pooling.pool_2x2_positions(r.reshape(-1), 6, *hw, *want.shape[2:], out.reshape(-1), pos.reshape(-1))
    np.testing.assert_array_equal(_bits(out), _bits(want))
    rows, cols = np.divmod(pos.astype(int), 2)  # each window's first maximum
    n, c, i, j = np.indices(want.shape)
    at = r[n, c, 2 * i + rows, 2 * j + cols]
    np.testing.assert_array_equal(at, want)
    earlier = [r[n, c, 2 * i + k // 2, 2 * j + k % 2] for k in range(4)]
    assert all(((pos <= k) | (e < want)).all() for k, e in enumerate(earlier))  # none before it ties
    g = rng.standard_normal(want.shape).astype(np.float32)
    g[0, 0, 0, :2] = -0.0
    dx = np.empty(r.shape, np.float32)
    pooling.unpool_2x2(g.reshape(-1), out.reshape(-1), pos.reshape(-1), 6, *hw, *want.shape[2:], dx.reshape(-1))
    np.testing.assert_array_equal(_bits(dx), _bits(rewrites.relu_max_pool2d_backward(g, r, want, **POOL)))


@pytest.mark.parametrize("cold", [False, True], ids=["chunks", "whole"])
def test_conv_pool_positions_and_their_gradients_are_the_nodes(cold, monkeypatch):
    """A first layer's pool taken on the convolution's chunks gives the pool of the layer's
    output, bit for bit, and its gradients from the positions are those from the output; cold
    shapes (the reference's convolution) take the whole output."""
    from ember_numba import conv, rewrites
    from ember_numba.fused import pooling

    monkeypatch.setattr(conv, "MIN_SIZE", 1 << 40 if cold else 0)
    monkeypatch.setattr(conv, "MIN_COLUMNS", 1)
    geo = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    rng = np.random.RandomState(10)
    x, w, b = (rng.randint(-2, 3, size=s).astype(np.float32) for s in ((12, 1, 15, 14), (4, 1, 3, 3), (4,)))
    r = rewrites.conv2d_bias_relu(x, w, b, **geo)
    best = pooling.max_pool2d(r, **POOL)
    pooled, pos = rewrites.conv2d_bias_relu_max_pool2d(x, w, b, pool=POOL, **geo)
    np.testing.assert_array_equal(_bits(pooled), _bits(best))
    g = rng.randint(-3, 4, size=best.shape).astype(np.float32)
    params = {"pool": POOL, "conv_params": {"weight_shape": w.shape, **geo}, "bias": True}
    want = rewrites.relu_max_pool2d_conv_grads(x, g, r, best, **params)
    got = rewrites.pooled_conv_grads(x, g, pos, pooled, **params)
    for a, e in zip(got, want):
        np.testing.assert_array_equal(a, e)  # integers: every sum exact
