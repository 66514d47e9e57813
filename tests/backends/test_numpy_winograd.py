"""Winograd convolutions (backends/numpy/winograd.py) against the direct definition: all three
primitives, F(2x2, 3x3) and F(4x4, 3x3), edge tiles of odd outputs, channel counts that are
multiples of nothing, batch 1, blocks of the batch; float32 error against the conformance
tolerances; non-finite values; and which layers conv.py sends there."""

import os
import subprocess
import sys

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from winograd_cases import GEOMETRIES

from ember.backends.numpy import conv, winograd
from ember.conformance.tolerances import tolerance

TRANSFORMS = {"F(2x2,3x3)": winograd.F23, "F(4x4,3x3)": winograd.F43}


@pytest.fixture(autouse=True)
def enabled(monkeypatch):
    """conv.py's path on, as ``EMBER_NUMPY_WINOGRAD=1`` sets it (off by default: winograd.ENABLED)."""
    monkeypatch.setattr(winograd, "ENABLED", True)


def _direct(x, w, padding):
    """The definition, in float64: every 3x3 window times every kernel."""
    (ph, pw) = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return np.einsum("nchwij,kcij->nkhw", sliding_window_view(xp, (3, 3), axis=(2, 3)), w.astype(np.float64))


def _direct_grads(x, w, g, padding):
    """The two gradients of the definition (float64), by the chain rule on the windows."""
    ph, pw = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    win = sliding_window_view(xp, (3, 3), axis=(2, 3))
    dw = np.einsum("nchwij,nkhw->kcij", win, g)
    dxp = np.zeros_like(xp)
    oh, ow = g.shape[2:]
    for i in range(3):
        for j in range(3):
            dxp[:, :, i : i + oh, j : j + ow] += np.einsum("nkhw,kc->nchw", g, w[:, :, i, j])
    return dxp[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]], dw


@pytest.mark.parametrize("per_block", [None, 1, 2], ids=["whole batch", "one image a block", "two images a block"])
@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("xs,k,padding", GEOMETRIES)
def test_all_three_primitives_match_the_definition(xs, k, padding, name, per_block, monkeypatch):
    t = TRANSFORMS[name]
    if per_block:  # the last block of an odd batch is short
        tiles = -(-(xs[2] + 2 * padding[0] - 2) // t.m) * -(-(xs[3] + 2 * padding[1] - 2) // t.m)
        monkeypatch.setattr(winograd, "BLOCK_BYTES", 1)
        monkeypatch.setattr(winograd, "MIN_TILES", per_block * tiles)
        assert winograd._blocks(xs[0], tiles, 4)[0] == slice(0, min(per_block, xs[0]))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs), rng.standard_normal((k, xs[1], 3, 3))
    y = winograd.conv2d(x, w, padding, t)
    want = _direct(x, w, padding)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape)
    want_dx, want_dw = _direct_grads(x, w, g, padding)
    dx = winograd.conv2d_grad_input(g, w, xs, padding, t)
    dw = winograd.conv2d_grad_weight(x, g, w.shape, padding, t)
    assert dx.shape == xs and dw.shape == w.shape and dw.flags.c_contiguous
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-12, atol=1e-12)


def test_the_output_is_channels_last_like_im2col():
    rng = np.random.default_rng(1)
    y = winograd.conv2d(rng.standard_normal((2, 16, 6, 6)), rng.standard_normal((16, 16, 3, 3)), (1, 1))
    assert y.transpose(0, 2, 3, 1).flags.c_contiguous


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("n,c,hw,k", [(2, 64, 16, 64), (4, 256, 8, 128), (8, 128, 4, 512)])
def test_float32_error_is_within_the_conformance_tolerance(n, c, hw, k, name):
    """The float32 results against the float64 definition, with the allowance the conformance
    suite gives a convolution (tolerances.tolerance: terms added, scale of the largest term).
    Measured (this test's shapes): F(2x2,3x3) within 1% of the allowance, like im2col;
    F(4x4,3x3) 5-16% of it, ten times im2col's error: why F(2x2,3x3) is the default."""
    t = TRANSFORMS[name]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    want = _direct(x, w, (1, 1))
    rtol, atol = tolerance("float32", 9 * c, float(np.abs(x).max() * np.abs(w).max()))
    y = winograd.conv2d(x, w, (1, 1), t)
    assert y.dtype == np.float32
    share = np.max(np.abs(y - want) / (atol + rtol * np.abs(want)))
    assert share < (0.05 if t is winograd.F23 else 0.5), share
    g = rng.standard_normal(want.shape).astype(np.float32)
    want_dx, want_dw = _direct_grads(x, w, g.astype(np.float64), (1, 1))
    rtol, atol = tolerance("float32", n * hw * hw, float(np.abs(x).max() * np.abs(g).max()))
    dw = winograd.conv2d_grad_weight(x, g, w.shape, (1, 1), t)
    assert np.max(np.abs(dw - want_dw) / (atol + rtol * np.abs(want_dw))) < (0.05 if t is winograd.F23 else 0.5)
    rtol, atol = tolerance("float32", 9 * k, float(np.abs(g).max() * np.abs(w).max()))
    dx = winograd.conv2d_grad_input(g, w, x.shape, (1, 1), t)
    assert np.max(np.abs(dx - want_dx) / (atol + rtol * np.abs(want_dx))) < (0.05 if t is winograd.F23 else 0.5)


