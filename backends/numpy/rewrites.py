"""Graph rewrites the NumPy runner makes before it plans buffers: a few node patterns that
convolutional and MLP training steps are made of, each computed by one kernel with fewer
passes over memory than its nodes one by one, and an MLP's products laid out the way BLAS
computes them fastest.

| pattern | kernel | saves |
|---|---|---|
| ``matmul(x, w)`` of an activation and a weight (a captured 2-d tensor or its transpose), the result at least TRANSPOSE_MIN on both sides | :func:`_weight_product`: the same product as ``matmul(w.mT, x.mT).mT``, and (:func:`_transposed_layout`) the elementwise ops and column sums after it computed in that layout; plain nodes, which every backend runs with its own impls | OpenBLAS's slow path for an MLP's shapes (batch 128: the forward products 1.25-1.4x faster, the input gradient 1.4x), without copies between layouts |
| ``where(c, max_pool2d_backward(g, r), 0)`` with ``r = where(c, y, 0)``, ``c = gt(y, 0)`` | :func:`relu_max_pool2d_backward`: ReLU's gradient taken on the pooled gradient (a quarter of the size for 2x2 pools), then written at each window's first maximum, found by comparing with the pooled forward output | the full-size ``where``, and the search for the maxima |
| ``conv2d_grad_weight(x, dr)`` and ``sum(dr, (0, 2, 3))`` (its bias's gradient) of that pool backward ``dr`` when nothing else reads it (no input gradient: a first layer), the pool's windows unpadded | :func:`relu_max_pool2d_conv_grads`: both from the pooled gradient, each window position's share of it multiplied by the columns of the input pixels that position reads | the full-size gradient, its two reads and the zeros in its product (LeNet's first layer, batch 128, one process, hot: 3.6 against 7.3 ms) |
| ``sum(dr, (0, 2, 3))`` (a bias's gradient) of that pool backward ``dr``, given the pool's output | :func:`relu_pool_bias_grad`: the sum of the gated pooled gradient | a read of the full-size gradient (LeNet's second layer: 0.8 against 3.1 MB; in the W2 step 0.1 against 0.3 ms) |
| ``where(c, g, 0)`` with ``c`` the mask of a ReLU ``r = where(c, x, 0)``, ``g`` perhaps ``add(g1, g2)`` that nothing else reads | :func:`relu_backward`: ``where(r > 0, g, 0)`` (``g1 + g2`` summed in it) | keeping the mask from the forward pass to the backward (and a residual block's gradient sum's pass) |
| ``where(gt(p, 0), p, 0)`` with ``p = conv2d(x, w) + bias`` | :func:`conv2d_bias_relu`: the bias and ReLU applied in place to each block of the convolution's output right after its GEMM (conv.py's ``then``), a cache-sized chunk at a time | three passes over the activation, and reading it back from memory |
| ``conv2d(x, w) + bias`` (no ReLU after it: ResNet's downsample layers) | :func:`conv2d_bias`: the bias added in place to each block of the convolution's output | a pass over the activation, and its buffer |
| ``where(gt(p, 0), p, 0)`` with ``p = reshape(matmul(w, x)) + bias``, or that plus a residual (ONNX's 1x1 convolutions, ember.onnx) | :func:`pointwise_bias_relu`: the sums and ReLU applied in place to the product | one or two passes over the activation, and their buffers |
| ``reshape(matmul(w, x)) + bias`` (a 1x1 convolution's bias, no ReLU after it) | :func:`pointwise_bias` | a pass over the activation |
| ``where(gt(p, 0), p, 0)`` with ``p = matmul(x, w) + bias`` (a Linear layer) | :func:`matmul_bias_relu`: the bias and ReLU applied in place to the product, a cache-sized chunk at a time | two passes over the activation |
| ``where(gt(p, 0), p, 0)`` with ``p`` batch norm's output, or that plus a residual | :func:`batch_norm_relu`: the sum and ReLU applied to each chunk of batch norm's output while it is in cache | the sum's and ReLU's passes, and their outputs' memory |
| ``where(gt(x, 0), x, 0)`` whose mask nothing else reads | :func:`relu`: one pass | the mask |
| ``add(x, mul(y, a))`` of 2-d arrays, ``a`` a scalar, at least AXPY_MIN elements (a Linear layer's SGD update ``p + g * -lr``) | :func:`axpy`: BLAS's axpy on NumPy's OpenBLAS, in place in the parameter | a pass over the weights, and the product's buffer (W1's 784x512 weight, hot: 28 against 78 µs on two threads, 46 against 74 on one) |

The rules run in that order (the transposed products first, so the others match in their
layout; the backward ones free the forward masks the forward ones need). Every rewrite gives
the values of the nodes it replaces, bit for bit, but four. ``axpy`` rounds each element once
(a fused multiply-add) where the nodes round the product and the sum.
``relu_max_pool2d_conv_grads`` makes the nodes' products without their zeros, and sums them
and the bias gradient's terms in another order, as ``relu_pool_bias_grad`` does a bias
gradient's. The transposed products are the
same products, which BLAS may sum in another order, and a bias gradient becomes a sum along
the other axis of the transposed array (NumPy sums a contiguous run pairwise; on the
NumPy backend itself one BLAS product with a column of ones, ``row_sums``). All four are
equal to float32 rounding, as for ember.jit's ``transpose_matmuls``. Elsewhere: ReLU's output ``r``
is never NaN and never -0.0, so ``r > 0`` exactly where its mask was true, and the gradient
that reaches a window's maximum passes ReLU exactly when the pooled output is above zero.

The transposed products are plain nodes, which every backend runs with its own impls: they
apply everywhere. A kernel applies only where the backend runs every node of the pattern
with the NumPy backend's own function and compiles no groups (numba's and CuPy's host
backends keep their own kernels), or where the backend names the rule's kernel in its
``rewrite_kernels`` (name -> its own function, which gives the same bits); its
``rewrite_when`` (name -> a guard of the match, such as :func:`gates_batch_norm`) may keep a
rule to the matches where the kernel beats the backend's own groups.

The rewritten graph's nodes are ``kernel`` nodes (``params``: ``{"name", "params"}``), which
:class:`~ember.backends.numpy.jit_runner.NumpyProgram` lowers to the functions in
:data:`KERNELS`.
"""

from __future__ import annotations

import numpy as np

from ember import dtypes
from ember.backend import Backend
from ember.jit.graph import ELEMENTWISE, Graph, Var
from ember.jit.passes import dce, fusion_groups

from . import backend as nb, conv, fused, openblas, split

#: The op name of a rewritten node.
KERNEL = "numpy_kernel"

#: Bytes of an activation processed at a time by the in-place epilogues (fits in L2): batch
#: norm's chunk size.
CHUNK_BYTES = fused.CHUNK_BYTES


