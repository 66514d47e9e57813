"""ember-numba's convolutions (conv.py): chunks of the batch, shared out among threads.

Every split of the batch must give the reference's numbers: one chunk, chunks of one sample
(whose GEMM writes the output directly), uneven last chunks, more threads than chunks, and
chunks whose GEMMs go sample by sample. The thresholds are lowered here so that small shapes
take each path.
"""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from ember.backends.numpy import backend as nb  # noqa: E402
from ember_numba import blas, conv  # noqa: E402

CASES = [  # x shape, w shape, stride, padding, dilation
    ((5, 3, 9, 8), (4, 3, 3, 3), 1, 1, 1),
    ((7, 2, 11, 10), (3, 2, 3, 3), 2, 0, 1),
    ((3, 4, 8, 8), (6, 4, 1, 1), 2, 0, 1),
    ((3, 4, 7, 9), (6, 4, 1, 1), 1, 0, 2),  # pointwise: a sample's columns are its input plane
    ((4, 3, 10, 9), (5, 3, 3, 3), 1, 2, 2),
    ((9, 8, 4, 4), (16, 8, 3, 3), 1, 1, 1),
]


@pytest.fixture(
    params=[(1, 10**9), (700, 10**9), (700, 1), (1 << 22, 10**9), (1 << 22, 1)],
    ids=[
        "one-sample-chunks",
        "few-sample-chunks",
        "few-sample-chunks-per-sample-gemms",
        "whole-batch",
        "whole-batch-per-sample-gemms",
    ],
)
def chunk_bytes(request, monkeypatch):
    size, per_sample_p = request.param
    monkeypatch.setattr(conv, "CHUNK_BYTES", size)
    monkeypatch.setattr(conv, "MIN_COLUMNS", 1)
    monkeypatch.setattr(conv, "PER_SAMPLE_P", per_sample_p)
    monkeypatch.setattr(conv, "PER_SAMPLE_CKK", 10**9)
    return size


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize("xs,ws,s,p,d", CASES)
def test_every_split_of_the_batch_gives_the_reference(xs, ws, s, p, d, dtype, tol, chunk_bytes):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    geo = dict(stride=(s, s), padding=(p, p), dilation=(d, d))
    y = nb.IMPLS["conv2d"](x, w, groups=1, **geo)
    np.testing.assert_allclose(conv.conv2d_cols(x, w, *geo.values()), y, rtol=tol, atol=tol)
    g = rng.standard_normal(y.shape).astype(dtype)
    np.testing.assert_allclose(
        conv.conv2d_grad_weight_cols(x, g, ws, *geo.values()),
        nb.IMPLS["conv2d_grad_weight"](x, g, ws, groups=1, **geo),
        rtol=tol,
        atol=10 * tol,
    )
    np.testing.assert_allclose(
        conv.conv2d_grad_input_cols(g, w, xs, *geo.values()),
        nb.IMPLS["conv2d_grad_input"](g, w, xs, groups=1, **geo),
        rtol=tol,
        atol=tol,
    )


@pytest.mark.parametrize("transposed", [True, False], ids=["dW-transposed", "dW"])
@pytest.mark.parametrize("xs,ws,s,p,d", CASES)
def test_both_forms_of_the_weight_gradient_product_give_the_reference(xs, ws, s, p, d, transposed, monkeypatch):
    monkeypatch.setattr(conv, "TRANSPOSED_MIN_PIXELS", 1 if transposed else 10**9)
    monkeypatch.setattr(conv, "TRANSPOSED_MAX_O", 10**9)
    monkeypatch.setattr(conv, "CHUNK_BYTES", 700)  # several chunks: per-thread sums of dWᵀ parts
    monkeypatch.setattr(conv, "MIN_COLUMNS", 1)
    monkeypatch.setattr(conv, "PER_SAMPLE_P", 10**9)
    rng = np.random.default_rng(1)
    geo = dict(stride=(s, s), padding=(p, p), dilation=(d, d))
    x = rng.standard_normal(xs)
    g = rng.standard_normal(nb.IMPLS["conv2d"](x, rng.standard_normal(ws), groups=1, **geo).shape)
    dw = conv.conv2d_grad_weight_cols(x, g, ws, *geo.values())
    assert dw.flags.c_contiguous and dw.shape == ws
    np.testing.assert_allclose(dw, nb.IMPLS["conv2d_grad_weight"](x, g, ws, groups=1, **geo), rtol=1e-10, atol=1e-9)


