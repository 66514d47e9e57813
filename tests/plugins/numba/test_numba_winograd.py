"""ember-numba's Winograd convolutions (winograd.py, F(2x2, 3x3); winograd43.py, F(4x4, 3x3)
for the forward and input gradient) against the NumPy backend's direct (im2col) convolutions:
all three primitives, odd outputs and their edge tiles, channel counts that are multiples of
nothing, batch 1, every way of cutting the batch into chunks; non-finite values; and conv.py's
choice of the path."""

import doctest

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from winograd_cases import GEOMETRIES  # noqa: E402

from ember.backends.numpy import backend as nb, winograd as numpy_winograd  # noqa: E402
from ember_numba import conv, launch, winograd, winograd43  # noqa: E402


@pytest.fixture
def direct(monkeypatch):
    """The NumPy backend's three convolutions, on its im2col path."""
    monkeypatch.setattr(numpy_winograd, "MIN_CHANNELS", 10**9)
    return nb.IMPLS


@pytest.fixture(params=["F(2x2, 3x3)", "F(4x4, 3x3)"])
def transform(request, monkeypatch):
    """The forward's and input gradient's transforms, whatever winograd.F43_TAKES would pick."""
    monkeypatch.setattr(winograd, "F43_TAKES", ((0, 0, 0),) if request.param == "F(4x4, 3x3)" else ())
    return request.param


@pytest.fixture(params=["whole batch", "one sample a chunk", "two samples a chunk", "by tile position"])
def chunks(request, monkeypatch):
    if request.param == "by tile position":  # F(4x4): whole-batch GEMMs a position (two threads)
        monkeypatch.setattr(winograd, "threads", lambda: 2)
        monkeypatch.setattr(winograd, "F43_MIN_TILES", 1 << 30)
        monkeypatch.setattr(winograd, "F43_WEIGHT_MIN_TILES", 1 << 30)
    elif request.param != "whole batch":
        for bytes_, tiles in (
            ("CHUNK_BYTES", "MIN_TILES"),
            ("F43_CHUNK_BYTES", "F43_MIN_TILES"),
            ("F43_WEIGHT_CHUNK_BYTES", "F43_WEIGHT_MIN_TILES"),
        ):
            monkeypatch.setattr(winograd, bytes_, 1 if request.param == "one sample a chunk" else 1 << 10)
            monkeypatch.setattr(winograd, tiles, 1)
    return request.param


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize("xs,k,padding", GEOMETRIES)
def test_all_three_primitives_match_the_direct_convolution(xs, k, padding, dtype, tol, transform, chunks, direct):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal((k, xs[1], 3, 3)).astype(dtype)
    geo = dict(stride=(1, 1), padding=padding, dilation=(1, 1), groups=1)
    want = direct["conv2d"](x, w, **geo)
    y = winograd.conv2d(x, w, padding)
    assert y.dtype == dtype and y.flags.c_contiguous
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    g = rng.standard_normal(y.shape).astype(dtype)
    np.testing.assert_allclose(
        winograd.conv2d_grad_input(g, w, xs, padding), direct["conv2d_grad_input"](g, w, xs, **geo), rtol=tol, atol=tol
    )
    dw = winograd.conv2d_grad_weight(x, g, w.shape, padding)
    assert dw.dtype == dtype and dw.shape == w.shape and dw.flags.c_contiguous
    np.testing.assert_allclose(dw, direct["conv2d_grad_weight"](x, g, w.shape, **geo), rtol=tol, atol=tol)


