"""The NumPy backend's channels-last convolutions (backends/numpy/conv.py) and fused max-pool
kernels (backends/numpy/fused.py) against direct definitions and the reference decompositions,
on the geometries the conformance suite's random cases rarely reach."""

import numpy as np
import pytest

import ember
import ember.nn.functional  # registers max_pool2d
from ember.backends.numpy import conv, fused as numpy_fused
from ember.conformance import fused_ops


def _direct_conv(x, w, stride, padding, dilation, groups):
    """The definition, one output pixel at a time (float64)."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * sh : i * sh + dh * (kh - 1) + 1 : dh,
                    j * sw : j * sw + dw * (kw - 1) + 1 : dw,
                ]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out


GEOMETRIES = [  # x shape, w shape, stride, padding, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 9, 8), (6, 2, 3, 2), (2, 3), (1, 0), (1, 2), 2),
    ((1, 4, 5, 5), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4),  # depthwise
    ((3, 5, 6, 6), (2, 5, 1, 1), (2, 2), (0, 0), (1, 1), 1),  # 1x1, stride 2
    ((2, 3, 7, 9), (4, 3, 3, 2), (1, 1), (2, 0), (1, 2), 1),  # stride 1, dilated, uneven padding
    ((2, 1, 8, 7), (3, 1, 3, 3), (2, 1), (1, 0), (1, 1), 1),  # one channel: columns by kernel position
]


@pytest.mark.parametrize("blocks", ["whole batch", "one image at a time", "stride-1 paths", "weights first"])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", GEOMETRIES)
def test_conv_and_its_gradients_match_the_definition(xs, ws, stride, padding, dilation, groups, blocks, monkeypatch):
    if blocks == "weights first":  # every one-group forward as (O, C*KH*KW) @ columns
        monkeypatch.setattr(conv, "WEIGHTS_FIRST", 0)
    elif blocks == "one image at a time":
        monkeypatch.setattr(conv, "BLOCK_BYTES", 1)
        monkeypatch.setattr(conv, "MIN_ROWS", 1)
        assert len(conv._blocks(xs[0], 4, 4)) == xs[0]
    elif blocks == "stride-1 paths":  # the input gradient as a convolution, where it applies
        monkeypatch.setattr(conv, "AS_CONV_PIXELS", 0)
    rng = np.random.RandomState(0)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    y = conv.conv2d(x, w, **kw)
    np.testing.assert_allclose(y, _direct_conv(x, w, stride, padding, dilation, groups), rtol=1e-10, atol=1e-10)
    # the gradients are the adjoints of the forward map: <g, conv(x, w)> = <grad_x, x> = <grad_w, w>
    g = rng.standard_normal(y.shape)
    gx = conv.conv2d_grad_input(g, w, xs, **kw)
    gw = conv.conv2d_grad_weight(x, g, ws, **kw)
    assert gx.shape == xs and gw.shape == ws and gw.flags.c_contiguous
    np.testing.assert_allclose((g * y).sum(), (gx * x).sum(), rtol=1e-10)
    np.testing.assert_allclose((g * y).sum(), (gw * w).sum(), rtol=1e-10)


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", GEOMETRIES)
def test_input_gradient_per_kernel_position_gives_one_gemms_bits(
    xs, ws, stride, padding, dilation, groups, monkeypatch
):
    rng = np.random.RandomState(2)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    g = rng.standard_normal(conv.conv2d(x, w, **kw).shape).astype(np.float32)
    by_tap = conv.conv2d_grad_input(g, w, xs, **kw)
    monkeypatch.setattr(conv, "TAPS_MAX_CHANNELS", 0)
    np.testing.assert_array_equal(by_tap.view(np.uint32), conv.conv2d_grad_input(g, w, xs, **kw).view(np.uint32))


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", GEOMETRIES)
def test_one_channel_columns_give_the_copied_columns_bits(xs, ws, stride, padding, dilation, groups):
    rng = np.random.RandomState(3)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    xh = conv._channels_last(x, padding)[..., :1]
    out_hw = conv._geometry(xs[2:], ws[2:], stride, padding, dilation)
    cols = conv._columns(xh, ws[2:], stride, dilation, out_hw)
    copied = np.array(cols, order="C")
    np.testing.assert_array_equal(cols, copied)
    wm = w[:, :1].reshape(ws[0], -1)
    np.testing.assert_array_equal((cols @ wm.T).view(np.uint32), (copied @ wm.T).view(np.uint32))
    g = rng.standard_normal((len(cols), ws[0])).astype(np.float32)
    np.testing.assert_array_equal((g.T @ cols).view(np.uint32), (g.T @ copied).view(np.uint32))


def test_a_sample_through_a_deep_layer_takes_the_weights_as_they_lie(monkeypatch):
    """One sample, more output channels than output pixels: the weights-first product (the
    weights read in place, not copied channels last), equal to the definition, its output
    NCHW; the bias-and-ReLU epilogue on its rows gives the separate ops' bits."""
    from ember.backends.numpy import rewrites

    taken = []
    real = conv._weights_first
    monkeypatch.setattr(conv, "_weights_first", lambda *a: taken.append(a[1].shape) or real(*a))
    rng = np.random.RandomState(4)
    x, w = rng.standard_normal((1, 16, 4, 4)).astype(np.float32), rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    y = conv.conv2d(x, w, padding=(1, 1))
    assert taken == [w.shape] and y.flags.c_contiguous
    np.testing.assert_allclose(y, _direct_conv(x, w, (1, 1), (1, 1), (1, 1), 1), rtol=1e-4, atol=1e-4)
    fused = rewrites.conv2d_bias_relu(x, w, bias, padding=(1, 1))
    separate = np.maximum(y + bias[:, None, None], 0)
    np.testing.assert_array_equal(fused.view(np.uint32), separate.view(np.uint32))
    conv.conv2d(np.concatenate([x] * 4), w, padding=(1, 1))  # 64 output pixels: channels last
    assert len(taken) == 2