def test_non_finite_values_come_out_where_the_direct_sum_puts_them():
    """An inf meets itself with both signs in the transforms (inf - inf = NaN): the Winograd
    functions return None, and conv.py's primitives then compute directly."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 64, 6, 6)), rng.standard_normal((64, 64, 3, 3))
    x[0, 3, 2, 2] = np.inf
    x[1, 5, 4, 1] = np.nan
    assert winograd.plan(x.shape, w.shape, (1, 1), (1, 1), (1, 1), 1, x.dtype) is not None
    assert winograd.conv2d(x, w, (1, 1)) is None
    y = conv.conv2d(x, w, padding=(1, 1))
    with np.errstate(invalid="ignore"):
        want = _direct(x, w, (1, 1))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    assert np.isinf(y).any()  # the inf survives as inf, not as Winograd's NaN
    g = np.ones(y.shape)
    assert winograd.conv2d_grad_weight(x, g, w.shape, (1, 1)) is None
    assert np.isnan(conv.conv2d_grad_weight(x, g, w.shape, padding=(1, 1))).any()


@pytest.mark.parametrize(
    "xs,ws,stride,padding,dilation,groups,dtype,taken",
    [
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32, True),  # ResNet's stages
        ((8, 32, 13, 13), (64, 32, 3, 3), (1, 1), (0, 0), (1, 1), 1, np.float32, False),  # LeNet's: 32 channels
        ((8, 3, 32, 32), (64, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32, False),  # the stem: 3 channels
        ((8, 64, 32, 32), (128, 64, 3, 3), (2, 2), (1, 1), (1, 1), 1, np.float32, False),  # stride 2
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (2, 2), (2, 2), 1, np.float32, False),  # dilated
        ((8, 64, 32, 32), (64, 32, 3, 3), (1, 1), (1, 1), (1, 1), 2, np.float32, False),  # grouped
        ((8, 64, 32, 32), (64, 64, 1, 1), (1, 1), (0, 0), (1, 1), 1, np.float32, False),  # 1x1
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (3, 3), (1, 1), 1, np.float32, False),  # padding 3
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float16, False),
        ((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.int64, False),
    ],
)
def test_the_rule_for_which_layers_take_winograd(xs, ws, stride, padding, dilation, groups, dtype, taken):
    assert (winograd.plan(xs, ws, stride, padding, dilation, groups, dtype) is not None) is taken


def test_conv_py_takes_winograd_for_eligible_layers():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 64, 7, 5)).astype(np.float32)
    w = rng.standard_normal((70, 64, 3, 3)).astype(np.float32)
    y = conv.conv2d(x, w, padding=(1, 1))
    np.testing.assert_array_equal(y, winograd.conv2d(x, w, (1, 1)))
    g = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_array_equal(
        conv.conv2d_grad_input(g, w, x.shape, padding=(1, 1)), winograd.conv2d_grad_input(g, w, x.shape, (1, 1))
    )
    np.testing.assert_array_equal(
        conv.conv2d_grad_weight(x, g, w.shape, padding=(1, 1)), winograd.conv2d_grad_weight(x, g, w.shape, (1, 1))
    )


def test_off_by_default_and_switched_on_by_the_environment():
    code = "from ember.backends.numpy import winograd; print(winograd.ENABLED)"
    for value, want in (("", "False"), ("1", "True")):
        env = {k: v for k, v in os.environ.items() if k != "EMBER_NUMPY_WINOGRAD"}
        if value:
            env["EMBER_NUMPY_WINOGRAD"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want
