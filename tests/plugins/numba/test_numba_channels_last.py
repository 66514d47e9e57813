"""ember-numba's channels-last convolutions (channels_last.py): narrow maps, long kernel rows.

The rule's thresholds are lowered so that small shapes take the path; each primitive must give
the reference's numbers under every split of the batch, and the columns must be conv.py's,
reordered.
"""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from ember.backends.numpy import backend as nb  # noqa: E402
from ember_numba import channels_last, conv  # noqa: E402

CASES = [  # x shape, w shape, stride, padding
    ((5, 3, 9, 8), (4, 3, 3, 3), 1, 1),
    ((7, 2, 11, 10), (3, 2, 3, 3), 2, 0),
    ((3, 4, 8, 8), (6, 4, 1, 1), 2, 0),
    ((4, 3, 10, 9), (5, 3, 3, 3), 1, 2),  # padding wider than the kernel's reach: whole runs of zeros
    ((6, 5, 7, 7), (4, 5, 2, 3), 3, 1),
    ((9, 8, 4, 4), (16, 8, 3, 3), 1, 1),
]


@pytest.fixture(params=[2, 3, 10**9], ids=["two-sample-chunks", "three-sample-chunks", "a-chunk-per-thread"])
def everywhere(request, monkeypatch):
    """Every convolution with dilation 1 and a kernel larger than 1x1 takes the channels-last
    path, in chunks of (at most) the given number of samples: ``chunk(x shape, w shape, ...)``
    sets the chunk size for a layer and returns its Chunks."""
    monkeypatch.setattr(channels_last, "MAX_OW", 10**9)
    monkeypatch.setattr(channels_last, "MIN_RUN", 1)
    monkeypatch.setattr(conv, "MIN_COLUMNS", 1)
    monkeypatch.setattr(conv, "CHUNKS_PER_THREAD", 1)

    def chunk(xs, ws, stride, padding, dtype):
        ch = conv.Chunks(xs, ws, stride, padding, (1, 1), dtype)
        monkeypatch.setattr(conv, "CHUNK_BYTES", request.param * ch.ckk * ch.p * np.dtype(dtype).itemsize)
        return conv.Chunks(xs, ws, stride, padding, (1, 1), dtype)

    return chunk


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize("xs,ws,s,p", CASES)
def test_every_split_of_the_batch_gives_the_reference(xs, ws, s, p, dtype, tol, everywhere):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    geo = dict(stride=(s, s), padding=(p, p), dilation=(1, 1))
    ch = everywhere(xs, ws, (s, s), (p, p), dtype)
    assert channels_last.takes(ch) == (ch.m > 1 and not ch.wide and ws[2:] != (1, 1))
    y = nb.IMPLS["conv2d"](x, w, groups=1, **geo)
    np.testing.assert_allclose(conv.conv2d_cols(x, w, *geo.values()), y, rtol=tol, atol=tol)
    g = rng.standard_normal(y.shape).astype(dtype)
    dw = conv.conv2d_grad_weight_cols(x, g, ws, *geo.values())
    assert dw.flags.c_contiguous and dw.shape == ws
    np.testing.assert_allclose(dw, nb.IMPLS["conv2d_grad_weight"](x, g, ws, groups=1, **geo), rtol=tol, atol=10 * tol)
    np.testing.assert_allclose(
        conv.conv2d_grad_input_cols(g, w, xs, *geo.values()),
        nb.IMPLS["conv2d_grad_input"](g, w, xs, groups=1, **geo),
        rtol=tol,
        atol=tol,
    )


def test_the_epilogue_runs_on_every_chunk(everywhere):
    from ember_numba.epilogue import Epilogue

    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((7, 4, 9, 9)), rng.standard_normal((5, 4, 3, 3))
    assert channels_last.takes(everywhere(x.shape, w.shape, (1, 1), (1, 1), x.dtype))
    bias = rng.standard_normal(5)
    y = nb.IMPLS["conv2d"](x, w, (1, 1), (1, 1), (1, 1), 1)
    want = np.maximum(y + bias.reshape(1, -1, 1, 1), 0)
    got = conv.conv2d_cols(x, w, (1, 1), (1, 1), (1, 1), Epilogue(bias, relu=True))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xs,ws,s,p", CASES)