def test_conv_output_is_channels_last_and_a_chain_stays_so():
    x = np.random.RandomState(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
    y = conv.conv2d(x, np.ones((4, 3, 3, 3), np.float32), padding=(1, 1))
    assert y.transpose(0, 2, 3, 1).flags.c_contiguous
    z = np.maximum(y, 0)  # an elementwise op keeps the layout ...
    assert z.transpose(0, 2, 3, 1).flags.c_contiguous
    assert np.shares_memory(conv._channels_last(z, (0, 0)), z)  # ... so the next conv copies nothing


POOLS = [  # x shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((1, 2, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1), True),  # overlapping, padded, ceil
    ((2, 5, 6), (2, 3), (1, 2), (1, 1), (2, 1), False),  # (C, H, W), dilated
    ((2, 3, 7, 8), 3, None, 1, 1, True),  # ints, stride None
]


@pytest.mark.parametrize("xs,k,s,p,d,ceil", POOLS)
@pytest.mark.parametrize("chunks", ["whole", "one image at a time"])
def test_max_pool_kernels_match_the_reference(xs, k, s, p, d, ceil, chunks, monkeypatch):
    if chunks != "whole":
        monkeypatch.setattr(numpy_fused, "POOLED_BYTES", 1)
    rng = np.random.RandomState(2)
    x = rng.standard_normal(xs).astype(np.float32)
    x.reshape(-1)[::7] = x.reshape(-1)[3]  # ties: the first maximum takes the gradient
    x.reshape(-1)[5] = np.nan  # NaN wins
    params = {"kernel_size": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": ceil}
    be = ember.get_backend("numpy")
    ref = fused_ops()
    t = ember.tensor(x)
    with ember.no_grad():
        want = ref["max_pool2d"](t, **params).numpy()
        got = numpy_fused.max_pool2d(x, **params)
        np.testing.assert_array_equal(got, want)
        g = rng.standard_normal(got.shape).astype(np.float32)
        want_dx = ref["max_pool2d_backward"](ember.tensor(g), t, **params).numpy()
    np.testing.assert_allclose(numpy_fused.max_pool2d_backward(g, x, **params), want_dx, rtol=1e-6, atol=1e-6)
    assert {"max_pool2d", "max_pool2d_backward"} <= be.capabilities().fused


def test_integer_pools_take_the_reference():
    x = np.arange(32, dtype=np.int64).reshape(1, 2, 4, 4)
    out = numpy_fused.max_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    assert out.dtype == np.int64 and out[0, 0].tolist() == [[5, 7], [13, 15]]


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(8, 3, 5, 4), (6, 4), (4, 2, 7)])
def test_batch_norm_kernels_match_the_reference(shape, affine):
    rng = np.random.RandomState(3)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    c = shape[1]
    w, b = (rng.standard_normal(c).astype(np.float32) for _ in range(2)) if affine else (None, None)
    ref = fused_ops()
    wrap = [None if a is None else ember.tensor(a) for a in (x, w, b)]
    with ember.no_grad():
        want = [t.numpy() for t in ref["batch_norm"](*wrap, eps=1e-5)]
        got = numpy_fused.batch_norm(x, w, b, eps=1e-5)
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-5)
        g = rng.standard_normal(shape).astype(np.float32)
        want = ref["batch_norm_backward"](ember.tensor(g), *wrap, ember.tensor(got[1]), ember.tensor(got[2]), eps=1e-5)
        got = numpy_fused.batch_norm_backward(g, x, w, b, got[1], got[2], eps=1e-5)
    for g_, w_ in zip(got, want):
        assert (g_ is None) == (w_ is None)
        if g_ is not None:
            np.testing.assert_allclose(g_, w_.numpy(), rtol=1e-4, atol=1e-4)
