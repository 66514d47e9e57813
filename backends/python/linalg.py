"""Matrix products and convolutions of the pure-Python backend.

Everything is a list of dot products of row lists: ``math.sumprod`` where Python has it (3.12+,
so Pyodide), else ``sum(map(mul, row, col))``; both run the inner loop in C. Columns are
strided slices (``data[j::n]``); a convolution is im2col rows (one :func:`gather`) times the
weight rows, and its input gradient scatters the product back (col2im).
"""

from __future__ import annotations

import math
from array import array
from operator import and_, mul

from ember import dtypes as D
from ember.primitives import broadcast_shapes

from .buffer import PyBuffer, fix, prod
from .layout import broadcast_strides, gather, gather_index, pad_data, scatter_add

_sumprod = getattr(math, "sumprod", None)


def dots(rows, cols, dtype) -> list:
    """``[dot(r, c) for r in rows for c in cols]``: a row-major (len(rows), len(cols)) block."""
    if dtype is D.bool_:
        return [any(map(and_, r, c)) for r in rows for c in cols]
    if rows and not rows[0]:  # k == 0: empty sums
        return [0.0 if dtype.kind == "f" else 0] * (len(rows) * len(cols))
    if _sumprod is not None:
        return [_sumprod(r, c) for r in rows for c in cols]
    return [sum(map(mul, r, c)) for r in rows for c in cols]


def _pack(values):
    return array("d", values).tolist()


def _split(flat, n):
    return [flat[i : i + n] for i in range(0, len(flat), n)]


def matmul(a, b):
    sa, sb = a.shape, b.shape
    (m, k), n = sa[-2:], sb[-1]
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    # Which batch of a and of b feeds each output batch (broadcasting the batch dims).
    ia = gather(list(range(prod(sa[:-2]))), batch, broadcast_strides(sa[:-2], batch)) if batch else [0]
    ib = gather(list(range(prod(sb[:-2]))), batch, broadcast_strides(sb[:-2], batch)) if batch else [0]
    # b = w.T (a pending permute of the last two dims): w's rows are b's columns, for free.
    nd = len(sb)
    tsrc = None
    if b.view is not None and b.view[1] == tuple(range(nd - 2)) + (nd - 1, nd - 2):
        tsrc = b.view[0].data
    # A strided column (or a row of a pending a.T) points at float objects scattered over the
    # heap; when it is read many times, fresh copies laid out one after another make the dot
    # products ~20% faster.
    floats = a.dtype.kind == "f"
    pack_rows = floats and a.view is not None and n >= 4
    pack_cols = floats and m >= 4
    ad = a.data
    bd = b.data if tsrc is None else None
    out = []
    for i, j in zip(ia, ib):
        oa, ob = i * m * k, j * k * n
        rows = [ad[oa + r * k : oa + r * k + k] for r in range(m)]
        if pack_rows:
            rows = list(map(_pack, rows))
        if tsrc is not None:
            cols = [tsrc[ob + c * k : ob + c * k + k] for c in range(n)]
        else:
            cols = [bd[ob + c : ob + k * n : n] for c in range(n)]
            if pack_cols:
                cols = list(map(_pack, cols))
        out += dots(rows, cols, a.dtype)
    return PyBuffer(fix(a.dtype, out), batch + (m, n), a.dtype)


# ----------------------------------------------------------------------------- convolution
def _padded(x, padding):
    n, c, h, w = x.shape
    ph, pw = padding
    if not (ph or pw):
        return x.data, h, w
    zero = 0.0 if x.dtype.kind == "f" else 0
    return pad_data(x.data, x.shape, ((0, 0), (0, 0), (ph, ph), (pw, pw)), zero), h + 2 * ph, w + 2 * pw


def _geometry(hp, wp, kh, kw, stride, dilation):
    (sh, sw), (dh, dw) = stride, dilation
    return (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1


def _im2col_view(n, c, hp, wp, cg, kh, kw, oh, ow, stride, dilation, group):
    """(N, OH, OW, Cg, KH, KW) view of the padded input: one im2col row per output pixel."""
    (sh, sw), (dh, dw) = stride, dilation
    return ((n, oh, ow, cg, kh, kw), (c * hp * wp, sh * wp, sw, hp * wp, dh * wp, dw), group * cg * hp * wp)


def conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    xd, hp, wp = _padded(x, padding)
    oh, ow = _geometry(hp, wp, kh, kw, stride, dilation)
    p, q, og = oh * ow, cg * kh * kw, o // groups
    wd = w.data
    per_group = []
    for gi in range(groups):
        view = _im2col_view(n, c, hp, wp, cg, kh, kw, oh, ow, stride, dilation, gi)
        per_group.append(
            (
                _split(gather(xd, *view), q) if q else [[] for _ in range(n * p)],
                _split(wd[gi * og * q : (gi + 1) * og * q], q) if q else [[] for _ in range(og)],
            )
        )
    out = []
    for b in range(n):
        for cols, wrows in per_group:
            out += dots(wrows, cols[b * p : (b + 1) * p], x.dtype)  # (og, p) for this sample
    return PyBuffer(fix(x.dtype, out), (n, o, oh, ow), x.dtype)


def conv2d_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c = x.shape[:2]
    o, cg, kh, kw = weight_shape
    xd, hp, wp = _padded(x, padding)
    oh, ow = g.shape[2:]
    p, og = oh * ow, o // groups
    (sh, sw), (dh, dw) = stride, dilation
    gd = g.data
    out = []
    for gi in range(groups):
        # rows of g: one per output channel, over (sample, pixel); rows of the transposed
        # im2col matrix: one per (channel, kernel position), over the same (sample, pixel).
        grows = _split(gather(gd, (og, n, p), (p, o * p, 1), gi * og * p), n * p) if n * p else [[]] * og
        xrows = (
            _split(
                gather(
                    xd, (cg, kh, kw, n, oh, ow), (hp * wp, dh * wp, dw, c * hp * wp, sh * wp, sw), gi * cg * hp * wp
                ),
                n * p,
            )
            if n * p
            else [[]] * (cg * kh * kw)
        )
        out += dots(grows, xrows, g.dtype)
    return PyBuffer(fix(g.dtype, out), tuple(weight_shape), g.dtype)


def conv2d_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd_ = input_shape
    o, cg, kh, kw = w.shape
    ph, pw = padding
    hp, wp = h + 2 * ph, wd_ + 2 * pw
    oh, ow = g.shape[2:]
    p, q, og = oh * ow, cg * kh * kw, o // groups
    zero = 0.0 if g.dtype.kind == "f" else 0
    out = [zero] * (n * c * hp * wp)
    gd, wdata = g.data, w.data
    for gi in range(groups):
        if not (n * p and q):
            continue
        # im2col gradient = (g as (N*P, Og)) @ (w as (Og, Q)); then col2im scatters it back.
        grows = _split(gather(gd, (n, p, og), (o * p, 1, p), gi * og * p), og) if og else [[]] * (n * p)
        wcols = [wdata[gi * og * q + j : (gi + 1) * og * q : q] for j in range(q)]
        cols = dots(grows, wcols, g.dtype)
        view = _im2col_view(n, c, hp, wp, cg, kh, kw, oh, ow, stride, dilation, gi)
        scatter_add(out, gather_index(*view), cols)
    if ph or pw:
        out = gather(out, (n, c, h, wd_), (c * hp * wp, hp * wp, wp, 1), ph * wp + pw)
    return PyBuffer(fix(g.dtype, out), tuple(input_shape), g.dtype)