@pytest.mark.parametrize("xs,k,padding", [((6, 32, 13, 13), 64, (0, 0)), ((3, 64, 8, 8), 16, (1, 1))])
def test_f43_products_on_the_row_kernel_match_the_direct_convolution(xs, k, padding, monkeypatch, direct):
    """Channel counts in whole vectors: the chunks' forward and input-gradient products go to
    skinny.stacked's row kernel (LeNet's 32 -> 64 layer on its forward's tiles; 64 -> 16)."""
    from ember_numba import skinny

    monkeypatch.setattr(winograd, "F43_TAKES", ((0, 0, 0),))
    monkeypatch.setattr(winograd, "threads", lambda: 1)  # chunks, not a chunk's bands
    monkeypatch.setattr(skinny, "VECTORS", True)
    taken = []
    rows = skinny._stacked_rows
    monkeypatch.setattr(skinny, "_stacked_rows", lambda *a: taken.append(a[4:7]) or rows(*a))
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal((k, xs[1], 3, 3)).astype(np.float32)
    geo = dict(stride=(1, 1), padding=padding, dilation=(1, 1), groups=1)

    def near(got, want):  # F(4x4)'s float32 error, whichever kernel multiplies: 1e-5 of the scale
        assert got.dtype == np.float32 and np.abs(got - want).max() <= 1e-5 * np.abs(want).max()

    y = winograd.conv2d(x, w, padding)
    near(y, direct["conv2d"](x.astype(np.float64), w.astype(np.float64), **geo))
    g = rng.standard_normal(y.shape).astype(np.float32)
    dx = winograd.conv2d_grad_input(g, w, xs, padding)
    near(dx, direct["conv2d_grad_input"](g.astype(np.float64), w.astype(np.float64), xs, **geo))
    shapes = {t[1:] for t in taken}  # (terms, columns) of each stack of products
    assert shapes == {(xs[1], k), (k, xs[1])}  # the forward (T, C) @ (C, K); the input gradient (T, K) @ (K, C)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("xs,k,padding", GEOMETRIES)
def test_tile_row_bands_shared_among_threads_match_the_direct_convolution(
    xs, k, padding, batch, transform, monkeypatch, direct
):
    """Fewer chunks than threads (batch 1): each chunk's tile rows are cut into bands that the
    threads take, here one tile row a band, on three threads."""
    monkeypatch.setattr(winograd, "threads", lambda: 3)
    monkeypatch.setattr(winograd, "BAND_TILES", 1)
    monkeypatch.setattr(winograd.BAND_THREADS, "choose", lambda key, watch=False: (False, False, None))  # all threads
    monkeypatch.setattr(winograd.BAND_THREADS, "record", lambda *args: None)
    bands = []
    real = winograd._bands
    monkeypatch.setattr(winograd, "_bands", lambda *a: bands.append(a[1]) or real(*a))
    rng = np.random.default_rng(5)
    xs = (batch,) + tuple(xs[1:])
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal((k, xs[1], 3, 3)).astype(np.float32)
    want = direct["conv2d"](x, w, (1, 1), padding, (1, 1), 1)
    np.testing.assert_allclose(winograd.conv2d(x, w, padding), want, rtol=1e-4, atol=1e-4)
    assert sum(bands) == batch  # every sample went through the bands


def test_the_kernels_agree_with_the_numpy_winograd(transform):
    """The same algorithm as the NumPy module, so the same numbers up to the GEMMs' order."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 16, 9, 7)), rng.standard_normal((24, 16, 3, 3))
    t = numpy_winograd.F43 if transform == "F(4x4, 3x3)" else numpy_winograd.F23
    np.testing.assert_allclose(
        winograd.conv2d(x, w, (1, 1)), numpy_winograd.conv2d(x, w, (1, 1), t), rtol=1e-12, atol=1e-12
    )


def test_the_input_adjoint_is_the_input_transforms_adjoint():
    """``<input_transform(P), E> == <P, input_adjoint(E)>`` for any P and E (float64): the
    dot-product test of an adjoint, overlapping tiles included (2 samples, 2x3 tiles)."""
    rng = np.random.default_rng(7)
    m, c, nty, tw = 2, 5, 2, 3
    T = m * nty * tw
    P = rng.standard_normal(m * (4 * nty + 2) * (4 * tw + 2) * c)
    E = rng.standard_normal(36 * T * c)
    V, S = np.zeros(36 * T * c), np.zeros(6 * (4 * tw + 2) * c)
    winograd43.input_transform(P, m, c, nty, tw, T, V, S)
    Q = np.zeros_like(P)
    winograd43.input_adjoint(E, m, c, nty, tw, T, Q, S)
    assert np.dot(V, E) == pytest.approx(np.dot(P, Q), rel=1e-12)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize(
    "xs,k,padding",
    [((4, 6, 13, 13), 5, (0, 0)), ((3, 5, 10, 7), 4, (0, 1)), ((2, 3, 9, 9), 2, (0, 0))],  # LeNet-like, odd, 7x7
)
def test_the_input_gradient_on_the_forwards_tiles_matches_the_direct_convolution(
    xs, k, padding, dtype, tol, chunks, direct, monkeypatch
):
    """Padding under 1: the forward's output has fewer 4x4 tiles than the input, and the input
    gradient is the forward's adjoint on them (winograd._grad_input_f43)."""
    monkeypatch.setattr(winograd, "F43_TAKES", ((0, 0, 0),))
    taken = []
    real = winograd._grad_input_f43
    monkeypatch.setattr(winograd, "_grad_input_f43", lambda *a: taken.append(a[2]) or real(*a))
    rng = np.random.default_rng(8)
    w = rng.standard_normal((k, xs[1], 3, 3)).astype(dtype)
    oh, ow = xs[2] + 2 * padding[0] - 2, xs[3] + 2 * padding[1] - 2
    g = rng.standard_normal((xs[0], k, oh, ow)).astype(dtype)
    got = winograd.conv2d_grad_input(g, w, xs, padding)
    assert taken == [xs] and got.dtype == dtype and got.flags.c_contiguous
    want = direct["conv2d_grad_input"](g, w, xs, (1, 1), padding, (1, 1), 1)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 1e-6)])
