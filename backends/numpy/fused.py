"""Fused ops (ember.fused) the NumPy backend runs as its own kernels.

| op | kernel |
|---|---|
| ``max_pool2d`` | the running maximum of the k*k kernel-position slices, into one buffer, a few images at a time (the buffer's passes in cache) |
| ``max_pool2d_backward`` | disjoint windows whose maxima hold no NaN: the maxima, then per kernel position the gradient's bits where the slice equals its window's maximum and no earlier position did (a few images at a time); otherwise each window's first maximum searched for (a small int map of kernel positions), then per kernel position the gradient written (disjoint windows) or added (overlapping ones) into a padded buffer |
| ``batch_norm`` | over channels-last rows, a cache-sized chunk at a time: one pass for the per-channel sums of ``x`` and ``x * x`` (float64, the squares exact), one for the output |
| ``batch_norm_backward`` | the same rows: one pass for the sums of ``g`` and ``g * xhat``, one for ``dx`` |

The reference decomposition builds a flat index per output and scatters the gradient with
``index_add`` (``np.add.at``, slow) through Tensor ops; these kernels do the same arithmetic
on whole arrays and make the same choices: padding counts as -inf, the first maximum wins
and a later NaN replaces it. The pool's results are laid out like its input (a channels-last
activation from conv.py stays channels last); batch norm's are channels last, and do not
depend on the input's layout (its rows are a copy when the input is laid out otherwise).
Batch norm's reference makes several passes over the activation and keeps each
intermediate alive for the backward pass (in a jit'd ResNet that is most of the peak
memory); its kernels read it twice and save only the statistics. Integer and float16 inputs
go to the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import split


def _reference(name, *args, **params):
    """Run the reference decomposition of fused op ``name`` on NumPy buffers."""
    from ember.conformance import run_reference

    return run_reference("numpy", name, *args, **params)


def _views(a, kernel, stride, dilation, out_hw):
    """One strided view of ``a`` per kernel position, in kernel order: view n = (i, j) holds
    element (i, j) of every window."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    return [
        a[..., i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pool_args(kernel_size, stride, padding, dilation):
    """The parameters as pairs (the op may be called with ints, and ``stride=None`` for the kernel size)."""
    return (
        _pair(kernel_size),
        _pair(kernel_size if stride is None or stride == () else stride),
        _pair(padding),
        _pair(dilation),
    )


def _padded(x, kernel_size, stride, padding, dilation, ceil_mode):
    """``(padded, (top, left), (OH, OW))``: ``x`` padded with -inf (ceil_mode's extra cells
    included; ``x`` itself when nothing is added), where x starts in it, the output size."""
    from ember.nn.functional.pooling import pool_geometry

    (oh, eh), (ow, ew) = (
        pool_geometry(x.shape[-2 + a], kernel_size[a], stride[a], padding[a], dilation[a], ceil_mode) for a in range(2)
    )
    (ph, pw), (h, w) = padding, x.shape[-2:]
    if not (ph or pw or eh or ew):
        return x, (0, 0), (oh, ow)
    padded = np.full(x.shape[:-2] + (h + 2 * ph + eh, w + 2 * pw + ew), -np.inf, dtype=x.dtype)
    padded[..., ph : ph + h, pw : pw + w] = x
    return padded, (ph, pw), (oh, ow)


def _kernel_covers(x):
    return x.dtype in (np.float32, np.float64) and x.ndim >= 3


def max_pool2d(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over sliding windows: ``np.maximum`` of the kernel-position slices into one buffer."""
    if not _kernel_covers(x):
        return _reference(
            "max_pool2d",
            x,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            ceil_mode=ceil_mode,
        )
    kernel_size, stride, padding, dilation = _pool_args(kernel_size, stride, padding, dilation)
    padded, _, out_hw = _padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    return window_max(_views(padded, kernel_size, stride, dilation, out_hw))


#: Bytes of a pooled array the pooling kernels work on at a time (leading axis: images): their
#: several passes over the pooled size then stay in cache, and only the input and the full-size
#: gradient go out to memory (measured, LeNet's first pool backward: 0.71x the time of whole
#: arrays at 128 KiB, 0.82x at 32 KiB, 0.80x at 512 KiB).
POOLED_BYTES = 128 << 10


def _pooled_chunks(a):
    """Slices of ``a``'s leading axis of about POOLED_BYTES each."""
    n = len(a)
    per = max(1, POOLED_BYTES // max(1, a.nbytes // max(1, n)))
    return [slice(i, min(n, i + per)) for i in range(0, n, per)]


def window_max(slices):
    """The elementwise maximum of the kernel-position slices, laid out like them (NaN
    propagates: NaN wins, as in the reference), a few images at a time (POOLED_BYTES)."""
    if len(slices) == 1:
        return slices[0].copy(order="K")
    out = np.empty_like(slices[0])
    for at in _pooled_chunks(out):
        o = out[at]
        np.maximum(slices[0][at], slices[1][at], out=o)
        for piece in slices[2:]:
            np.maximum(o, piece[at], out=o)
    return out


def disjoint(pool) -> bool:
    """Do the windows of max_pool2d's parameters ``pool`` never overlap?"""
    kernel_size, stride, _, dilation = _pool_args(
        pool["kernel_size"], pool.get("stride"), pool.get("padding", 0), pool.get("dilation", 1)
    )
    return all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation))


def first_max_scatter(grad, padded, slices, best, kernel_size, stride, dilation, out_hw, relu=False):
    """For disjoint windows whose maxima ``best`` hold no NaN: an array like ``padded`` with
    each ``grad`` value's bits at its window's first maximum (the first slice equal to
    ``best``) and zeros elsewhere; ``relu``: only where ``best > 0`` (ReLU's gradient taken
    on the pooled gradient, :func:`~ember.backends.numpy.rewrites.relu_max_pool2d_backward`).

    The bits not yet placed, ``rest``, go down the kernel positions: a position takes
    ``rest * (slice == best)`` (the bits, or zero: integer arithmetic, exact) and leaves
    ``rest`` minus what it took. ``best`` is one of its window's values, so whatever reaches
    the last position belongs there: it takes ``rest`` whole. Three passes over the pooled
    size per kernel position, one for the last, a few images at a time (POOLED_BYTES)."""
    itype = {4: np.int32, 8: np.int64}[grad.dtype.itemsize]
    # windows side by side (stride = kernel, no dilation) write every cell they cover, so only
    # the rows and columns past the last window need zeros (an 11x11 map's last row and column)
    tiled = all(s == k and d == 1 for k, s, d in zip(kernel_size, stride, dilation))
    dx = np.empty_like(padded) if tiled else np.zeros_like(padded)  # laid out like x
    if tiled:
        (sh, sw), (oh, ow) = stride, out_hw
        dx[..., sh * oh :, :] = 0
        dx[..., : sh * oh, sw * ow :] = 0
    targets = _views(dx, kernel_size, stride, dilation, out_hw)
    bits = grad.view(itype)
    chunks = _pooled_chunks(best)
    if not chunks:  # no images
        return dx
    rest = np.empty_like(best[chunks[0]], dtype=itype)
    equal = np.empty_like(rest, dtype=bool)
    for at in chunks:
        b = best[at]
        r, e = rest[: len(b)], equal[: len(b)]
        if relu:  # the bits where best > 0, else zero
            np.greater(b, 0, out=e)
            np.multiply(bits[at], e, out=r)
        else:
            np.copyto(r, bits[at])
        take_first_maxima(r, e, b, [piece[at] for piece in slices], [t[at].view(itype) for t in targets])
    return dx


def take_first_maxima(rest, equal, best, pieces, takers):
    """Hand the integer bits ``rest`` down the window positions: position q takes ``rest``
    where ``pieces[q] == best`` into ``takers[q]`` (the bits, or zero) and leaves ``rest``
    minus that; the last takes what is left, which belongs there (``best`` is one of its
    window's values). ``equal`` is a boolean buffer of ``rest``'s shape; ``rest`` is spent."""
    *first, last = takers
    for piece, taken in zip(pieces, first):
        np.equal(piece, best, out=equal)
        np.multiply(rest, equal, out=taken)
        np.subtract(rest, taken, out=rest)
    np.copyto(last, rest)


def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Each output's ``grad`` added at its window's first maximum in ``x``."""
    if not _kernel_covers(x) or grad.dtype != x.dtype:
        return _reference(
            "max_pool2d_backward",
            grad,
            x,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            ceil_mode=ceil_mode,
        )
    kernel_size, stride, padding, dilation = _pool_args(kernel_size, stride, padding, dilation)
    padded, (top, left), out_hw = _padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    slices = _views(padded, kernel_size, stride, dilation, out_hw)
    if all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation)):
        best = window_max(slices)
        if not np.isnan(np.add.reduce(best, axis=None)):  # no NaN (a sum of +inf and -inf errs on the safe side)
            dx = first_max_scatter(grad, padded, slices, best, kernel_size, stride, dilation, out_hw)
            h, w = x.shape[-2:]
            return dx[..., top : top + h, left : left + w]
    best = slices[0].copy(order="K")
    arg = np.zeros_like(best, dtype=np.int16 if len(slices) < 2**15 else np.int64)
    better = np.empty_like(best, dtype=bool)
    for n, piece in enumerate(slices[1:], 1):
        np.greater(piece, best, out=better)
        better |= np.isnan(piece)  # a later NaN replaces the choice
        # positions only grow: a maximum is the select (np.copyto's where= is ten times slower)
        np.maximum(arg, np.multiply(better, n, dtype=arg.dtype), out=arg)
        np.maximum(best, piece, out=best)
    dx = np.zeros_like(padded)  # laid out like x (zeros_like keeps the strides' order)
    targets = _views(dx, kernel_size, stride, dilation, out_hw)
    if all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation)):
        # Disjoint windows: each cell takes at most one gradient, so it is written, not added,
        # as the gradient's bits masked by the kernel-position map (exact, infinities included).
        itype = {4: np.int32, 8: np.int64}[x.dtype.itemsize]
        bits, mask = grad.view(itype), np.empty_like(arg, dtype=itype)
        for n, target in enumerate(targets):
            np.negative(arg == n, dtype=itype, out=mask)
            np.bitwise_and(bits, mask, out=target.view(itype))
    else:
        for n, target in enumerate(targets):
            np.add(target, grad, out=target, where=(arg == n))  # overlapping windows accumulate
    h, w = x.shape[-2:]
    return dx[..., top : top + h, left : left + w]


def _channels_cover(x, *vectors):
    return (
        x.dtype in (np.float32, np.float64)
        and x.ndim >= 2
        and x.size > 0
        and all(v is None or (v.dtype == x.dtype and v.shape == (x.shape[1],)) for v in vectors)
    )


#: Bytes of an activation a channels-last batch norm takes at a time (each chunk is read from
#: memory once for all the arithmetic of a pass).
CHUNK_BYTES = 256 << 10


def _channel_rows(a):
    """``a``'s values as (M, C) rows, channel axis (1) last: a view of ``a``'s memory when it is
    laid out so (conv.py's channels-last outputs, (N, C) matrices), else a channels-last copy.
    The kernels below compute on rows alone, so their results do not depend on the layout."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)).reshape(-1, a.shape[1])


def _row_chunks(rows):
    per = max(1, CHUNK_BYTES // max(1, rows.shape[1] * rows.itemsize))
    return [slice(a, min(len(rows), a + per)) for a in range(0, len(rows), per)], per


#: Chunks batch norm's passes need at least for their runs of chunks to go on all of BLAS's
#: threads at once (split.py): 4 MiB of activation. Measured on 2 cores, batch 128, alone:
#: batch norm + ReLU and batch norm's backward at 64 x 32x32 0.73x and 0.65x the time,
#: 128 x 16x16 0.75x and 0.73x, 256 x 8x8 0.82x and 0.86x, 512 x 4x4 (4 MiB) 0.96x.
SPLIT_CHUNKS = 16


def _per_chunk(chunks, fn, scratch):
    """``fn(i, chunk, t)`` for every chunk, with ``t`` a scratch array for the chunk's rows
    (``scratch`` = (rows, C, dtype)); runs of chunks on all threads for SPLIT_CHUNKS or more
    (each chunk's arithmetic is the same on any thread: the same bits)."""
    rows, c, dtype = scratch

    def run(part):
        t = np.empty((rows, c), dtype)
        for i, sl in part:
            fn(i, sl, t[: sl.stop - sl.start])

    split.each(run, list(enumerate(chunks)), split.PARTS if len(chunks) >= SPLIT_CHUNKS else 1)


def _in_order(partials):
    """The rows of ``partials`` summed one after another, from zero (the chunks' sums in
    chunk order)."""
    total = np.zeros(partials.shape[1:])
    for p in partials:
        total += p
    return total


def _batch_norm_rows(xr, weight, bias, eps, out, then=None):
    """Batch norm over channels-last rows in two passes: the per-channel sums of ``x`` and of
    its exact float64 squares, then ``(x - mean) * scale + bias`` into ``out``, followed by
    ``then(chunk, rows)`` on each chunk while it is in cache (an epilogue: rewrites.py)."""
    m, c = xr.shape
    chunks, per = _row_chunks(xr)
    sums = np.empty((2, len(chunks), c))

    def statistics(i, sl, sq):
        xc = xr[sl]
        np.add.reduce(xc, axis=0, dtype=np.float64, out=sums[0, i])
        np.multiply(xc, xc, out=sq, dtype=np.float64)  # exact
        np.add.reduce(sq, axis=0, out=sums[1, i])

    _per_chunk(chunks, statistics, (min(per, m), c, np.float64))
    s1, s2 = _in_order(sums[0]), _in_order(sums[1])
    mean = s1 / m
    var = np.maximum(s2 / m - mean * mean, 0.0)  # float64: the cancellation costs nothing visible in float32
    scale = 1.0 / np.sqrt(var + eps)
    if weight is not None:
        scale *= weight
    mean_x, scale_x = mean.astype(xr.dtype), scale.astype(xr.dtype)

    def normalize(_, sl, __):
        o = out[sl]
        np.subtract(xr[sl], mean_x, out=o)
        np.multiply(o, scale_x, out=o)
        if bias is not None:
            np.add(o, bias, out=o)
        if then is not None:
            then(o, sl)

    _per_chunk(chunks, normalize, (0, c, xr.dtype))
    return mean, var


def _batch_norm_backward_rows(gr, xr, weight, mean, var, eps, out):
    """The batch norm backward over channels-last rows in two passes: the sums of ``g`` and
    ``g * xhat``, then ``dx``."""
    m, c = xr.shape
    chunks, per = _row_chunks(xr)
    rstd = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    rstd_x = rstd.astype(xr.dtype)
    sums = np.empty((2, len(chunks), c))

    def statistics(i, sl, t):
        gc = gr[sl]
        np.add.reduce(gc, axis=0, dtype=np.float64, out=sums[0, i])
        np.subtract(xr[sl], mean, out=t)
        np.multiply(t, rstd_x, out=t)
        np.multiply(t, gc, out=t)
        np.add.reduce(t, axis=0, dtype=np.float64, out=sums[1, i])

    scratch = (min(per, m), c, xr.dtype)
    _per_chunk(chunks, statistics, scratch)
    gsum, gxsum = _in_order(sums[0]), _in_order(sums[1])
    a = rstd if weight is None else rstd * weight
    # dx = a * (g - gsum / m - xhat * gxsum / m), with xhat = (x - mean) * rstd
    a_x, k_x, shift_x = (v.astype(xr.dtype) for v in (a, a * rstd * gxsum / m, a * gsum / m))

    def gradient(_, sl, t):
        o = out[sl]
        np.subtract(xr[sl], mean, out=t)
        np.multiply(t, k_x, out=t)
        np.multiply(gr[sl], a_x, out=o)
        np.subtract(o, t, out=o)
        np.subtract(o, shift_x, out=o)

    _per_chunk(chunks, gradient, scratch)
    return gsum, gxsum


def batch_norm(x, weight, bias, *, eps=1e-5, then=None):
    """Training-mode batch norm: ``(out, mean, var)``, the biased variance, as the reference.
    ``then``: an epilogue for each chunk of output rows (see :func:`_batch_norm_rows`)."""
    if not _channels_cover(x, weight, bias):
        out, mean, var = _reference("batch_norm", x, weight, bias, eps=eps)
        if then is not None:
            rows = _channel_rows(out)
            then(rows, slice(0, len(rows)))
            out = np.moveaxis(rows.reshape(np.moveaxis(out, 1, -1).shape), -1, 1)
        return out, mean, var
    out = np.empty(np.moveaxis(x, 1, -1).shape, x.dtype)  # channels last
    mean, var = _batch_norm_rows(_channel_rows(x), weight, bias, eps, out.reshape(-1, x.shape[1]), then)
    return np.moveaxis(out, -1, 1), mean.astype(x.dtype), var.astype(x.dtype)


def batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
    """With ``xhat = (x - mean) * rstd``: ``dx = w * rstd * (g - mean(g) - xhat * mean(g *
    xhat))``, ``dweight = sum(g * xhat)``, ``dbias = sum(g)`` (sums per channel, float64)."""
    if not _channels_cover(x, weight, bias, mean, var) or grad.dtype != x.dtype or grad.shape != x.shape:
        return _reference("batch_norm_backward", grad, x, weight, bias, mean, var, eps=eps)
    dx = np.empty(np.moveaxis(x, 1, -1).shape, x.dtype)  # channels last
    gsum, gxsum = _batch_norm_backward_rows(
        _channel_rows(grad), _channel_rows(x), weight, mean, var, eps, dx.reshape(-1, x.shape[1])
    )
    return (
        np.moveaxis(dx, -1, 1),
        None if weight is None else gxsum.astype(x.dtype),
        None if bias is None else gsum.astype(x.dtype),
    )


#: fused op name -> kernel: what the backend declares (backend.py)
IMPLS: dict[str, Callable[..., Any]] = {
    "max_pool2d": max_pool2d,
    "max_pool2d_backward": max_pool2d_backward,
    "batch_norm": batch_norm,
    "batch_norm_backward": batch_norm_backward,
}