def test_chunks_share_out_the_batch():
    ch = conv.Chunks((128, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), np.float32)
    # ResNet-18's first stage: 2.4 MB of columns and 1024 output pixels a sample, so chunks of
    # as few samples as make MIN_COLUMNS columns: a few MB, not the batch's 302 MB
    assert ch.m == -(-conv.MIN_COLUMNS // 1024) and ch.count == -(-128 // ch.m)
    deep = conv.Chunks((128, 512, 4, 4), (512, 512, 3, 3), (1, 1), (1, 1), (1, 1), np.float32)
    # 16 output pixels a sample: chunks widened for the GEMM, but never fewer than the threads
    assert deep.m * deep.p >= min(conv.MIN_COLUMNS, 128 * 16 // deep.threads)
    assert deep.count >= min(deep.threads, 128)


def test_an_error_in_a_chunk_reaches_the_caller(monkeypatch):
    calls = []

    def work(n0, m):
        calls.append(n0)
        if n0 == 2:
            raise RuntimeError("chunk 2 failed")

    ch = conv.Chunks((6, 1, 4, 4), (1, 1, 1, 1), (1, 1), (0, 0), (1, 1), np.float32)
    ch.m, ch.count = 1, 6
    with pytest.raises(RuntimeError, match="chunk 2 failed"):
        ch.run(work)


def test_scratch_buffers_do_not_leak_between_calls():
    """Buffers are reused from call to call: a smaller call after a larger one must not see
    the larger one's columns."""
    rng = np.random.default_rng(1)
    big = rng.standard_normal((6, 3, 12, 12)), rng.standard_normal((4, 3, 3, 3))
    small = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    conv.conv2d_cols(*big, (1, 1), (1, 1), (1, 1))
    np.testing.assert_allclose(
        conv.conv2d_cols(*small, (1, 1), (1, 1), (1, 1)),
        nb.IMPLS["conv2d"](*small, (1, 1), (1, 1), (1, 1), 1),
        rtol=1e-10,
    )


@pytest.mark.parametrize("xs,ws,s,p,d", CASES + [((2, 3, 12, 33), (2, 3, 3, 5), 2, 1, 2)])
def test_both_im2col_kernels_write_the_same_columns(xs, ws, s, p, d, monkeypatch):
    """The tap-table kernel (narrow outputs) and the row kernel agree bit for bit, inf and NaN
    inputs and zero padding included, whichever TAPS_MAX_OW picks."""
    x = np.random.default_rng(1).standard_normal(xs).astype(np.float32)
    x.reshape(-1)[::7] = np.inf
    x.reshape(-1)[3::11] = np.nan
    columns = []
    for widest in (0, 10**9):
        monkeypatch.setattr(conv, "TAPS_MAX_OW", widest)
        ch = conv.Chunks(xs, ws, (s, s), (p, p), (d, d), x.dtype)
        assert (ch.taps is not None) == (widest > 0)
        columns.append(ch.im2col(x, 0, xs[0]).copy())
    np.testing.assert_array_equal(columns[0], columns[1])


@pytest.mark.parametrize(
    "xs,ws,s,p,d,form",
    [
        ((2, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), "same"),
        ((3, 2, 10, 9), (5, 2, 3, 3), (1, 1), (2, 2), (2, 2), "same"),  # dilated
        ((1, 2, 6, 5), (3, 2, 5, 3), (1, 1), (2, 1), (1, 1), "same"),  # taller than wide
        ((2, 2, 3, 2), (3, 2, 5, 7), (1, 1), (4, 6), (2, 2), "same"),  # taps that miss the plane
        ((1, 2, 7, 7), (3, 2, 3, 3), (1, 1), (1, 1), (1, 1), "same"),  # a 7x7 layer: not the tap kernel
        ((1, 8, 4, 4), (3, 8, 3, 3), (1, 1), (1, 1), (1, 1), "taps"),  # narrower than SAME_MIN_OW
        ((2, 3, 23, 21), (5, 3, 7, 7), (2, 2), (3, 3), (1, 1), "split"),  # a stem, odd width
        ((1, 2, 16, 24), (3, 2, 5, 5), (1, 2), (2, 0), (1, 1), "split"),  # no padding, even width
        ((2, 2, 19, 30), (3, 2, 3, 5), (2, 2), (1, 5), (1, 2), "split"),  # dilated, wide padding
        ((2, 2, 19, 30), (3, 2, 3, 3), (2, 2), (1, 1), (1, 1), "rows"),  # 3 taps do not repay a split
    ],
)
def test_each_im2col_form_writes_the_row_kernels_columns(xs, ws, s, p, d, form, monkeypatch):
    """The plane-shift, tap-table and split-row kernels (Chunks.form) give the row kernel's
    columns bit for bit, inf and NaN inputs and zero padding included: whole samples and, for a
    split, bands of output rows. The plane shifts on narrow maps too, which SAME_MIN_OW gives
    to the tap table."""
    if form == "same":
        monkeypatch.setattr(conv, "SAME_MIN_OW", 1)
    x = np.random.default_rng(4).standard_normal(xs).astype(np.float32)
    x.reshape(-1)[::7] = np.inf
    x.reshape(-1)[3::11] = np.nan
    ch = conv.Chunks(xs, ws, s, p, d, x.dtype)
    assert ch.form == form
    g, flat = ch.geo, x.reshape(-1)
    rows = np.full(ch.ckk * xs[0] * ch.p, -1.0, np.float32)
    conv._im2col(flat, xs[0], *g[1:], 0, g[-2], rows)
    np.testing.assert_array_equal(ch.im2col(x, 0, xs[0]).reshape(-1), rows)
    if form == "split":  # a band of output rows, as Chunks.forward_sample's
        r0, r1 = 1, g[-2] - 2
        band, expected = (np.full(ch.ckk * (r1 - r0) * g[-1], -1.0, np.float32) for _ in range(2))
        ch._rows(x[0].reshape(-1), 1, g[1], r0, r1, band)
        conv._im2col(flat, 1, *g[1:], r0, r1, expected)
        np.testing.assert_array_equal(band, expected)


@pytest.mark.parametrize("mode", ["blas", "split"])
@pytest.mark.parametrize("k", [3, 1], ids=["3x3", "pointwise"])
@pytest.mark.parametrize("batch,per_sample_p", [(1, 10**9), (4, 1)], ids=["batch-1", "two-chunks-per-sample-gemms"])
def test_fewer_chunks_than_threads_put_every_thread_on_the_products(mode, k, batch, per_sample_p, monkeypatch):
    """A batch of one is one chunk: its products run on all threads (blas.matmul, or for the
    forward Chunks.forward_sample) instead of one, in either BLAS mode, and still give the
    reference's numbers."""
    from ember_numba import blas

    monkeypatch.setattr(conv, "threads", lambda: 3)  # more threads than chunks, on any machine
    monkeypatch.setattr(blas, "threads", lambda: 3)
    monkeypatch.setitem(blas.STATE, "mode", mode)
    monkeypatch.setattr(blas, "MIN_FLOPS", 0)  # small products take the threaded road too
    monkeypatch.setattr(conv, "CHUNK_BYTES", 1 << 22)
    monkeypatch.setattr(conv, "PER_SAMPLE_P", per_sample_p)
    monkeypatch.setattr(conv, "PER_SAMPLE_CKK", 10**9)
    products = []
    real = blas.matmul
    monkeypatch.setattr(conv, "matmul", lambda a, b, out=None: products.append(a.shape) or real(a, b, out))

    rng = np.random.default_rng(2)
    xs, ws = (batch, 8, 40, 36), (300, 8, k, k)  # wide enough for shared_matmul's blocks
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    geo = ((1, 1), (k // 2, k // 2), (1, 1))
    ch = conv.Chunks(xs, ws, *geo, x.dtype)
    assert ch.count < 3 and ch.wide
    assert np.shares_memory(ch.im2col(x, 0, 1), x) == (k == 1)  # a pointwise sample's columns: its plane
    y = nb.IMPLS["conv2d"](x, w, *geo, 1)
    np.testing.assert_allclose(conv.conv2d_cols(x, w, *geo), y, rtol=1e-4, atol=1e-3)
    g = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(
        conv.conv2d_grad_weight_cols(x, g, ws, *geo),
        nb.IMPLS["conv2d_grad_weight"](x, g, ws, *geo, 1),
        rtol=1e-4,
        atol=1e-2,
    )
    np.testing.assert_allclose(
        conv.conv2d_grad_input_cols(g, w, xs, *geo),
        nb.IMPLS["conv2d_grad_input"](g, w, xs, *geo, 1),
        rtol=1e-4,
        atol=1e-3,
    )
    # the gradients' products went through blas.matmul; one sample's forward through
    # Chunks.forward_sample's one-thread calls
    assert len(products) == (2 if batch == 1 else 3) * ch.count


@pytest.mark.parametrize("widest", [0, 10**9], ids=["row-kernel", "tap-kernel"])
def test_one_sample_im2col_shared_among_threads_writes_the_same_columns(widest, monkeypatch):
    monkeypatch.setattr(conv, "TAPS_MAX_OW", widest)
    monkeypatch.setattr(conv, "threads", lambda: 3)
    x = np.random.default_rng(3).standard_normal((1, 7, 11, 10)).astype(np.float32)
    ch = conv.Chunks(x.shape, (4, 7, 3, 3), (2, 1), (1, 1), (1, 1), np.float32)
    assert ch.wide and (ch.taps is not None) == (widest > 0)
    alone = ch.im2col(x, 0, 1).copy()
    monkeypatch.setattr(conv, "SHARED_IM2COL_BYTES", 0)
    blocks, fill = [], ch._fill
    ch._fill = lambda xs, cols: blocks.append(xs.shape[1]) or fill(xs, cols)
    np.testing.assert_array_equal(ch.im2col(x, 0, 1), alone)
    assert sorted(blocks) == [1, 1, 1, 1, 1, 2]  # the 7 channels in 2 blocks per thread


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize(
    "xs,ws,s,p",
    [
        ((1, 3, 23, 21), (5, 3, 7, 7), 2, 3),  # a stem: bands of output rows, the last one short
        ((1, 6, 8, 8), (300, 6, 3, 3), 1, 1),  # narrow (tap kernel), many output channels: blocks of rows
        ((1, 6, 9, 9), (4, 6, 1, 1), 1, 0),  # pointwise: the input plane is the columns
        ((2, 5, 14, 13), (7, 5, 3, 3), 2, 1),  # the second sample of a batch
    ],
)
def test_one_sample_forward_on_all_threads_gives_the_reference(xs, ws, s, p, workers, monkeypatch):
    """Chunks.forward_sample, every way it cuts one sample: bands of a few output rows (each
    band's columns and product on the thread that takes it), or shared columns and blocks of
    the product; on one thread or several."""
    monkeypatch.setattr(conv, "BAND_MIN_P", 1)
    monkeypatch.setattr(conv, "BAND_BYTES", 1)  # one output row a band
    monkeypatch.setattr(conv, "SHARED_IM2COL_BYTES", 0)
    monkeypatch.setattr(conv, "threads", lambda: 3)
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    geo = ((s, s), (p, p), (1, 1))
    want = nb.IMPLS["conv2d"](x, w, *geo, 1)
    ch = conv.Chunks(xs, ws, *geo, x.dtype)
    for n in range(xs[0]):
        out = np.full(want.shape[1:], np.nan, np.float32)
        ch._forward_sample(x, n, w.reshape(ws[0], -1), out.reshape(ws[0], -1), workers)
        np.testing.assert_allclose(out, want[n], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(conv.conv2d_cols(x[:1], w, *geo), want[:1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("relu", [True, False], ids=["bias-relu", "bias"])
def test_one_sample_on_a_one_thread_pool_goes_in_bands(relu, monkeypatch):
    """With one thread a sample is one chunk that is not :attr:`Chunks.wide`; its forward still
    goes as forward_sample's bands of output rows (the columns of one band at a time, in
    cache), with the epilogue on each band: the bits of the bias and ReLU applied after the
    plain convolution (which goes in the same bands), and the reference's numbers."""
    from ember_numba.epilogue import Epilogue

    monkeypatch.setattr(conv, "BAND_MIN_P", 1)
    monkeypatch.setattr(conv, "BAND_BYTES", 1)  # one output row a band
    monkeypatch.setattr(conv, "threads", lambda: 1)
    rng = np.random.default_rng(6)
    xs, ws, geo = (1, 3, 23, 21), (5, 3, 7, 7), ((2, 2), (3, 3), (1, 1))
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    ch = conv.Chunks(xs, ws, *geo, x.dtype)
    assert not ch.wide and ch.p >= conv.BAND_MIN_P
    bands = []
    real = conv.Chunks._rows
    monkeypatch.setattr(conv.Chunks, "_rows", lambda self, *a: bands.append(a[3:5]) or real(self, *a))
    got = conv.conv2d_cols(x, w, *geo, epilogue=Epilogue(bias, relu=relu))
    assert bands == [(r, r + 1) for r in range(ch.geo[-2])]  # a band a row, none whole
    want = _bias_relu(conv.conv2d_cols(x, w, *geo), bias, relu)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, _bias_relu(nb.IMPLS["conv2d"](x, w, *geo, 1), bias, relu), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(conv, "SOLO_BANDS", False)  # the sample whole: one im2col, one product
    bands.clear()
    conv.conv2d_cols(x, w, *geo)
    assert bands == [(0, ch.geo[-2])]


def _bias_relu(y, bias, relu):
    v = y + bias.reshape(1, -1, 1, 1)
    return np.where(v > 0, v, 0) if relu else v


@pytest.mark.parametrize("relu", [True, False], ids=["bias-relu", "bias"])
@pytest.mark.parametrize(
    "xs,ws,s,p",
    [
        ((1, 3, 23, 21), (5, 3, 7, 7), 2, 3),  # bands of output rows
        ((1, 6, 8, 8), (300, 6, 3, 3), 1, 1),  # blocks of rows of the product
        ((1, 6, 9, 40), (4, 6, 1, 1), 1, 0),  # pointwise, blocks of columns
        ((3, 5, 14, 13), (7, 5, 3, 3), 2, 1),  # chunks of samples
    ],
)
def test_epilogue_on_each_block_is_the_nodes_after_the_convolution(xs, ws, s, p, relu, monkeypatch):
    """An epilogue (epilogue.py) applied block by block as forward_sample's bands and product
    blocks, or the chunks, are made gives the bits of the bias add and ReLU applied afterwards."""
    from ember_numba.epilogue import Epilogue

    monkeypatch.setattr(conv, "BAND_MIN_P", 1)
    monkeypatch.setattr(conv, "BAND_BYTES", 1)
    monkeypatch.setattr(conv, "SHARED_IM2COL_BYTES", 0)
    monkeypatch.setattr(conv, "threads", lambda: 3)
    monkeypatch.setattr(blas, "BLOCK", 1)  # many blocks of the product
    monkeypatch.setattr(conv, "SAMPLE_THREADS", _AllThreads())
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    bias[1] = np.nan  # a NaN sum fails gt: zero, as the where gives
    geo = ((s, s), (p, p), (1, 1))
    v = conv.conv2d_cols(x, w, *geo) + bias.reshape(1, -1, 1, 1)
    want = np.where(v > 0, v, 0) if relu else v
    got = conv.conv2d_cols(x, w, *geo, epilogue=Epilogue(bias, relu=relu))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


class _AllThreads:
    """A ThreadChoice that always takes all threads (the blocks are what the test checks)."""

    def choose(self, key, watch=False):
        return False, False, None

    def record(self, *args):
        pass


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "xs,ws,stride,padding",
    [
        ((1, 3, 60, 58), (16, 3, 7, 7), (2, 2), (3, 3)),  # the stem's bands of rows, split columns
        ((1, 40, 14, 14), (24, 40, 3, 3), (1, 1), (1, 1)),  # a "same" copy shared by the threads
        ((1, 48, 30, 29), (32, 48, 3, 3), (2, 2), (1, 1)),  # a row copy at stride 2
        ((1, 64, 7, 7), (40, 64, 3, 3), (1, 1), (1, 1)),  # a tap-table copy
    ],
)
def test_native_blocks_carry_the_python_blocks_bits(xs, ws, stride, padding, dtype, monkeypatch):
    """One sample's bands of rows and shared im2col copies run by the helpers' spin
    (conv._native as a C function, crew.py's kind 3) make the Python blocks' bits, with the
    bias, residual and ReLU of the nodes after the convolution."""
    from ember_numba import crew
    from ember_numba.epilogue import Epilogue

    if blas._crew(1).native is None:
        pytest.skip("NumPy's BLAS is not a bundled OpenBLAS with CBLAS entry points")
    monkeypatch.setattr(conv, "threads", lambda: 2)
    monkeypatch.setattr(conv, "SHARED_IM2COL_BYTES", 0)
    monkeypatch.setattr(conv, "BAND_MIN_P", 256)
    monkeypatch.setattr(conv, "BAND_BYTES", 16 << 10)  # several bands
    monkeypatch.setattr(conv.SAMPLE_THREADS, "choose", lambda key, watch=False: (False, False, None))
    monkeypatch.setattr(conv.SAMPLE_THREADS, "record", lambda *args: None)
    monkeypatch.setattr(conv.skinny, "takes", lambda w, x: False)
    monkeypatch.setattr(conv.channels_last, "takes", lambda ch: False)
    rows = []
    real = crew.Crew.run_rows
    monkeypatch.setattr(crew.Crew, "run_rows", lambda self, count: rows.append(count) or real(self, count))
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    shape = conv.Chunks(xs, ws, stride, padding, (1, 1), dtype)
    residual = rng.standard_normal((1, ws[0], *shape.geo[-2:])).astype(dtype)
    bias = rng.standard_normal(ws[0]).astype(dtype)
    for epilogue in (None, Epilogue(bias, residual, relu=True)):
        ys = {}
        for native in (False, True):
            monkeypatch.setattr(conv, "NATIVE_BLOCKS", native)
            ys[native] = conv.conv2d_cols(x, w, stride, padding, (1, 1), epilogue)
        np.testing.assert_array_equal(ys[True], ys[False])
    assert rows, "no native block ran"
    v = nb.IMPLS["conv2d"](x, w, stride, padding, (1, 1), 1) + bias.reshape(1, -1, 1, 1) + residual
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(ys[True], np.maximum(v, 0), rtol=tol, atol=tol)