def test_the_f43_kernel_transform_is_the_numpy_modules_in_gemm_order(dtype, tol):
    w = np.random.default_rng(2).standard_normal((24, 13, 3, 3)).astype(dtype)
    want = numpy_winograd.kernel_transform(numpy_winograd.F43, w)  # (36, C, K)
    got = winograd43.kernel_transform(w)
    assert got.dtype == dtype and got.shape == (36, 13, 24)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "n,c,hw,taken",
    [
        (128, 64, 32, True),  # ResNet-18's stages at batch 128 ...
        (128, 128, 16, True),
        (128, 256, 8, True),
        (128, 512, 4, True),
        (32, 256, 8, True),  # ... and at batch 32, but for 4x4 maps
        (32, 512, 4, True),  # 32 tiles: GEMMs by tile position (0.69-0.95x F(2x2))
        (4, 512, 4, False),  # 4 tiles: not measured
        (1, 64, 32, False),  # one sample: 64 tiles (1.23x)
        (128, 16, 32, False),  # 16 channels: not measured
        (128, 32, 32, True),  # 32 channels: from 512 tiles (measured on AVX2, against F(2x2) and im2col)
        (4, 32, 32, False),  # ... 256 tiles
    ],
)
def test_the_rule_for_which_layers_take_f43(n, c, hw, taken):
    assert winograd.takes_f43(n, c, c, hw, hw) is taken


@pytest.mark.parametrize(
    "n,c,hw", [(8, 64, 32), (32, 128, 16), (32, 256, 8), (32, 512, 4), (128, 512, 4), (128, 32, 11)]
)
def test_float32_f43_is_within_the_conformance_tolerance(n, c, hw):
    """The float32 forward by F(4x4, 3x3) against the float64 definition, as a share of the
    allowance the conformance suite gives a convolution (tolerances.tolerance): its transforms
    scale values by up to 25 and 8: measured 5-13% of the allowance at these shapes (7e-6 to
    1.3e-5 of max |y|), F(2x2)'s about 1%."""
    from ember.conformance.tolerances import tolerance

    assert winograd.takes_f43(n, c, c, hw, hw)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
    want = nb.IMPLS["conv2d"](x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), (1, 1), 1)
    rtol, atol = tolerance("float32", 9 * c, float(np.abs(x).max() * np.abs(w).max()))
    y = winograd.conv2d(x, w, (1, 1))
    share = np.max(np.abs(y - want) / (atol + rtol * np.abs(want)))
    assert share < 0.25, share


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 1e-6)])
def test_the_kernel_transform_is_the_numpy_modules_in_gemm_order(dtype, tol):
    w = np.random.default_rng(2).standard_normal((24, 13, 3, 3)).astype(dtype)
    want = numpy_winograd.kernel_transform(winograd.F23, w).transpose(0, 2, 1)  # (16, K, C)
    got = winograd.kernel_transform(w)
    assert got.dtype == dtype and got.shape == (16, 24, 13) and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    strided = np.asfortranarray(w)  # any layout of the weights
    np.testing.assert_array_equal(winograd.kernel_transform(strided), got)