#: Rows (channels) up to this long are added their bias as one long row of repeated bias: NumPy's
#: loop over a broadcast (rows, C) + (C,) sum runs C values at a time (measured, 11 MB of
#: 32-channel rows: 0.44 ms against 0.75 ms); an MLP's 512-wide rows gained nothing.
SHORT_ROW = 128


# ----------------------------------------------------------------------------- kernels
def _zero_unless(x, keep, out):
    """``where(keep, x, 0)`` into ``out``, bit for bit: ``x``'s bits times ``keep`` (1 or 0), one
    pass and no float arithmetic (faster than and-ing the bits with a mask made from ``keep``:
    one pass instead of two)."""
    np.multiply(x.view(_INT[x.dtype.itemsize]), keep, out=out.view(_INT[x.dtype.itemsize]))
    return out


def _bias_relu_(rows, bias, itype):
    """``rows = where(rows + bias > 0, rows + bias, 0)`` in place, a chunk at a time, so each
    chunk is read from memory once for its passes. On contiguous rows the bias is added as a
    row of the chunk's size (the bias repeated), so NumPy's loop runs over the whole chunk,
    not over one row of channels at a time (for rows of up to SHORT_ROW values: longer ones are
    long loops already, and repeating the bias would cost more than it saves)."""
    per = max(1, CHUNK_BYTES // max(1, rows.shape[1] * rows.itemsize))
    column = bias is not None and bias.ndim == 2  # one value per row, (rows, 1)
    flat = rows.flags.c_contiguous and rows.shape[1] <= SHORT_ROW and not column
    if bias is not None and flat:
        bias = np.tile(bias, min(per, len(rows)))
    keep = np.empty(min(per, len(rows)) * rows.shape[1], bool)
    for a in range(0, len(rows), per):
        chunk = rows[a : a + per]
        if flat:
            chunk = chunk.reshape(-1)
        k = keep[: chunk.size].reshape(chunk.shape)
        if column:
            np.add(chunk, bias[a : a + per], out=chunk)
        elif bias is not None:
            np.add(chunk, bias[: chunk.size] if flat else bias, out=chunk)
        np.greater(chunk, 0, out=k)
        np.multiply(chunk.view(itype), k, out=chunk.view(itype))


def conv2d_bias_relu(x, w, bias, **params):
    """``relu(conv2d(x, w) + bias)``: the convolution (conv.py), the bias and ReLU applied in
    place to each block of its output rows while the block is in cache."""
    itype = _INT[np.result_type(x, w).itemsize]
    return conv.conv2d(x, w, **params, then=lambda rows: _bias_relu_(rows, bias, itype))


def conv2d_bias(x, w, bias, **params):
    """``conv2d(x, w) + bias``: the convolution (conv.py), the bias added in place to each block
    of its output rows."""
    return conv.conv2d(x, w, **params, then=lambda rows: np.add(rows, bias, out=rows))


def pointwise_bias_relu(w, x, bias, residual=None, *, shape, relu=True):
    """``relu(reshape(w @ x, shape) + bias (+ residual))``: a 1x1 convolution as ember.onnx
    lowers it, ``w`` (O, C) and ``x`` (N, C, H*W); the sums and ReLU in place on the product."""
    y = nb.IMPLS["matmul"](w, x).reshape(shape)
    np.add(y, bias.reshape(1, -1, 1, 1), out=y)
    if residual is not None:
        np.add(y, residual, out=y)
    return _zero_unless(y, y > 0, y) if relu else y


def pointwise_bias(w, x, bias, *, shape):
    """``reshape(w @ x, shape) + bias``: :func:`pointwise_bias_relu` without the ReLU."""
    return pointwise_bias_relu(w, x, bias, shape=shape, relu=False)


def matmul_bias_relu(x, w, bias, out=None):
    """``relu(x @ w + bias)``: the product (BLAS), then the bias and ReLU in place, a chunk of
    rows at a time (``bias`` one value per column, or a (rows, 1) column of one per row)."""
    y = np.matmul(x, w, out=out)
    _bias_relu_(y.reshape(-1, y.shape[-1]), bias, _INT[y.dtype.itemsize])
    return y


def row_sums(x, out=None):
    """``x.sum(1, keepdims=True)`` of a 2-d float array as one BLAS product with a column of
    ones: a bias gradient in the transposed layout (:func:`_transposed_layout`), whose order of
    summation is BLAS's anyway. 3 µs against 16 µs for NumPy's pairwise sum of each 128-value
    row of a (512, 128) array (one thread, medians of 5000)."""
    return np.matmul(x, nb.ones(x.shape[1], x.dtype).reshape(-1, 1), out=out)


def relu_max_pool2d_backward(grad, r, best=None, **pool):
    """``where(r > 0, max_pool2d_backward(grad, r), 0)`` for a ReLU output ``r`` and disjoint
    windows: the gradient masked where the pooled output ``best`` (computed from ``r`` when not
    given) is above zero, then written at each window's first maximum."""
    kernel_size, stride, padding, dilation = fused._pool_args(
        pool["kernel_size"], pool.get("stride"), pool.get("padding", 0), pool.get("dilation", 1)
    )
    padded, (top, left), out_hw = fused._padded(r, kernel_size, stride, padding, dilation, pool.get("ceil_mode", False))
    slices = fused._views(padded, kernel_size, stride, dilation, out_hw)
    if best is None:
        best = fused.window_max(slices)
    dx = fused.first_max_scatter(grad, padded, slices, best, kernel_size, stride, dilation, out_hw, relu=True)
    h, w = r.shape[-2:]
    return dx[..., top : top + h, left : left + w]


#: Images of the pooled gradient :func:`relu_max_pool2d_conv_grads` takes at a time: its passes
#: over the pooled size stay in cache, and each of its products sums a few thousand rows (LeNet's
#: first layer, one thread, hot: 12 images 3.63 ms, 6 3.63, 16 3.71, 48 5.29).
CONV_GRADS_IMAGES = 12


def relu_max_pool2d_conv_grads(x, grad, r, best=None, *, pool, conv_params, bias):
    """The weight gradient of ``r = relu(conv2d(x, w) + b)`` (and with ``bias`` its bias's, the
    sum over all but the channels) when its output gradient is ``dr =``
    :func:`relu_max_pool2d_backward` ``(grad, r, best)`` and nothing else reads ``dr``: a first
    layer's, whose input needs no gradient. Returns ``(dw,)`` or ``(dw, db)``.

    ``dr`` is zero but at each disjoint window's first maximum, so it is never made. The
    pooled gradient goes to each window position ``q`` as the first-maximum scatter does
    (:func:`~ember.backends.numpy.fused.first_max_scatter`), into a pooled-size array ``T[q]``,
    and ``dw`` is the sum over the positions of ``columns_q.T @ T[q]``: the im2col columns of
    the input pixels that position ``q`` of every window reads (the conv's stride times the
    pool's). The same products as ``columns.T @ dr`` without the zeros, summed in another order:
    equal to float32 rounding (LeNet's first layer, 9 taps x 86,528 rows: 4e-7 of the largest
    value; the bias 3e-6). An input with inf or NaN goes the long way (``0 * inf`` is NaN in
    the full product, and the positions no window covers are in it)."""
    (kh, kw), (sh, sw), _, (dh, dw_) = fused._pool_args(
        pool["kernel_size"], pool.get("stride"), pool.get("padding", 0), pool.get("dilation", 1)
    )
    w_shape, cs, cp, cd = (conv_params[k] for k in ("weight_shape", "stride", "padding", "dilation"))
    if best is None:
        best = fused.max_pool2d(r, **pool)
    if not np.isfinite(np.add.reduce(x, axis=None)):  # inf, NaN, or a sum too large to tell
        dr = relu_max_pool2d_backward(grad, r, best, **pool)
        dw = conv.conv2d_grad_weight(x, dr, w_shape, cs, cp, cd)
        return (dw, dr.sum((0, 2, 3), keepdims=True)) if bias else (dw,)
    n, o, ph, pw = grad.shape
    c, kk = w_shape[1], w_shape[2] * w_shape[3]
    dtype, itype = grad.dtype, _INT[grad.dtype.itemsize]
    xh = conv._channels_last(x, cp)
    rows_of = lambda a: a.transpose(0, 2, 3, 1)  # noqa: E731  (N, PH, PW, O): the rows' order
    g4, b4 = rows_of(grad), rows_of(best)
    positions = [(i, j) for i in range(kh) for j in range(kw)]
    slices = fused._views(r, (kh, kw), (sh, sw), (dh, dw_), (ph, pw))  # in positions' order
    per = min(n, CONV_GRADS_IMAGES)
    taken = np.empty((len(positions), per, ph, pw, o), dtype)
    rest = np.empty((per, ph, pw, o), itype)
    equal = np.empty((per, ph, pw, o), bool)
    dwt = np.zeros((kk * c, o), dtype)  # the columns' order: (KH, KW, C) rows
    db = np.zeros((1, o), dtype)
    ones = nb.ones(per * ph * pw, dtype).reshape(1, -1)
    for a in range(0, n, per):
        at, m = slice(a, min(n, a + per)), min(per, n - a)
        rr, e, b = rest[:m], equal[:m], b4[at]
        np.greater(b, 0, out=e)  # ReLU's gradient, on the pooled gradient
        np.multiply(g4[at].view(itype), e, out=rr)
        if bias:
            db += ones[:, : m * ph * pw] @ rr.view(dtype).reshape(-1, o)
        fused.take_first_maxima(rr, e, b, [rows_of(p[at]) for p in slices], list(taken[:, :m].view(itype)))
        for q, (i, j) in enumerate(positions):
            shifted = xh[at, i * dh * cs[0] :, j * dw_ * cs[1] :]
            cols = conv._columns(shifted, w_shape[2:], (sh * cs[0], sw * cs[1]), cd, (ph, pw))
            dwt += cols.T @ taken[q, :m].reshape(-1, o)  # BLAS GEMM
    dwk = np.ascontiguousarray(dwt.T.reshape(o, w_shape[2], w_shape[3], c).transpose(0, 3, 1, 2))
    return (dwk, db.reshape(1, o, 1, 1)) if bias else (dwk,)


def relu_pool_bias_grad(grad, best):
    """``sum(relu_max_pool2d_backward(grad, r, best), (0, 2, 3), keepdims=True)``: a bias's
    gradient through the ReLU and disjoint max pool after it. Each window's gradient lands in
    one cell of the full-size gradient, where ReLU passes it (``best > 0``), so the sum is the
    gated pooled gradient's: a quarter of the values for 2x2 pools, and no zeros. Summed as
    :func:`row_sums` does, by BLAS products with a column of ones (LeNet's second layer: 0.1
    against 0.2 ms for NumPy's float64 sum over three axes, 0.3 for the full-size sum)."""
    gated = _zero_unless(grad, best > 0, np.empty_like(grad))
    n, o = gated.shape[:2]
    if gated.transpose(0, 2, 3, 1).flags.c_contiguous:  # channels last: rows of channels
        rows = gated.transpose(0, 2, 3, 1).reshape(-1, o)
        total = nb.ones(len(rows), gated.dtype).reshape(1, -1) @ rows
    else:  # a plane a channel: each plane's sum, then the images'
        planes = gated.reshape(n, o, -1)
        total = nb.ones(n, gated.dtype).reshape(1, -1) @ (planes @ nb.ones(planes.shape[-1], gated.dtype))
    return total.reshape(1, o, 1, 1)


def _flat(a):
    """``a``'s memory as a 1-d view when it is contiguous in some order of its axes, else None."""
    order = sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))
    t = a.transpose(order)
    return t.reshape(-1) if t.flags.c_contiguous else None


