"""Convolutions of narrow maps on channels-last columns: ``cols[(n, oh, ow), (kh, kw, c)]``.

conv.py's columns are runs of OW values, one per kernel tap, sample and output row. On a
narrow map they are short: LeNet's second layer (13x13 in, 11x11 out) copies 11 floats at a
time, and its im2col and col2im took 60% and 50% as long as the chunk's GEMM. Channels last,
the values one kernel row meets at one output pixel are KW*C neighbours in memory (96 floats
there): each chunk's input is transposed once to (m, H, W, C), its columns are KH runs of KW*C
values per output pixel, and the products are made pixel-major:

=====================  ===============================================  ========================
primitive              per chunk of ``m`` samples                       then
=====================  ===============================================  ========================
conv2d                 ``y (m*P, O) = cols @ W (KH*KW*C, O)``           to (m, O, P): NCHW
conv2d_grad_weight     ``dWᵀ (KH*KW*C, O) += cols.T @ g (m*P, O)``      (sum over chunks)
conv2d_grad_input      ``cols = g (m*P, O) @ W (O, KH*KW*C)``           col2im, to NCHW
=====================  ===============================================  ========================

The transposes in and out are passes over a chunk's input or output, a few times smaller than
its columns, in cache. The sums run over (kh, kw, c) instead of (c, kh, kw): the same products,
added in another order, so within float rounding of conv.py's results, not bit for bit.
Chunks and threads are conv.py's (:class:`~ember_numba.conv.Chunks`); :func:`takes` is the rule.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, uint64

from . import launch
from .kernels import JIT

#: Output rows at most this wide: conv.py's runs of OW values are short there. Measured per
#: layer at batch 128, time with / without (CPU time, alternating calls; forward, weight and
#: input gradient): LeNet's 11-wide layer (32 -> 64 channels) 0.78, 0.85, 0.91; ResNet-18's
#: 8- and 4-wide layers 0.86-0.96, their input gradients 0.76-0.85; but its 16-wide 64 -> 128
#: stride-2 layer 1.18, 1.35, 1.00 and 128 -> 128 layer 0.92, 1.02, 0.90 (a run of 16 values
#: is one vector: little left to gain).
MAX_OW = 12
#: Contiguous values a kernel row reads (KW*C) at least: shorter runs gain nothing over OW.
MIN_RUN = 32


def takes(ch) -> bool:
    """Do the chunks ``ch`` (conv.Chunks) go channels last? Narrow output rows, long kernel
    rows (dilation 1, so a row's taps are neighbours), and chunks of several samples to share
    out among the threads: a lone sample's GEMM writes its NCHW output directly (conv.py), and
    runs on all threads or on skinny.py's kernel. Not 1x1 kernels: a run is then one pixel's
    channels, and the transposes cost more than the copy saves (ResNet-18's strided 1x1 layers
    ran 1.2-11x slower)."""
    c, kh, kw, dh, dw, ow = ch.geo[1], ch.geo[4], ch.geo[5], ch.geo[10], ch.geo[11], ch.geo[13]
    narrow = ow <= MAX_OW and kw * c >= MIN_RUN and (kh, kw) != (1, 1) and (dh, dw) == (1, 1)
    return narrow and ch.m > 1 and not ch.wide


# ----------------------------------------------------------------------------- kernels
@numba.njit(**JIT)
def _transpose(x, m, A, B, out):
    """(m, A, B) -> (m, B, A), flat: NCHW <-> NHWC of a chunk. The writes go in order, the
    reads gather (1.5x faster than the other way round on LeNet's four shapes: 15-24 µs
    against 25-38 a 17-sample chunk; 16- and 32-square tiles were no faster than in order)."""
    for n in range(m):
        base = uint64(n * A * B)
        for b in range(B):
            dst = base + uint64(b * A)
            for a in range(A):
                out[dst + uint64(a)] = x[base + uint64(a * B + b)]


@numba.njit(**JIT)
def _im2col(xh, m, H, W, C, KH, KW, sh, sw, ph, pw, OH, OW, cols):
    """Columns of ``xh`` (m, H, W, C): per output pixel, KH runs of KW*C values (zeros where a
    run reaches into the padding)."""
    run = KW * C
    zero = cols.dtype.type(0)
    for n in range(m):
        for oh in range(OH):
            for ow in range(OW):
                row = uint64(((n * OH + oh) * OW + ow) * KH * run)
                x0 = ow * sw - pw
                lo = max(0, -x0)
                hi = max(lo, min(KW, W - x0))
                for kh in range(KH):
                    d = row + uint64(kh * run)
                    y = oh * sh + kh - ph
                    if y < 0 or y >= H:
                        for j in range(uint64(run)):
                            cols[d + j] = zero
                        continue
                    for j in range(uint64(lo * C)):
                        cols[d + j] = zero
                    s = uint64(((n * H + y) * W + x0 + lo) * C)
                    dd = d + uint64(lo * C)
                    for j in range(uint64((hi - lo) * C)):
                        cols[dd + j] = xh[s + j]
                    for j in range(uint64(hi * C), uint64(run)):
                        cols[d + j] = zero


@numba.njit(**JIT)
def _col2im(cols, m, H, W, C, KH, KW, sh, sw, ph, pw, OH, OW, out):
    """The adjoint of _im2col: each column value added back into ``out`` (m, H, W, C)."""
    run = KW * C
    for i in range(uint64(m * H * W * C)):
        out[i] = 0
    for n in range(m):
        for oh in range(OH):
            for ow in range(OW):
                row = uint64(((n * OH + oh) * OW + ow) * KH * run)
                x0 = ow * sw - pw
                lo = max(0, -x0)
                hi = max(lo, min(KW, W - x0))
                for kh in range(KH):
                    y = oh * sh + kh - ph
                    if y < 0 or y >= H:
                        continue
                    s = row + uint64(kh * run + lo * C)
                    d = uint64(((n * H + y) * W + x0 + lo) * C)
                    for j in range(uint64((hi - lo) * C)):
                        out[d + j] += cols[s + j]


# ----------------------------------------------------------------------------- the chunks
def _columns(ch, x, n0, m):
    """This thread's channels-last columns (m*P, KH*KW*C) of samples n0 .. n0+m-1 of NCHW ``x``."""
    _, c, h, w = x.shape
    xh = ch.buffer("cl_x", m * h * w * c)
    _transpose(x[n0 : n0 + m].reshape(-1), m, c, h * w, xh)
    cols = ch.buffer("cl_cols", m * ch.p * ch.ckk)
    _im2col(xh, m, h, w, c, *ch.geo[4:10], *ch.geo[12:], cols)
    return cols.reshape(m * ch.p, ch.ckk)


def _pixel_major(ch, g, n0, m):
    """Samples n0 .. n0+m-1 of NCHW ``g`` (N, O, OH, OW) as (m*P, O)."""
    gp = ch.buffer("cl_g", m * ch.p * ch.o)
    _transpose(g[n0 : n0 + m].reshape(-1), m, ch.o, ch.p, gp)
    return gp.reshape(m * ch.p, ch.o)


def conv2d(ch, x, w, epilogue=None):
    """conv.conv2d_cols for chunks that :func:`takes`; ``epilogue`` on each chunk's samples."""
    o, p = ch.o, ch.p
    w = np.ascontiguousarray(w)
    wc = np.empty((ch.ckk, o), w.dtype)  # (KH*KW*C, O): the weights tap-major, channels last
    taps = w.shape[2] * w.shape[3]
    launch.run(launch.for_work(_retile, w.size), w.size, w.reshape(-1), taps, w.shape[1], o, wc.reshape(-1), True)
    out = np.empty((ch.n, o, ch.geo[-2], ch.geo[-1]), x.dtype)

    def work(n0, m):
        y = ch.buffer("cl_y", m * p * o).reshape(m * p, o)
        np.matmul(_columns(ch, x, n0, m), wc, out=y)
        _transpose(y.reshape(-1), m, p, o, out[n0 : n0 + m].reshape(-1))
        if epilogue is not None:
            epilogue(out, n0, n0 + m, 0, o, 0, p)

    ch.run(work)
    return out


def conv2d_grad_weight(ch, x, g, weight_shape):
    """conv.conv2d_grad_weight_cols for chunks that :func:`takes`: one partial dWᵀ per thread,
    then dWᵀ (KH*KW*C, O) laid out as the weights (O, C, KH, KW) by :func:`_retile`."""
    dwt = ch.summed(lambda n0, m: _columns(ch, x, n0, m).T @ _pixel_major(ch, g, n0, m))
    o, c, kh, kw = weight_shape
    dw = np.empty(weight_shape, dwt.dtype)
    dwt = np.ascontiguousarray(dwt)
    launch.run(launch.for_work(_retile, dwt.size), dwt.size, dwt.reshape(-1), kh * kw, c, o, dw.reshape(-1), False)
    return dw


#: Output channels a task of :func:`_retile` takes: a cache line of each row of the (T*C, O) side.
TAPS_O = 16


@numba.njit(parallel=True, **JIT)
def _retile(src, T, C, O, out, tap_major):
    """Weights between their layout (O, C, T) and the channels-last products' (T*C, O), flat:
    ``tap_major`` makes ``out`` (T*C, O) from ``src`` (O, C, T) (the forward's weights), else
    ``out`` (O, C, T) from ``src`` (T*C, O) (a weight gradient). A task per TAPS_O output
    channels touches a cache line of every (T*C, O) row and each (O, C, T) row in order; NumPy's
    strided copies took 3.9 and 7.9 ms for ResNet-18's 512 x 256 x 3 x 3 on one thread."""
    for b in prange((O + TAPS_O - 1) // TAPS_O):
        o0, o1 = b * TAPS_O, min(O, (b + 1) * TAPS_O)
        for c in range(C):
            for t in range(T):
                row = uint64((t * C + c) * O)
                for o in range(o0, o1):
                    at = uint64((o * C + c) * T + t)
                    if tap_major:
                        out[row + o] = src[at]
                    else:
                        out[at] = src[row + o]


def conv2d_grad_input(ch, g, w, input_shape):
    """conv.conv2d_grad_input_cols for chunks that :func:`takes`."""
    _, c, h, wd = input_shape
    wr = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(ch.o, ch.ckk)
    dx = np.empty(input_shape, g.dtype)

    def work(n0, m):
        cols = ch.buffer("cl_cols", m * ch.p * ch.ckk).reshape(m * ch.p, ch.ckk)
        np.matmul(_pixel_major(ch, g, n0, m), wr, out=cols)
        dxh = ch.buffer("cl_x", m * h * wd * c)
        _col2im(cols.reshape(-1), m, h, wd, c, *ch.geo[4:10], *ch.geo[12:], dxh)
        _transpose(dxh, m, h * wd, c, dx[n0 : n0 + m].reshape(-1))

    ch.run(work)
    return dx