def test_non_finite_results_are_computed_directly(transform, monkeypatch, direct):
    monkeypatch.setattr(launch, "HOT", 1)
    rng = np.random.default_rng(2)
    x, w = (
        rng.standard_normal((2, 16, 16, 16)).astype(np.float32),
        rng.standard_normal((16, 16, 3, 3)).astype(np.float32),
    )
    x[1, 2, 3, 3] = np.inf
    assert winograd.plan(x.shape, w.shape, (1, 1), (1, 1), (1, 1), 1, x.dtype)
    assert winograd.conv2d(x, w, (1, 1)) is None
    y = conv.IMPLS["conv2d"](x, w, (1, 1), (1, 1), (1, 1), 1)
    want = direct["conv2d"](x, w, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    assert np.isinf(y).any()


def test_conv_py_takes_winograd_for_eligible_layers(monkeypatch):
    monkeypatch.setattr(launch, "HOT", 1)
    rng = np.random.default_rng(3)
    x, w = (
        rng.standard_normal((2, 16, 16, 16)).astype(np.float32),
        rng.standard_normal((16, 16, 3, 3)).astype(np.float32),
    )
    y = conv.IMPLS["conv2d"](x, w, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(y, winograd.conv2d(x, w, (1, 1)))
    g = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_array_equal(
        conv.IMPLS["conv2d_grad_input"](g, w, x.shape, (1, 1), (1, 1), (1, 1), 1),
        winograd.conv2d_grad_input(g, w, x.shape, (1, 1)),
    )
    # the weight gradient from 64 channels (winograd.WEIGHT_MIN_CHANNELS): im2col here
    np.testing.assert_array_equal(
        conv.IMPLS["conv2d_grad_weight"](x, g, w.shape, (1, 1), (1, 1), (1, 1), 1),
        conv.conv2d_grad_weight_cols(x, g, w.shape, (1, 1), (1, 1), (1, 1)),
    )
    monkeypatch.setattr(winograd, "WEIGHT_MIN_CHANNELS", 16)
    np.testing.assert_array_equal(
        conv.IMPLS["conv2d_grad_weight"](x, g, w.shape, (1, 1), (1, 1), (1, 1), 1),
        winograd.conv2d_grad_weight(x, g, w.shape, (1, 1)),
    )


@pytest.mark.parametrize(
    "xs,ws,stride,padding,taken",
    [
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), True),  # ResNet's first stage
        ((8, 128, 16, 16), (128, 128, 3, 3), (1, 1), (1, 1), True),  # ... its second
        ((1, 128, 16, 16), (128, 128, 3, 3), (1, 1), (1, 1), False),  # ... one sample: im2col (SAMPLE_MIN_PIXELS)
        ((1, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), True),  # ... one sample of the first stage
        ((1, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1), True),  # ResNet-50's second stage, one sample
        ((8, 256, 8, 8), (256, 256, 3, 3), (1, 1), (1, 1), True),  # 64 pixels a sample, 256 channels, a batch
        ((1, 256, 8, 8), (256, 256, 3, 3), (1, 1), (1, 1), False),  # ... one sample: not measured, im2col
        ((8, 64, 8, 8), (64, 64, 3, 3), (1, 1), (1, 1), False),  # 64 pixels, 64 channels: transforms cost more
        ((8, 512, 4, 4), (512, 512, 3, 3), (1, 1), (1, 1), True),  # 16 pixels a sample, 512 channels, a batch
        ((8, 128, 4, 4), (128, 128, 3, 3), (1, 1), (1, 1), False),  # 16 pixels, 128 channels: not measured
        ((1, 512, 4, 4), (512, 512, 3, 3), (1, 1), (1, 1), False),  # ... one sample: im2col
        ((8, 32, 13, 13), (64, 32, 3, 3), (1, 1), (0, 0), False),  # LeNet's second layer: 121 pixels
        ((128, 32, 13, 13), (64, 32, 3, 3), (1, 1), (0, 0), True),  # ... at batch 128: F(4x4), 11x11 fills 3x3 tiles
        ((128, 64, 9, 9), (64, 64, 3, 3), (1, 1), (0, 0), False),  # 7x7 fills 2x2 4x4 tiles to 0.77 only
        ((128, 16, 13, 13), (16, 16, 3, 3), (1, 1), (0, 0), False),  # 16 channels: no F(4x4)
        ((8, 3, 32, 32), (16, 3, 3, 3), (1, 1), (1, 1), False),  # 3 channels
        ((8, 64, 32, 32), (64, 64, 3, 3), (2, 2), (1, 1), False),  # stride 2
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (3, 3), False),  # padding 3
    ],
)
def test_the_rule_for_which_layers_take_winograd(xs, ws, stride, padding, taken):
    assert winograd.plan(xs, ws, stride, padding, (1, 1), 1, np.float32) is taken