def _chunks(*arrays):
    """Matching 1-d chunks of ``arrays`` (all of one shape), CHUNK_BYTES at a time, when they
    share one memory layout; else the arrays themselves, whole."""
    flats = [_flat(a) for a in arrays]
    if any(f is None for f in flats) or len({a.strides for a in arrays}) != 1:
        yield arrays
        return
    per = max(1, CHUNK_BYTES // arrays[0].itemsize)
    for a in range(0, flats[0].size, per):
        yield tuple(f[a : a + per] for f in flats)


#: Chunks ReLU's one-pass kernels need at least for their runs to go on all of BLAS's threads
#: (split.py): 16 MiB. Less work a byte than batch norm's passes, so a run's
#: hand-over weighs more (ReLU's gradient, 2 cores, alone: 32 MiB 0.73x the time, 16 MiB
#: 0.85x, 8 MiB 1.06x, 4 MiB 1.37x).
SPLIT_CHUNKS = 64


def _each_chunk(fn, *arrays):
    """``fn(*chunks)`` for the matching chunks of ``arrays`` (:func:`_chunks`), runs of them on
    all threads for large arrays (SPLIT_CHUNKS)."""

    def run(part):
        for c in part:
            fn(*c)

    chunks = list(_chunks(*arrays))
    split.each(run, chunks, split.PARTS if len(chunks) >= SPLIT_CHUNKS else 1)


def relu(x, out=None):
    """``where(x > 0, x, 0)``, bit for bit, reading ``x`` once."""
    out = np.empty_like(x) if out is None else out
    _each_chunk(lambda xc, oc: _zero_unless(xc, xc > 0, oc), x, out)
    return out


def relu_backward(grad, r, other=None, out=None):
    """``where(r > 0, grad, 0)`` for ReLU's output ``r``: its gradient, without keeping the
    forward pass's mask (``r > 0`` exactly where the input was); with ``other``, of
    ``grad + other`` (a residual block's two gradients), summed a chunk at a time in cache."""
    out = np.empty_like(grad) if out is None else out
    if other is None:
        _each_chunk(lambda gc, rc, oc: _zero_unless(gc, rc > 0, oc), grad, r, out)
    else:
        _each_chunk(lambda gc, rc, hc, oc: _zero_unless(np.add(gc, hc, out=oc), rc > 0, oc), grad, r, other, out)
    return out


def batch_norm_relu(x, weight, bias, residual=None, *, eps=1e-5):
    """``relu(batch_norm(x) + residual)`` (no sum without ``residual``) and batch norm's
    statistics, ``(out, mean, var)``: the sum and ReLU applied to each chunk of batch norm's
    output while it is in cache."""
    rows = None if residual is None else fused._channel_rows(residual)

    def then(chunk, at):
        if rows is not None:
            np.add(chunk, rows[at], out=chunk)
        _zero_unless(chunk, chunk > 0, chunk)

    return fused.batch_norm(x, weight, bias, eps=eps, then=then)


#: Elements an ``x + y * a`` needs at least to be one BLAS call: below it the call's fixed cost
#: (~2.5 µs through ctypes) is more than the pass it saves (one thread, medians of 3000: 16384
#: elements 3.7 against 2.6 µs for NumPy's two passes; 65536: 8.3-10.7 against 9.2-11.7).
AXPY_MIN = 1 << 16


def axpy(x, y, a, out=None):
    """``x + y * a`` for a scalar ``a`` (an SGD update, ``p + g * -lr``) in one pass: BLAS's
    axpy on NumPy's OpenBLAS (openblas.py), into ``out`` (``x`` itself when the runner donates
    the parameter's buffer). Each element is rounded once (a fused multiply-add) where NumPy
    rounds the product and the sum: equal to float32 rounding. The bits depend on the shape
    only, not on the layouts or the destination (a run resumed from a checkpoint plans its
    first steps' destinations unlike one never stopped): BLAS always runs over the elements
    in C order (its last few, past its vector blocks, are rounded otherwise), and an operand
    it cannot take as it is, or that the destination overwrites (Adam's second moment,
    donated into its own buffer), is copied first. NumPy's two passes where there is no such
    BLAS."""
    f = openblas.axpy_for(x.dtype)
    out = np.empty_like(x) if out is None else out
    if f is None or not (x.dtype == y.dtype == out.dtype and x.shape == y.shape == out.shape):
        return np.add(x, np.multiply(y, a), out=out)
    if not y.flags.c_contiguous or np.may_share_memory(out, y):
        y = np.array(y, order="C")
    into = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    if into is not x:
        np.copyto(into, x)
    f(into.size, float(a), y, into)
    if into is not out:
        np.copyto(out, into)
    return out


_INT = {4: np.int32, 8: np.int64}

#: kernel name -> function of the node's argument buffers and its parameters.
KERNELS = {
    "conv2d_bias_relu": conv2d_bias_relu,
    "conv2d_bias": conv2d_bias,
    "matmul_bias_relu": matmul_bias_relu,
    "pointwise_bias_relu": pointwise_bias_relu,
    "pointwise_bias": pointwise_bias,
    "relu_max_pool2d_backward": relu_max_pool2d_backward,
    "relu_max_pool2d_conv_grads": relu_max_pool2d_conv_grads,
    "relu_pool_bias_grad": relu_pool_bias_grad,
    "relu": relu,
    "relu_backward": relu_backward,
    "batch_norm_relu": batch_norm_relu,
    "row_sums": row_sums,
    "axpy": axpy,
}
#: The kernels that take a destination (``out=``): the runner plans their buffers.
WRITES_INTO = frozenset(("relu", "relu_backward", "matmul_bias_relu", "row_sums", "axpy"))
#: The kernels that may write over their first input (a parameter's update, into its buffer).
IN_PLACE = frozenset(("axpy",))


# ----------------------------------------------------------------------------- matching
def _is_zero(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and a == 0


def _relu_of(v):
    """``(mask, x)`` when ``v = where(mask, x, 0)`` and ``mask = gt(x, 0)``, else None."""
    if v.op != "where" or not _is_zero(v.args[2]) or not isinstance(v.args[0], Var):
        return None
    c, x = v.args[0], v.args[1]
    if c.op != "gt" or len(c.args) != 2 or c.args[0] is not x or not _is_zero(c.args[1]):
        return None
    return c, x


def _fused(v, name):
    return v.op == "fused" and v.params["name"] == name


def _kernel(v, name, args, params):
    return Var(v.id, KERNEL, args, {"name": name, "params": dict(params)}, v.shape, v.dtype, v.where)


def _pool_backward(v, users):
    """``where(c, max_pool2d_backward(g, r), 0)`` with ``r`` ReLU's output under mask ``c``."""
    if v.op != "where" or not _is_zero(v.args[2]) or not isinstance(v.args[1], Var):
        return None
    c, p = v.args[0], v.args[1]
    if not _fused(p, "max_pool2d_backward") or len(users.get(p.id, ())) != 1:
        return None
    g, r = p.args
    relu = _relu_of(r)
    if relu is None or relu[0] is not c or str(r.dtype) not in ("float32", "float64") or g.dtype != r.dtype:
        return None
    pool = p.params["params"]
    if not fused.disjoint(pool):
        return None
    best = next(
        (u for u in users.get(r.id, ()) if _fused(u, "max_pool2d") and u.args[0] is r and u.params["params"] == pool),
        None,
    )
    args = (g, r) if best is None else (g, r, best)
    return [_kernel(v, "relu_max_pool2d_backward", args, pool)], [p]


def _pooled_conv_grads(v, users):
    """``conv2d_grad_weight(x, dr)`` (and ``sum(dr, (0, 2, 3))``, its bias's gradient) with ``dr``
    a :func:`_pool_backward` kernel that nothing else reads (no input gradient: a first
    layer), the pool's windows disjoint and unpadded: both from the pooled gradient."""
    if v.op != "conv2d_grad_weight" or v.params.get("groups", 1) != 1 or not isinstance(v.args[1], Var):
        return None
    x, dr = v.args
    if dr.op != KERNEL or dr.params["name"] != "relu_max_pool2d_backward" or dr.dtype != v.dtype:
        return None
    pool = dr.params["params"]
    _, _, padding, _ = fused._pool_args(pool["kernel_size"], pool.get("stride"), pool.get("padding", 0), 1)
    if any(padding) or pool.get("ceil_mode", False) or len(dr.args[0].shape) != 4:
        return None
    others = [u for u in users.get(dr.id, ()) if u is not v]
    sums = [u for u in others if u.op == "sum" and u.params["axes"] == (0, 2, 3) and u.params.get("keepdims")]
    if len(sums) != len(others) or len(sums) > 1:
        return None
    params = {"pool": pool, "conv_params": dict(v.params), "bias": bool(sums)}
    kernel = Var(
        None, KERNEL, (x, *dr.args), {"name": "relu_max_pool2d_conv_grads", "params": params}, (), None, v.where
    )
    picks = [
        Var(t.id, "fused_output", (kernel,), {"index": i}, t.shape, t.dtype, t.where) for i, t in enumerate([v, *sums])
    ]
    return [kernel, *picks], [dr]


def _pooled_bias_grad(v, users):
    """``sum(dr, (0, 2, 3))`` (a bias's gradient) of a :func:`_pool_backward` kernel ``dr`` that
    was given the pool's output: from the pooled gradient."""
    if v.op != "sum" or v.params["axes"] != (0, 2, 3) or not v.params.get("keepdims"):
        return None
    dr = v.args[0]
    if not isinstance(dr, Var) or dr.op != KERNEL or dr.params["name"] != "relu_max_pool2d_backward":
        return None
    if len(dr.args) != 3 or dr.dtype != v.dtype:
        return None
    grad, _, best = dr.args
    return [_kernel(v, "relu_pool_bias_grad", (grad, best), {})], []


def _sum_of(a, users, op):
    """``(y, b)`` when ``a = y + b`` (either order) in float32/64, ``y`` an ``op`` node of ``a``'s
    shape and dtype that nothing else reads and ``b`` of ``a``'s dtype; else None."""
    if a.op != "add" or len(a.args) != 2 or not all(isinstance(t, Var) for t in a.args):
        return None
    y, b = a.args if a.args[0].op == op else a.args[::-1]
    if str(a.dtype) not in ("float32", "float64") or y.op != op or y.dtype != a.dtype or b.dtype != a.dtype:
        return None
    if y.shape != a.shape or _ids(users.get(y.id, ())) != {a.id}:
        return None
    return y, b


def _channel_bias(b, channels):
    """Whether ``b`` is ``reshape(bias)`` of a (channels,) vector to (1, channels, 1, 1)."""
    return b.op == "reshape" and b.args[0].shape == (channels,) and b.shape == (1, channels, 1, 1)


def _product_bias_relu(v, users, op):
    """``(y, b, nodes)`` when ``v = where(gt(a, 0), a, 0)`` with ``a = y + b`` (:func:`_sum_of`),
    nothing else reading ``a`` or the mask (``nodes``: ``y``, ``a`` and the mask); else None."""
    relu = _relu_of(v)
    if relu is None:
        return None
    c, a = relu
    found = _sum_of(a, users, op)
    if found is None or _ids(users.get(a.id, ())) != {c.id, v.id} or _ids(users.get(c.id, ())) != {v.id}:
        return None
    return (*found, [found[0], a, c])


def _conv_bias_relu(v, users):
    """``where(gt(a, 0), a, 0)`` with ``a = conv2d(x, w) + reshape(bias)``, nothing else reading
    the convolution, the sum or the mask."""
    found = _product_bias_relu(v, users, "conv2d")
    if found is None:
        return None
    y, b, dropped = found
    if not _channel_bias(b, y.shape[1]):
        return None
    if _ids(users.get(b.id, ())) == {dropped[1].id}:  # the reshape only feeds the sum
        dropped.append(b)
    return [_kernel(v, "conv2d_bias_relu", (y.args[0], y.args[1], b.args[0]), y.params)], dropped


def _pool_positions(v, users):
    """A :func:`_pooled_conv_grads` kernel whose layer's output ``r`` (a :func:`_conv_bias_relu`
    kernel) nothing but it and the 2x2 pool after ``r`` reads: the pool taken as the
    convolution makes its output, with each window's first maximum's position (int8, 0-3),
    and the gradients from those positions, so that ``r`` is never kept. Only where a backend
    brings both kernels (``rewrite_kernels``: numba's)."""
    if v.op != KERNEL or v.params["name"] != "relu_max_pool2d_conv_grads" or len(v.args) != 4:
        return None
    x, grad, r, best = v.args
    if r.op != KERNEL or r.params["name"] != "conv2d_bias_relu" or r.params["params"].get("groups", 1) != 1:
        return None
    pool = v.params["params"]["pool"]
    kernel_size, stride, padding, dilation = fused._pool_args(
        pool["kernel_size"], pool.get("stride"), pool.get("padding", 0), pool.get("dilation", 1)
    )
    if (kernel_size, stride, padding, dilation) != ((2, 2), (2, 2), (0, 0), (1, 1)) or pool.get("ceil_mode", False):
        return None
    if not _fused(best, "max_pool2d") or best.args[0] is not r or _ids(users.get(r.id, ())) != {best.id, v.id}:
        return None
    forward = Var(
        None,
        KERNEL,
        r.args,
        {"name": "conv2d_bias_relu_max_pool2d", "params": {**r.params["params"], "pool": pool}},
        (),
        None,
        r.where,
    )
    pooled = Var(best.id, "fused_output", (forward,), {"index": 0}, best.shape, best.dtype, best.where)
    positions = Var(None, "fused_output", (forward,), {"index": 1}, best.shape, dtypes.int8, best.where)
    grads = Var(
        v.id, KERNEL, (x, grad, positions, pooled), {**v.params, "name": "pooled_conv_grads"}, (), None, v.where
    )
    return [forward, positions, pooled, grads], [r]


def _conv_bias(v, users):
    """``add(conv2d(x, w), reshape(bias))`` (either order) with nothing else reading the
    convolution: a bias that no ReLU follows (those take :func:`_conv_bias_relu` first)."""
    found = _sum_of(v, users, "conv2d")
    if found is None or not _channel_bias(found[1], found[0].shape[1]):
        return None
    y, b = found
    dropped = [y] + ([b] if _ids(users.get(b.id, ())) == {v.id} else [])
    return [_kernel(v, "conv2d_bias", (y.args[0], y.args[1], b.args[0]), y.params)], dropped


def _pointwise_bias(a, users):
    """``(product, bias, dropped)`` when ``a = add(reshape(matmul(w, x)), reshape(bias))``
    (either order): a 1x1 convolution's (N, O, H, W) output plus its bias, ``w`` (O, C), ``x``
    (N, C, H*W), the product and its reshape read by nothing else; else None."""
    if a.op != "add" or len(a.args) != 2 or not all(isinstance(t, Var) for t in a.args) or len(a.shape) != 4:
        return None
    y, b = a.args if a.args[0].op == "reshape" and a.args[0].args[0].op == "matmul" else a.args[::-1]
    if y.op != "reshape" or not isinstance(y.args[0], Var) or y.args[0].op != "matmul" or y.shape != a.shape:
        return None
    mm = y.args[0]
    n, o = a.shape[:2]
    w, x = mm.args
    if not (isinstance(w, Var) and isinstance(x, Var) and len(x.shape) == 3 and x.shape[0] == n):
        return None
    if w.shape != (o, x.shape[1]) or mm.shape != (n, o, x.shape[2]):
        return None
    if not _channel_bias(b, o):
        return None
    if str(a.dtype) not in ("float32", "float64") or not (mm.dtype == b.dtype == a.dtype == x.dtype == w.dtype):
        return None
    if _ids(users.get(mm.id, ())) != {y.id} or _ids(users.get(y.id, ())) != {a.id}:
        return None
    return mm, b, [mm, y] + ([b] if _ids(users.get(b.id, ())) == {a.id} else [])


def _pointwise_bias_relu(v, users):
    """``where(gt(p, 0), p, 0)`` with ``p`` a 1x1 convolution's output plus its bias
    (:func:`_pointwise_bias`), or that plus a residual (ResNet's bottleneck), nothing else
    reading the sums or the mask."""
    relu = _relu_of(v)
    if relu is None:
        return None
    c, a = relu
    if _ids(users.get(c.id, ())) != {v.id} or _ids(users.get(a.id, ())) != {c.id, v.id}:
        return None
    found, residual = _pointwise_bias(a, users), None
    if found is None and a.op == "add" and all(isinstance(t, Var) and t.shape == a.shape for t in a.args):
        for s, r in (a.args, a.args[::-1]):
            if _ids(users.get(s.id, ())) == {a.id} and r.dtype == a.dtype and (found := _pointwise_bias(s, users)):
                residual = r
                found = found[0], found[1], found[2] + [s]
                break
    if found is None:
        return None
    mm, b, dropped = found
    args = (*mm.args, b.args[0]) + (() if residual is None else (residual,))
    return [_kernel(v, "pointwise_bias_relu", args, {"shape": v.shape})], dropped + [a, c]


def _pointwise_bias_only(v, users):
    """A 1x1 convolution's output plus its bias, no ReLU after it (:func:`_pointwise_bias`)."""
    found = _pointwise_bias(v, users)
    if found is None:
        return None
    mm, b, dropped = found
    return [_kernel(v, "pointwise_bias", (*mm.args, b.args[0]), {"shape": v.shape})], dropped


def _matmul_bias_relu(v, users):
    """``where(gt(a, 0), a, 0)`` with ``a = matmul(x, w) + bias`` (a Linear layer's bias, one
    value per column, or per row as a (rows, 1) column in a transposed product), nothing else
    reading the product, the sum or the mask."""
    found = _product_bias_relu(v, users, "matmul")
    if found is None or len(found[0].shape) < 2:
        return None
    y, b, dropped = found
    if b.shape == (y.shape[-1],):
        return [_kernel(v, "matmul_bias_relu", (y.args[0], y.args[1], b), {})], dropped
    if len(y.shape) == 2 and b.shape == (y.shape[0], 1):  # a transposed product's (_transposed_layout)
        return [_kernel(v, "matmul_bias_relu", (y.args[0], y.args[1], b), {})], dropped
    return None


def _relu_backward(v, users):
    """``where(c, g, 0)`` where ReLU's output ``r = where(c, x, 0)``, ``c = gt(x, 0)``: its gradient."""
    if v.op != "where" or not _is_zero(v.args[2]) or not all(isinstance(a, Var) for a in v.args[:2]):
        return None
    c, g = v.args[0], v.args[1]
    r = next((u for u in users.get(c.id, ()) if u is not v and (_relu_of(u) or (None,))[0] is c), None)
    if r is None or str(r.dtype) not in ("float32", "float64") or g.dtype != r.dtype:
        return None
    if not (g.shape == r.shape == v.shape):
        return None
    if (
        g.op == "add"
        and _ids(users.get(g.id, ())) == {v.id}
        and all(isinstance(t, Var) and t.shape == v.shape and t.dtype == v.dtype for t in g.args)
    ):  # the sum of a residual block's two gradients, read by nothing else: summed in the kernel
        return [_kernel(v, "relu_backward", (g.args[0], r, g.args[1]), {})], [g]
    return [_kernel(v, "relu_backward", (g, r), {})], []


def _ids(vs):
    return {u.id for u in vs}


def _batch_norm_of(t):
    """The batch_norm node whose output ``t`` is, or None."""
    if t.op == "fused_output" and t.params["index"] == 0 and _fused(t.args[0], "batch_norm"):
        return t.args[0]
    return None


def _batch_norm_relu(v, users):
    """``where(gt(a, 0), a, 0)`` with ``a`` batch norm's output, or that plus another value
    (ResNet's residual sum), nothing else reading ``a``, the mask or the output: the batch
    norm node becomes the kernel and ``v`` its first result."""
    relu = _relu_of(v)
    if relu is None or str(v.dtype) not in ("float32", "float64"):
        return None
    c, a = relu
    if _ids(users.get(c.id, ())) != {v.id} or _ids(users.get(a.id, ())) != {c.id, v.id}:
        return None
    residual, gone = None, [a, c]
    b = a if _batch_norm_of(a) is not None else None
    if (
        b is None
        and a.op == "add"
        and all(isinstance(t, Var) and t.shape == a.shape and t.dtype == a.dtype for t in a.args)
    ):
        b = next((t for t in a.args if _batch_norm_of(t) is not None and _ids(users.get(t.id, ())) == {a.id}), None)
        residual = a.args[1] if b is a.args[0] else a.args[0]
        gone = [a, b, c]
    if b is None:
        return None
    bn = b.args[0]
    if bn.args[0].shape != v.shape or bn.args[0].dtype != v.dtype:
        return None
    args = bn.args + (() if residual is None else (residual,))
    kernel = Var(
        bn.id, KERNEL, args, {"name": "batch_norm_relu", "params": bn.params["params"]}, bn.shape, bn.dtype, bn.where
    )
    return [kernel, Var(v.id, "fused_output", (kernel,), {"index": 0}, v.shape, v.dtype, v.where)], gone


def _relu(v, users):
    """``where(gt(x, 0), x, 0)`` whose mask nothing else reads: one pass."""
    relu = _relu_of(v)
    if relu is None or str(v.dtype) not in ("float32", "float64") or relu[1].shape != v.shape:
        return None
    c = relu[0]
    if {u.id for u in users.get(c.id, ())} != {v.id}:
        return None
    return [_kernel(v, "relu", (relu[1],), {})], [c]


def _axpy(v, users):
    """``add(x, mul(y, a))`` (either order) of 2-d float arrays of one shape, ``a`` a scalar (a
    0-d node or a number), nothing else reading the product, at least AXPY_MIN elements: a
    Linear layer's SGD update, whose gradient leaves the step in ``.grad`` (so its scale
    cannot go into the gradient's product). 2-d only: an MLP's updates are a tenth of its step,
    a conv net's a few thousandths, and conv nets keep eager execution's bits (tests/jit's
    ResNet-18 at batch 2 turns a last-bit change into 1e-3 in three steps)."""
    found = _sum_of(v, users, "mul") if v.size >= AXPY_MIN and len(v.shape) == 2 else None
    if found is None:
        return None
    m, x = found
    y, a = m.args if isinstance(m.args[0], Var) and m.args[0].shape == v.shape else m.args[::-1]
    scalar = isinstance(a, float) or (isinstance(a, Var) and a.shape == () and a.dtype == v.dtype)
    if not (isinstance(y, Var) and y.shape == x.shape == v.shape and y.dtype == v.dtype and scalar):
        return None
    return [_kernel(v, "axpy", (x, y, a), {})], [m]


#: Products of an activation and a weight whose result has both sides at least this long are
#: computed transposed (:func:`_weight_product`): a layer's logits stay as they are.
TRANSPOSE_MIN = 128


#: The users a transposed product may have: what :func:`_transposed_layout` carries the
#: layout through, and products and transpositions, which take either layout as it is. Any
#: other (a reshape to a convolution's shape: LeNet's first Linear layer's input gradient)
#: would copy the transposed array back.
CARRIED = ELEMENTWISE | {"sum", "matmul", "permute"}


def _mT(x):
    """``x.mT`` of a 2-d Var: the node under a transposition, else a new permute (id None: the
    rewrite gives it one)."""
    if x.op == "permute" and x.params["axes"] == (1, 0):
        return x.args[0]
    return Var(None, "permute", (x,), {"axes": (1, 0)}, x.shape[::-1], x.dtype, x.where)


def _is_weight(x):
    """A captured 2-d tensor (a parameter) or its transpose."""
    return len(x.shape) == 2 and (x.op == "capture" or (x.op == "permute" and x.args[0].op == "capture"))


def _weight_product(v, users):
    """``matmul(a, w)`` of a (batch, features) activation ``a`` and a weight ``w`` (a captured
    2-d tensor or its transpose) as ``matmul(w.mT, a.mT).mT``: the same sums, laid out with the
    batch along rows' length, which OpenBLAS computes faster for an MLP's shapes (measured
    on a 2-core AVX-512 machine, batch 128: 784 -> 512 forward 1.25x, 512 -> 512 1.4x, its
    input gradient 1.4x). The activations downstream come out transposed too (elementwise
    results follow their inputs' layout), so the next layer's product finds its operand
    C-ordered."""
    if v.op != "matmul" or len(v.shape) != 2 or str(v.dtype) not in ("float32", "float64"):
        return None
    a, w = v.args
    if not (isinstance(a, Var) and isinstance(w, Var)) or not _is_weight(w) or _is_weight(a) or len(a.shape) != 2:
        return None
    if min(v.shape) < TRANSPOSE_MIN or any(u.op not in CARRIED for u in users.get(v.id, ())):
        return None
    wt, at = _mT(w), _mT(a)
    product = Var(None, "matmul", (wt, at), {}, v.shape[::-1], v.dtype, v.where)
    made = [t for t in (wt, at) if t.id is None] + [product]
    return made + [Var(v.id, "permute", (product,), {"axes": (1, 0)}, v.shape, v.dtype, v.where)], []


def _transposed_layout(row_sums=False):
    """A rule that carries the transposed products of :func:`_weight_product` through the
    elementwise ops and column sums after them: ``op(p.mT, ...)`` as ``op(p, ...).mT`` (a
    bias of one value per column broadcast as a column vector, ``(n, 1)``) and a sum over rows
    as the transposed sum over columns. Every value downstream is then computed C-ordered in
    the transposed layout, which the backends' elementwise and reduce kernels run on as fast
    as on the original one (numba's kernels copy any other layout to C order first; W1's
    ReLU and its gradient took 3-4x as long on the transposed arrays without this rule). The
    elementwise values are the same; a sum adds the same numbers along a contiguous run. The
    rule keeps the transposed form of each value it has seen (its state is one graph's; every
    match it makes is taken, since it replaces only the node it is given). With ``row_sums``
    (a backend that sums with NumPy's own function and compiles no groups) the transposed sum is
    :func:`row_sums`, one BLAS product: that sum's order is BLAS's or NumPy's pairwise one,
    neither of them eager execution's."""
    t: dict = {}  # id -> the C-ordered Var whose .mT the value is

    def reshaped(a, shape):
        return Var(None, "reshape", (a,), {"shape": shape}, shape, a.dtype, a.where)

    def rule(v, users):
        if v.op == "permute" and v.params["axes"] == (1, 0) and v.args[0].op == "matmul" and len(v.shape) == 2:
            t[v.id] = v.args[0]
            return None
        if len(v.shape) != 2 or not any(isinstance(a, Var) and a.id in t for a in v.args):
            return None
        m, n = v.shape
        if v.op == "sum" and v.params["axes"] == (0,) and v.params.get("keepdims") and v.args[0].id in t:
            x = t[v.args[0].id]
            if row_sums and str(v.dtype) in ("float32", "float64"):
                total = Var(None, KERNEL, (x,), {"name": "row_sums", "params": {}}, (n, 1), v.dtype, v.where)
            else:
                total = Var(None, "sum", (x,), {"axes": (1,), "keepdims": True}, (n, 1), v.dtype, v.where)
            t[v.id] = total
            return [total, Var(v.id, "reshape", (total,), {"shape": (1, n)}, v.shape, v.dtype, v.where)], []
        if v.op not in ELEMENTWISE:
            return None
        made, args = [], []
        for a in v.args:
            if not isinstance(a, Var) or a.shape == ():
                args.append(a)
            elif a.id in t:
                args.append(t[a.id])
            elif a.shape in ((n,), (1, n)):
                made.append(reshaped(a, (n, 1)))
                args.append(made[-1])
            else:
                return None  # another full-size or row-broadcast operand: left as it is
        flipped = Var(None, v.op, args, v.params, (n, m), v.dtype, v.where)
        t[v.id] = flipped
        return [*made, flipped, Var(v.id, "permute", (flipped,), {"axes": (1, 0)}, v.shape, v.dtype, v.where)], []

    return rule


#: (rule, the NumPy functions its nodes must run with, the fused ops that must be the NumPy
#: backend's), in the order they are tried: the transposed products first, so the others
#: match in their layout; then the backward rules, since they free ReLU's mask from its
#: backward use, which the forward rules need.
RULES = (
    (_weight_product, {op: nb.IMPLS[op] for op in ("matmul", "permute")}, set()),
    (_pool_backward, {"where": nb.IMPLS["where"], "gt": nb.IMPLS["gt"]}, {"max_pool2d", "max_pool2d_backward"}),
    (_pooled_conv_grads, {op: nb.IMPLS[op] for op in ("conv2d_grad_weight", "sum")}, {"max_pool2d"}),
    (_pooled_bias_grad, {"sum": nb.IMPLS["sum"]}, set()),
    (_relu_backward, {"where": nb.IMPLS["where"], "gt": nb.IMPLS["gt"]}, set()),
    (_conv_bias_relu, {op: nb.IMPLS[op] for op in ("where", "gt", "add", "reshape", "conv2d")}, set()),
    (_pool_positions, {}, {"max_pool2d"}),
    (_matmul_bias_relu, {op: nb.IMPLS[op] for op in ("where", "gt", "add", "matmul")}, set()),
    (_conv_bias, {op: nb.IMPLS[op] for op in ("add", "reshape", "conv2d")}, set()),
    (_pointwise_bias_relu, {op: nb.IMPLS[op] for op in ("where", "gt", "add", "reshape", "matmul")}, set()),
    (_pointwise_bias_only, {op: nb.IMPLS[op] for op in ("add", "reshape", "matmul")}, set()),
    (_batch_norm_relu, {op: nb.IMPLS[op] for op in ("where", "gt", "add")}, {"batch_norm"}),
    (_relu, {"where": nb.IMPLS["where"], "gt": nb.IMPLS["gt"]}, set()),
    (_axpy, {op: nb.IMPLS[op] for op in ("add", "mul")}, set()),
)
#: The kernel each rule makes, for backends that bring their own (``rewrite_kernels``); None
#: for a rule that makes primitives' nodes only: it applies on every backend.
MAKES = {
    _pool_backward: "relu_max_pool2d_backward",
    _pooled_conv_grads: "relu_max_pool2d_conv_grads",
    _pooled_bias_grad: "relu_pool_bias_grad",
    _relu_backward: "relu_backward",
    _conv_bias_relu: "conv2d_bias_relu",
    _pool_positions: "pooled_conv_grads",  # and conv2d_bias_relu_max_pool2d, which a backend brings with it
    _matmul_bias_relu: "matmul_bias_relu",
    _conv_bias: "conv2d_bias",
    _pointwise_bias_relu: "pointwise_bias_relu",
    _pointwise_bias_only: "pointwise_bias",
    _batch_norm_relu: "batch_norm_relu",
    _relu: "relu",
    _axpy: "axpy",
    _weight_product: None,  # plain nodes, which every backend runs with its own impls
}


def _applies(backend, impls, fused_names, kernel=None) -> bool:
    if kernel is None:
        return True
    if kernel in getattr(backend, "rewrite_kernels", {}):
        return True  # the backend's own kernel, which vouches for the pattern's bits
    if kernel not in KERNELS:
        return False  # a kernel only a backend brings
    if type(backend).compile is not Backend.compile:
        return False
    if any(backend.impls.get(op) is not f for op, f in impls.items()):
        return False
    return all((backend.fused_impls or {}).get(n) is fused.IMPLS[n] for n in fused_names)


def _apply(rule, graph):
    """``graph`` with ``rule`` made wherever it matches (nodes it would touch twice are left as
    they are). Nodes a rule makes with the id None are new: they get fresh ids and go just
    before the node whose place the match took."""
    users = graph.consumers()
    leaving = {o.id for o in graph.outputs}
    new: dict = {}
    before: dict = {}
    dropped: set = set()
    fresh = max((v.id for v in graph.nodes), default=0) + 1
    for v in graph.nodes:
        found = None if v.id in dropped or v.id in new else rule(v, users)
        if found is None:
            continue
        made, gone = found
        touched = [n.id for n in made if n.id is not None] + [d.id for d in gone]
        if any(t in new or t in dropped for t in touched) or any(d.id in leaving for d in gone):
            continue
        for n in made:
            if n.id is None:
                n.id, fresh = fresh, fresh + 1
                before.setdefault(v.id, []).append(n)
            else:
                new[n.id] = n
        dropped.update(d.id for d in gone)
    if not new:
        return graph
    final: dict = {}
    nodes = []
    listed = [n for v in graph.nodes if v.id not in dropped for n in (*before.get(v.id, ()), new.get(v.id, v))]
    for v in _in_order(listed):
        if any(isinstance(a, Var) and final[a.id] is not a for a in v.args):  # it read a replaced node
            args = [final[a.id] if isinstance(a, Var) else a for a in v.args]
            v = Var(v.id, v.op, args, v.params, v.shape, v.dtype, v.where, v.value)
        final[v.id] = v
        nodes.append(v)
    return Graph(nodes, [final[o.id] for o in graph.outputs], graph.captures, graph.donate, graph.name)


def _in_order(nodes):
    """``nodes`` in their order, except that a node whose input comes later (a kernel that
    took over an earlier node's place but reads a later one) waits for it: each node is
    placed after its inputs, pulled forward from where they were."""
    by_id = {v.id: v for v in nodes}
    placed: set = set()
    order = []
    for v in nodes:
        stack = [v]
        while stack:
            top = stack[-1]
            if top.id in placed:
                stack.pop()
                continue
            missing = [by_id[a.id] for a in top.inputs if a.id not in placed]
            if not missing:
                placed.add(top.id)
                order.append(top)
                stack.pop()
            elif len(stack) > len(nodes):
                raise AssertionError("rewrites made a cycle")
            else:
                stack.extend(missing)
    return order


def gates_batch_norm(v, users) -> bool:
    """Whether ReLU's gradient ``v = where(c, g, 0)`` (a :func:`_relu_backward` match) is that
    of a ReLU taken on batch norm's output, or on that plus a residual: where the rewrite frees
    the mask that :func:`_batch_norm_relu` needs. A backend whose compiled groups fuse the
    gradient's ``where`` with its neighbours (numba's: ``where`` and the bias gradient's
    ``sum`` in one pass) takes the rewrite only there (``rewrite_when``)."""
    c = v.args[0]
    r = next(u for u in users.get(c.id, ()) if u is not v and (_relu_of(u) or (None,))[0] is c)
    a = _relu_of(r)[1]
    if _batch_norm_of(a) is not None:
        return True
    return a.op == "add" and any(isinstance(t, Var) and _batch_norm_of(t) is not None for t in a.args)


def _guarded(rule, guard):
    """``rule``, its matches kept only where ``guard(v, users)`` holds."""

    def guarded(v, users):
        found = rule(v, users)
        return found if found is not None and guard(v, users) else None

    return guarded


def rewrite(graph, groups, backend):
    """``(graph, groups)`` with every rule that applies on ``backend`` made (the same objects
    when none does). A backend's ``rewrite_when`` (kernel name -> ``guard(v, users)``) keeps a
    rule's matches to those its guard accepts."""
    out = graph
    when = getattr(backend, "rewrite_when", {})
    for rule, impls, fused_names in RULES:
        if _applies(backend, impls, fused_names, MAKES[rule]):
            guard = when.get(MAKES[rule])
            out = _apply(rule if guard is None else _guarded(rule, guard), out)
            if rule is _weight_product and out is not graph:
                sums = _applies(backend, {"sum": nb.IMPLS["sum"], "matmul": nb.IMPLS["matmul"]}, set(), "row_sums")
                out = dce(_apply(_transposed_layout(sums), out))
    if out is graph:
        return graph, groups
    return out, fusion_groups(out)