def test_the_columns_are_conv_columns_reordered(xs, ws, s, p):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs)
    ch = conv.Chunks(xs, ws, (s, s), (p, p), (1, 1), x.dtype)
    n, c, kh, kw = xs[0], xs[1], ws[2], ws[3]
    ours = channels_last._columns(ch, x, 0, n).copy()  # (n*P, (kh, kw, c))
    cols = np.empty((ch.ckk, n * ch.p))
    ch._fill(x, cols)  # conv.py's: ((c, kh, kw), (n, P))
    reordered = ours.reshape(n, ch.p, kh, kw, c).transpose(4, 2, 3, 0, 1).reshape(ch.ckk, n * ch.p)
    assert np.array_equal(reordered, cols)


@pytest.mark.parametrize("xs,ws,s,p", CASES)
def test_col2im_is_the_adjoint_of_im2col(xs, ws, s, p):
    """<im2col(x), c> == <x, col2im(c)> for every x and c: col2im adds each value back exactly
    where im2col read it from, and nothing where it read padding."""
    rng = np.random.default_rng(4)
    n, c, h, w = xs
    ch = conv.Chunks(xs, ws, (s, s), (p, p), (1, 1), np.float64)
    xh = rng.standard_normal(n * h * w * c)
    cols = np.empty(n * ch.p * ch.ckk)
    channels_last._im2col(xh, n, h, w, c, *ch.geo[4:10], *ch.geo[12:], cols)
    cg = rng.standard_normal(cols.size)
    back = np.empty_like(xh)
    channels_last._col2im(cg, n, h, w, c, *ch.geo[4:10], *ch.geo[12:], back)
    assert np.isclose(cols @ cg, xh @ back, rtol=1e-12)


def test_lenets_second_layer_goes_channels_last():
    """The layer the path was made for (docs/performance.md): 32 -> 64 channels, 13x13 -> 11x11,
    batch 128; its first layer (one channel: runs of 3 values) and a lone sample do not."""
    lenet2 = conv.Chunks((128, 32, 13, 13), (64, 32, 3, 3), (1, 1), (0, 0), (1, 1), np.float32)
    lenet1 = conv.Chunks((128, 1, 28, 28), (32, 1, 3, 3), (1, 1), (0, 0), (1, 1), np.float32)
    sample = conv.Chunks((1, 32, 13, 13), (64, 32, 3, 3), (1, 1), (0, 0), (1, 1), np.float32)
    assert channels_last.takes(lenet2)
    assert not channels_last.takes(lenet1)
    assert not channels_last.takes(sample)


@pytest.mark.parametrize("o", [16, 37])
def test_the_weight_gradient_is_put_in_the_weights_layout_as_numpy_would(o):
    """dWᵀ (KH*KW*C, O), tap-major and channels last, into (O, C, KH, KW): NumPy's transpose,
    for a number of output channels that is not whole tasks of TAPS_O too; and back."""
    kh, kw, c = 2, 3, 5
    dwt = np.random.default_rng(3).standard_normal((kh * kw * c, o)).astype(np.float32)
    out = np.empty((o, c, kh, kw), np.float32)
    channels_last._retile(dwt.reshape(-1), kh * kw, c, o, out.reshape(-1), False)
    np.testing.assert_array_equal(out, dwt.reshape(kh, kw, c, o).transpose(3, 2, 0, 1))
    back = np.empty_like(dwt)  # and the weights as the forward's product takes them
    channels_last._retile(out.reshape(-1), kh * kw, c, o, back.reshape(-1), True)
    np.testing.assert_array_equal(back, dwt)