@pytest.mark.parametrize(
    "xs,ws,padding,taken",
    [
        ((128, 32, 13, 13), (64, 32, 3, 3), (0, 0), True),  # LeNet's second layer: on the forward's 3x3 tiles
        ((128, 32, 13, 13), (64, 32, 3, 3), (1, 1), False),  # a 13x13 map either way: its 4x4 tiles 0.66 full
        ((128, 32, 12, 12), (64, 32, 3, 3), (0, 0), True),  # 9 tiles either way: the input's 12x12 fills them
        ((8, 64, 32, 32), (64, 64, 3, 3), (0, 0), True),  # MIN_PIXELS, as for the forward
    ],
)
def test_the_input_gradients_rule_looks_at_the_map_it_computes(xs, ws, padding, taken):
    """The input gradient is computed on the forward's tiles where they are fewer than the
    input's (winograd._on_forward_tiles), else as a full convolution on the input-sized map:
    the small-map rule looks at that map's tiles."""
    assert winograd.plan(xs, ws, (1, 1), padding, (1, 1), 1, np.float32, grad_input=True) is taken


@pytest.mark.parametrize(
    "xs,ws,stride,taken",
    [
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), True),  # ResNet-18's stages, every map size
        ((8, 256, 8, 8), (256, 256, 3, 3), (1, 1), True),
        ((8, 512, 4, 4), (512, 512, 3, 3), (1, 1), True),  # unlike the forward: K = tiles, not C
        ((1, 64, 32, 32), (64, 64, 3, 3), (1, 1), False),  # one sample: im2col on all threads
        ((8, 32, 13, 13), (64, 32, 3, 3), (1, 1), False),  # LeNet's second layer (measured slower)
        ((128, 32, 13, 13), (64, 32, 3, 3), (1, 1), True),  # ... at batch 128 by F(4x4) (measured faster)
        ((128, 16, 32, 32), (16, 16, 3, 3), (1, 1), False),  # 16 channels
        ((8, 64, 32, 32), (128, 64, 3, 3), (2, 2), False),  # stride 2
    ],
)
def test_the_rule_for_which_weight_gradients_take_winograd(xs, ws, stride, taken):
    assert winograd.plan_weight(xs, ws, stride, (1, 1), (1, 1), 1, np.float32) is taken


def test_a_non_finite_weight_gradient_is_computed_directly(transform, monkeypatch, direct):
    monkeypatch.setattr(launch, "HOT", 1)
    monkeypatch.setattr(winograd, "WEIGHT_MIN_CHANNELS", 16)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    g = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    x[0, 1, 2, 2] = np.inf
    assert winograd.conv2d_grad_weight(x, g, (16, 16, 3, 3), (1, 1)) is None
    got = conv.IMPLS["conv2d_grad_weight"](x, g, (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1)
    want = direct["conv2d_grad_weight"](x, g, (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isinf(got).any()


def test_a_non_finite_input_gradient_on_the_forwards_tiles_is_computed_directly(monkeypatch, direct):
    monkeypatch.setattr(launch, "HOT", 1)
    monkeypatch.setattr(winograd, "F43_TAKES", ((0, 0, 0),))
    rng = np.random.default_rng(9)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 16, 11, 11)).astype(np.float32)
    g[1, 3, 4, 5] = np.inf
    xs = (2, 16, 13, 13)
    assert winograd.plan(xs, w.shape, (1, 1), (0, 0), (1, 1), 1, np.float32, grad_input=True)
    assert winograd.conv2d_grad_input(g, w, xs, (0, 0)) is None
    got = conv.IMPLS["conv2d_grad_input"](g, w, xs, (1, 1), (0, 0), (1, 1), 1)
    want = direct["conv2d_grad_input"](g, w, xs, (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isinf(got).any()


def test_docstring_examples():
    result = doctest.testmod(winograd, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("batch", [1, 3])
def test_epilogue_on_each_band_is_the_nodes_after_the_convolution(batch, transform, monkeypatch):
    """The bias and ReLU applied to each band of tile rows as it is made give the bits of the
    nodes applied afterwards; an input whose transform is not finite still comes back None."""
    from ember_numba.epilogue import Epilogue

    monkeypatch.setattr(winograd, "BAND_TILES", 1)  # many bands
    # Both calls cut the same bands: a GEMM's bits may depend on its width (OpenBLAS's
    # Haswell kernels), and one thread or all, measured call by call, cuts them differently.
    monkeypatch.setattr(winograd.BAND_THREADS, "choose", lambda key, watch=False: (False, False, None))
    monkeypatch.setattr(winograd.BAND_THREADS, "record", lambda *args: None)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((batch, 16, 20, 19)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    v = winograd.conv2d(x, w, (1, 1)) + bias.reshape(1, -1, 1, 1)
    got = winograd.conv2d(x, w, (1, 1), Epilogue(bias, relu=True))
    np.testing.assert_array_equal(got.view(np.uint32), np.where(v > 0, v, 0).view(np.uint32))
    x[0, 3, 10, 10] = np.inf
    assert winograd.conv2d(x, w, (1, 1), Epilogue(bias, relu=True)) is None


@pytest.mark.parametrize("n,c,hw,k", [(2, 64, 16, 64), (4, 256, 8, 128), (8, 128, 4, 512)])
def test_float32_weight_gradient_is_within_the_conformance_tolerance(n, c, hw, k, transform):
    """The float32 weight gradient against the float64 definition, as a share of the allowance
    the conformance suite gives a convolution (tolerances.tolerance): measured 0.6-1.0% at these
    shapes by F(2x2) (im2col's 0.7-1.0%), 5.8-11.4% by F(4x4) (2.7e-6-3.0e-6 of max |dW|)."""
    from ember.conformance.tolerances import tolerance

    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    g = rng.standard_normal((n, k, hw, hw)).astype(np.float32)
    want = nb.IMPLS["conv2d_grad_weight"](
        x.astype(np.float64), g.astype(np.float64), (k, c, 3, 3), (1, 1), (1, 1), (1, 1), 1
    )
    rtol, atol = tolerance("float32", n * hw * hw, float(np.abs(x).max() * np.abs(g).max()))
    dw = winograd.conv2d_grad_weight(x, g, (k, c, 3, 3), (1, 1))
    assert dw.dtype == np.float32
    share = np.max(np.abs(dw - want) / (atol + rtol * np.abs(want)))
    assert share < (0.05 if transform == "F(2x2, 3x3)" else 0.25), share


def test_f43_by_tile_position_where_chunks_would_be_narrow(monkeypatch, direct):
    """Few tiles a sample (ResNet-18's 512-channel 4x4 layer at batch 128): the forward, input
    gradient and weight gradient take whole-batch GEMMs a tile position, the epilogue on each
    piece of samples, and match the direct convolution; a non-finite input still gives None."""
    from ember.conformance.tolerances import tolerance
    from ember_numba.epilogue import Epilogue

    monkeypatch.setattr(winograd, "F43_TAKES", ((0, 0, 0),))
    monkeypatch.setattr(winograd, "threads", lambda: 2)
    taken = []
    for name in ("_f43_by_position", "_grad_weight_f43_by_position"):
        real = getattr(winograd, name)
        monkeypatch.setattr(winograd, name, lambda *a, real=real, name=name: taken.append(name) or real(*a))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 24, 4, 5)).astype(np.float32)  # 2 tiles a sample: 4 samples a chunk
    w = rng.standard_normal((20, 24, 3, 3)).astype(np.float32)
    geo = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    want = direct["conv2d"](x, w, **geo)
    g = rng.standard_normal(want.shape).astype(np.float32)

    def close(got, want, terms):
        # the conformance allowance (F(4x4)'s transforms scale the rounding; an AVX-512 BLAS
        # rounded one output 1.2e-4 off a fixed 1e-4 at values of 15)
        rtol, atol = tolerance("float32", terms, float(max(np.abs(a).max() for a in (x, w, g)) ** 2))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)

    close(winograd.conv2d(x, w, (1, 1)), want, 9 * 24)
    close(winograd.conv2d_grad_input(g, w, x.shape, (1, 1)), direct["conv2d_grad_input"](g, w, x.shape, **geo), 9 * 20)
    close(
        winograd.conv2d_grad_weight(x, g, w.shape, (1, 1)), direct["conv2d_grad_weight"](x, g, w.shape, **geo), 7 * 20
    )
    bias = rng.standard_normal(20).astype(np.float32)
    v = winograd.conv2d(x, w, (1, 1)) + bias.reshape(1, -1, 1, 1)
    got = winograd.conv2d(x, w, (1, 1), Epilogue(bias, relu=True))
    np.testing.assert_array_equal(got.view(np.uint32), np.where(v > 0, v, 0).view(np.uint32))
    x[5, 3, 2, 2] = np.inf
    assert winograd.conv2d(x, w, (1, 1), Epilogue(bias, relu=True)) is None
    assert taken == ["_f43_by_position"] * 2 + ["_grad_weight_f43_by_position"] + ["_f43_by_position"] * 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("epilogue", ["none", "bias", "bias, residual, relu"])
def test_native_bands_carry_the_python_bands_bits(dtype, epilogue, transform, monkeypatch):
    """A sample's bands run by the helpers' spin (winograd._band as a C function, crew.py's
    kind 3) make the Python bands' bits: the same transforms, the same BLAS calls as np.matmul
    on the same operands, the same epilogue; and an input that is not finite still comes back None."""
    from ember_numba import blas, crew
    from ember_numba.epilogue import Epilogue

    if blas._crew(1).native is None:
        pytest.skip("NumPy's BLAS is not a bundled OpenBLAS with CBLAS entry points")
    monkeypatch.setattr(winograd, "threads", lambda: 2)
    monkeypatch.setattr(winograd, "BAND_TILES", 8)  # several bands
    monkeypatch.setattr(winograd.BAND_THREADS, "choose", lambda key, watch=False: (False, False, None))
    monkeypatch.setattr(winograd.BAND_THREADS, "record", lambda *args: None)
    rows = []
    real = crew.Crew.run_rows
    monkeypatch.setattr(crew.Crew, "run_rows", lambda self, count: rows.append(count) or real(self, count))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 24, 26, 23)).astype(dtype)
    w = rng.standard_normal((20, 24, 3, 3)).astype(dtype)
    residual = rng.standard_normal((1, 20, 26, 23)).astype(dtype) if "residual" in epilogue else None

    def run():
        e = (
            None
            if epilogue == "none"
            else Epilogue(rng.standard_normal(20).astype(dtype), residual, "relu" in epilogue)
        )
        ys = {}
        for native in (False, True):
            monkeypatch.setattr(winograd, "NATIVE_BANDS", native)
            ys[native] = winograd.conv2d(x, w, (1, 1), None if e is None else Epilogue(e.bias, e.residual, e.relu))
        return ys

    ys = run()
    assert rows and all(count > 1 for count in rows), "the bands did not go as native blocks"
    assert ys[True].dtype == dtype
    np.testing.assert_array_equal(ys[True], ys[False])
    x[0, 5, 13, 13] = np.inf
    ys = run()  # with an epilogue, each band is checked before it; without, the whole output after
    assert ys[True] is None and ys[False] is None


@pytest.mark.parametrize("bad", [0, 5])  # the first chunk's sample or a later one
@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_each_chunk_is_found_not_finite_where_it_is_made(transform, chunks, bad, value, monkeypatch):
    """Each chunk's output is checked on the thread that made it: an inf or NaN in any sample
    gives None (the caller computes the layer directly), forward and input gradient alike; a
    finite batch passes."""
    monkeypatch.setattr(launch, "HOT", 1)
    rng = np.random.default_rng(11)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    x = rng.standard_normal((6, 16, 13, 13)).astype(np.float32)
    g = rng.standard_normal((6, 16, 11, 11)).astype(np.float32)
    assert winograd.conv2d(x, w, (0, 0)) is not None
    assert winograd.conv2d_grad_input(g, w, x.shape, (0, 0)) is not None
    x[bad, 3, 4, 5], g[bad, 2, 1, 1] = value, value
    assert winograd.conv2d(x, w, (0, 0)) is None
    assert winograd.conv2d_grad_input(g, w, x.shape, (0, 0)) is None


@pytest.mark.parametrize("threads", [2, 3])
def test_the_kernel_transform_split_among_threads_is_the_whole_product(threads, monkeypatch):
    """Many kernels are shared out among the threads, a block each: the same bits as on one
    thread (1,200 kernels: several of _kernel_rows' blocks, a partial one last)."""
    from ember_numba import winograd43
    from ember_numba.blas import one_thread

    monkeypatch.setattr(winograd43, "SPLIT_KERNELS", 0)
    w = np.random.default_rng(12).standard_normal((40, 30, 3, 3)).astype(np.float32)
    with one_thread():
        whole = winograd43.kernel_transform(w).copy()
        split = winograd43.kernel_transform(w, np.empty(36 * 40 * 30, np.float32), threads)
    np.testing.assert_array_equal(split, whole)
    gg = winograd43.GG[np.float32]  # U[p] (C, K) = the p-th row of G (x) G on each kernel's taps
    np.testing.assert_allclose(whole[5], np.einsum("i,kci->ck", gg[5], w.reshape(40, 30, 9)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_the_kernel_side_of_a_weight_gradient_in_blocks_is_the_whole_product(parts, monkeypatch):
    """``G^T m G`` of the summed partials, in blocks of kernels on the threads: the whole
    product's values, the same bits on 1, 2 or 3 threads (the blocks do not follow the
    threads), None when a block is not finite."""
    from ember_numba import winograd43
    from ember_numba.blas import one_thread

    monkeypatch.setattr(winograd, "SIDE_BLOCK", 64)
    rng = np.random.default_rng(13)
    shape, gg = (24, 19, 3, 3), winograd43.GG[np.float32]
    sums = [rng.standard_normal((36, 24, 19)).astype(np.float32) for _ in range(parts)]
    want = np.matmul(np.sum(sums, axis=0).reshape(36, -1).T, gg).reshape(shape)
    with one_thread():
        got = [winograd.kernel_side(sums, gg, shape, nt) for nt in (1, 2, 3)]
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
        for other in got[1:]:
            np.testing.assert_array_equal(other, got[0])
        sums[0][7, 20, 5] = np.inf
        assert winograd.kernel_side(sums, gg, shape, 2) is None


@pytest.mark.parametrize("threads", [1, 2])
def test_the_flipped_kernel_transform_reads_the_weights_as_they_lie(threads, monkeypatch):
    """An input gradient's kernel (channels swapped, turned half a turn) transformed from the
    weights in place: the bits of the transform of that kernel as a copy (1,200 kernels:
    several blocks, a partial one last)."""
    from ember_numba import winograd43
    from ember_numba.blas import one_thread

    monkeypatch.setattr(winograd43, "SPLIT_KERNELS", 0)
    w = np.random.default_rng(14).standard_normal((40, 30, 3, 3)).astype(np.float32)
    with one_thread():
        want = winograd43.kernel_transform(np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])).copy()
        got = winograd43.kernel_transform(w, np.empty(36 * 40 * 30, np.float32), threads, flipped=True)
    assert got.shape == want.shape == (36, 40, 30)
    np.testing.assert_array_equal(got, want)
