"""``max_pool2d`` and ``max_pool2d_backward``: one task per (N*C) plane. Kernel 2, stride 2 (most
pools) runs on explicit vectors, a block of windows from two row loads; its backward recomputes
each window's first maximum (reading x again costs what reading saved indices would) and writes
every cell of the input gradient once. Other geometries without dilation (ResNet's 3x3, stride 2)
take the max over each window's rows on whole input rows, then over its columns; with dilation,
each output row is built kernel position by kernel position, so neighbouring windows are
independent work instead of a chain of compares. Their backward zeroes the plane and adds each
gradient at its window's first maximum."""

from __future__ import annotations

import functools
import time

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types, uint64
from numba.core.errors import TypingError
from numba.extending import intrinsic

from .. import launch
from ..blas import awake, on_demand
from .common import FLOATS, JIT, _reference


@numba.njit(**JIT)
def _column_ranges(W, OW, KW, SW, PW, DW):
    """For each kernel column b: the range [lo, hi) of output columns j whose cell
    ``j * SW - PW + b * DW`` is inside the plane (the same for every row: computed once)."""
    lo, hi = np.empty(KW, np.int64), np.empty(KW, np.int64)
    for b in range(KW):
        off = b * DW - PW
        lo[b] = min(max(0, -(off // SW)), OW)
        hi[b] = max(min(OW, (W - 1 - off) // SW + 1), lo[b])
    return lo, hi


@numba.njit(inline="always", **JIT)
def _pool_row(x, base, H, W, top, OW, KH, KW, SW, PW, DH, DW, lo, hi, best, bo, arg, track):
    """One row of max-pool outputs, the windows whose top row is ``top``, in the plane at
    ``base``: ``best[bo + j]`` gets window j's max and, if ``track``, ``arg[j]`` the kernel
    position (``a * KW + b``) it came from. The loops go kernel position by kernel position
    over the whole row, so consecutive j are independent (no chain of compares per window to
    wait on). Cells outside the plane (columns outside [lo[b], hi[b])) count as -inf; the
    first maximum wins and a later NaN replaces it (ember.fused.FUSED["max_pool2d"]'s choice, PyTorch's)."""
    for a in range(KH):
        r = top + a * DH
        inside = 0 <= r < H
        for b in range(KW):
            rb = base + r * W + b * DW - PW
            if a == 0 and b == 0:  # the first position sets every output
                for j in range(OW):
                    best[uint64(bo + j)] = x[uint64(rb + j * SW)] if inside and lo[0] <= j < hi[0] else -np.inf
                    if track:
                        arg[j] = 0
            elif inside:
                n = a * KW + b
                for j in range(lo[b], hi[b]):
                    v = x[uint64(rb + j * SW)]
                    q = uint64(bo + j)
                    m = best[q]
                    better = (v > m) | (v != v)
                    best[q] = v if better else m
                    if track:
                        # positions only grow: max() is the select, without the branch LLVM
                        # would emit for a conditional (it mispredicts half the time)
                        arg[j] = max(arg[j], n * better)


@numba.njit(parallel=True, **JIT)
def max_pool_planes(x, P, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, out):
    """out[p, i, j] = the max of window (i, j) of plane p of contiguous x (P, H, W)."""
    no_arg = np.empty(0, np.int64)
    lo, hi = _column_ranges(W, OW, KW, SW, PW, DW)
    for p in prange(P):
        for i in range(OH):
            _pool_row(
                x,
                p * H * W,
                H,
                W,
                i * SH - PH,
                OW,
                KH,
                KW,
                SW,
                PW,
                DH,
                DW,
                lo,
                hi,
                out,
                (p * OH + i) * OW,
                no_arg,
                False,
            )


@numba.njit(parallel=True, **JIT)
def max_pool_rows_planes(x, P, H, W, OH, OW, KH, KW, SH, SW, PH, PW, out):
    """``max_pool_planes`` without dilation, in two passes a row: the max over the window's
    rows, a contiguous (vectorized) pass over whole input rows, then over its columns, a few
    reads at stride SW from a row in L1, where the general kernel makes KH * KW strided passes
    over the plane. ResNet's stem pool (3x3, stride 2, 64 x 112 x 112) took 0.40x the time (0.95 -> 0.38 ms, one thread).
    At stride 2 the row of maxima is split into its even and odd columns first, so that each
    kernel column reads a straight run of one half (the stem's pool 0.35 -> 0.15 ms, one thread).
    A NaN stays once met; only which of two equal zeros wins may differ from the reference."""
    lo, hi = _column_ranges(W, OW, KW, SW, PW, 1)
    half = (W + 1) // 2
    for p in prange(P):
        row = np.empty(W, x.dtype)
        halves = np.empty(2 * half, x.dtype)  # [even columns | odd columns] of row, at SW == 2
        base = p * H * W
        for i in range(OH):
            r0, r1 = max(i * SH - PH, 0), min(i * SH - PH + KH, H)
            for j in range(uint64(W)):
                row[j] = x[uint64(base + r0 * W) + j] if r0 < r1 else -np.inf
            for r in range(r0 + 1, r1):
                src = uint64(base + r * W)
                for j in range(uint64(W)):
                    row[j] = _later(row[j], x[src + j])
            o = uint64((p * OH + i) * OW)
            for j in range(uint64(OW)):
                out[o + j] = -np.inf
            if SW == 2:
                for j in range(uint64(W // 2)):
                    halves[j] = row[uint64(2) * j]
                    halves[uint64(half) + j] = row[uint64(2) * j + uint64(1)]
                if W % 2:
                    halves[half - 1] = row[W - 1]
            for b in range(KW):
                off = b - PW
                if SW == 2:  # column 2j + off = 2(j + off // 2) + off % 2: a straight run of one half
                    at, src = o + uint64(lo[b]), uint64((off % 2) * half + off // 2 + lo[b])
                    for j in range(uint64(hi[b] - lo[b])):
                        out[at + j] = _later(out[at + j], halves[src + j])
                    continue
                for j in range(lo[b], hi[b]):
                    q = o + uint64(j)
                    out[q] = _later(out[q], row[uint64(j * SW + off)])


@numba.njit(parallel=True, **JIT)
def max_pool_backward_planes(x, g, P, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, dx):
    """dx[p] = each g[p, i, j] added at the first maximum of window (i, j) of plane p, in
    order (the reference's scatter-add; a maximum in the padding takes nothing); one task per
    plane, so no two tasks write one cell."""
    rows, cols = np.empty(KH * KW, np.int64), np.empty(KH * KW, np.int64)  # kernel position -> offsets
    for n in range(KH * KW):
        rows[n], cols[n] = (n // KW) * DH, (n % KW) * DW
    lo, hi = _column_ranges(W, OW, KW, SW, PW, DW)
    for p in prange(P):
        best = np.empty(OW, x.dtype)
        arg = np.empty(OW, np.int64)
        base = p * H * W
        for k in range(H * W):
            dx[uint64(base + k)] = 0.0
        for i in range(OH):
            top = i * SH - PH
            _pool_row(x, base, H, W, top, OW, KH, KW, SW, PW, DH, DW, lo, hi, best, 0, arg, True)
            gb = (p * OH + i) * OW
            for j in range(OW):
                r = top + rows[arg[j]]
                c = j * SW - PW + cols[arg[j]]
                if 0 <= r < H and 0 <= c < W:
                    dx[uint64(base + r * W + c)] += g[uint64(gb + j)]


# The common pool -- kernel 2, stride 2, no padding or dilation -- as explicit vector code.
# LLVM vectorizes a row loop 16 windows a step, but a 26x26 map's rows have 13 windows and an
# 11x11 map's 5, so that loop never ran and every window went scalar (~1.5 ns each); numba
# has no vector types and runs no SLP vectorizer. So two intrinsics build a block of L
# windows from vectors: the pair of input rows as two loads of 2L values, split into the
# windows' four corners by shuffles, then compares and selects lane by lane, with no branch
# and no alias check. A row of up to BLOCK windows is one block of its own width, a kernel
# compiled per width (blocks of 8 on a 13-window row were 1.3x slower); a wider row takes
# blocks of BLOCK, the last one moved back to end at the row's end (it redoes a few windows,
# which store the same values again).
BLOCK = 16
#: Input rows ahead of a block that it prefetches (see _corners).
AHEAD = 16


def _vector_at(context, builder, arr_type, arr, index, n):
    """Pointer to ``<n x dtype>`` at ``arr[index]`` (any alignment) and the alignment to use."""
    data = context.make_array(arr_type)(context, builder, arr).data
    vector = ir.VectorType(context.get_data_type(arr_type.dtype), n)
    ptr = builder.bitcast(builder.gep(data, [index], inbounds=True), vector.as_pointer())
    return ptr, arr_type.dtype.bitwidth // 8


def _load(context, builder, arr_type, arr, index, n):
    ptr, align = _vector_at(context, builder, arr_type, arr, index, n)
    return builder.load(ptr, align=align)


def _store(context, builder, arr_type, arr, index, value):
    ptr, align = _vector_at(context, builder, arr_type, arr, index, value.type.count)
    builder.store(value, ptr, align=align)


def _shuffle(builder, a, b, lanes):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes))


def _wins(builder, later, best):
    """Per lane: does ``later`` replace ``best`` as the window's maximum (larger, or NaN)?"""
    return builder.or_(builder.fcmp_ordered(">", later, best), builder.fcmp_unordered("uno", later, later))


def _prefetch(context, builder, arr_type, arr, index, n):
    """Ask for the cache lines of ``arr[index:index + n]`` (a hint: it never faults, so it may
    point past the end)."""
    data = context.make_array(arr_type)(context, builder, arr).data
    byte = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = builder.module.globals.get("llvm.prefetch") or ir.Function(
        builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]), name="llvm.prefetch"
    )
    read, all_levels, data_cache = (ir.Constant(i32, v) for v in (0, 3, 1))
    lanes = 64 // (arr_type.dtype.bitwidth // 8)  # values a cache line
    for k in list(range(0, n, lanes)) + [n - 1]:
        at = builder.gep(data, [builder.add(index, ir.Constant(index.type, k))])
        builder.call(fn, [builder.bitcast(at, byte), read, all_levels, data_cache])


def _corners(context, builder, x_type, x, q0, q1, ahead, n):
    """(top left, top right, bottom left, bottom right) of n windows whose top row starts at
    ``x[q0]`` and bottom row at ``x[q1]``: two loads of 2n values, split even/odd. When a row
    of the block fills a cache line, the same cells ``ahead`` further are prefetched: on data
    from memory the hardware prefetcher fell behind these few wide loads (13-window rows 1.4x
    slower than the scalar loop they replace); on narrower rows it keeps up, and prefetching
    costs more than it saves."""
    if 2 * n * x_type.dtype.bitwidth >= 512:
        for q in (q0, q1):
            _prefetch(context, builder, x_type, x, builder.add(q, ahead), 2 * n)
    even, odd = list(range(0, 2 * n, 2)), list(range(1, 2 * n, 2))
    top, bottom = (_load(context, builder, x_type, x, q, 2 * n) for q in (q0, q1))
    return (
        _shuffle(builder, top, top, even),
        _shuffle(builder, top, top, odd),
        _shuffle(builder, bottom, bottom, even),
        _shuffle(builder, bottom, bottom, odd),
    )


def _block_size(L):
    if not isinstance(L, types.IntegerLiteral):
        raise TypingError(f"the block size must be a constant, not {L}")
    return L.literal_value


@intrinsic
def _pool_2x2_block(typingctx, x, q0, q1, ahead, out, o, L):
    """``out[o + j]`` = the max of window j (0 <= j < L) at ``x[q0 + 2j]``, ``x[q1 + 2j]``.
    Each row's maximum, then the two rows': the same first maximum, a later NaN replacing it,
    as comparing the four in row-major order (so the same bits)."""
    n = _block_size(L)

    def codegen(context, builder, signature, args):
        a, b, c, d = _corners(context, builder, signature.args[0], args[0], args[1], args[2], args[3], n)
        _, _, below, top, bottom = _first_max(builder, a, b, c, d)
        _store(context, builder, signature.args[4], args[4], args[5], builder.select(below, bottom, top))
        return context.get_dummy_value()

    return types.void(x, q0, q1, ahead, out, o, L), codegen


def _backward_block(relu):
    """The intrinsic for the input gradient of L windows: ``0 + g[o + j]`` at the maximum of
    window j (the cell the forward block takes), zero in its other three cells: both rows of
    dx, whole. With ``relu``, the gradient of ReLU before the pool too (the NumPy runner's
    relu_max_pool2d_backward rewrite): a window whose maximum is not above zero passes +0.0,
    decided in registers from the maximum the block finds anyway."""

    @intrinsic
    def block(typingctx, x, g, o, q0, q1, ahead, dx, L):
        return types.void(x, g, o, q0, q1, ahead, dx, L), functools.partial(_backward_codegen, relu, _block_size(L))

    return block


def _first_max(builder, a, b, c, d):
    """``(right, right_below, below, top, bottom)`` of windows with corners a b / c d: each
    row's maximum (``top``, ``bottom``) and whether its right cell holds it, then whether the
    bottom row's does: the first maximum in row-major order, a later NaN winning."""
    right, right_below = _wins(builder, b, a), _wins(builder, d, c)
    top, bottom = builder.select(right, b, a), builder.select(right_below, d, c)
    return right, right_below, _wins(builder, bottom, top), top, bottom


def _backward_codegen(relu, n, context, builder, signature, args):
    x_type, g_type, _, _, _, _, dx_type, _ = signature.args
    a, b, c, d = _corners(context, builder, x_type, args[0], args[3], args[4], args[5], n)
    right, right_below, below, top, bottom = _first_max(builder, a, b, c, d)
    zero = ir.Constant(a.type, None)
    # 0 + g, not g: the reference adds the gradient into zeros (a -0.0 becomes +0.0)
    grad = builder.fadd(_load(context, builder, g_type, args[1], args[2], n), zero)
    if relu:
        grad = builder.select(builder.fcmp_ordered(">", builder.select(below, bottom, top), zero), grad, zero)
    _store_cells(context, builder, dx_type, args[6], args[3], args[4], grad, below, right, right_below)
    return context.get_dummy_value()


def _store_cells(context, builder, dx_type, dx, q0, q1, grad, below, right, right_below):
    """Both rows of n windows' cells in ``dx`` (top row at ``q0``, bottom at ``q1``): ``grad``
    in the cell each window's maximum is in (the bottom row when ``below``; then the right
    column when ``right_below``, else when ``right``), zero in the other three."""
    zero = ir.Constant(grad.type, None)
    cells = (
        builder.select(builder.or_(below, right), zero, grad),
        builder.select(right, builder.select(below, zero, grad), zero),
        builder.select(below, builder.select(right_below, zero, grad), zero),
        builder.select(builder.and_(below, right_below), grad, zero),
    )
    n = grad.type.count
    interleave = [k for j in range(n) for k in (j, n + j)]
    _store(context, builder, dx_type, dx, q0, _shuffle(builder, cells[0], cells[1], interleave))
    _store(context, builder, dx_type, dx, q1, _shuffle(builder, cells[2], cells[3], interleave))


_pool_2x2_backward_block = _backward_block(False)
_pool_2x2_relu_backward_block = _backward_block(True)


@numba.njit(inline="always", **JIT)
def _later(best, v):
    """max(best, v) where v comes later in the window: larger, or NaN, to win. Two selects,
    not one on ``(v > best) | (v != v)``: LLVM vectorized that one poorly, and the stem's pool
    (3x3, stride 2, 64 x 112 x 112) took 1.4 ms on one thread against 0.4 (AVX2, Zen 3)."""
    larger = v if v > best else best
    return larger if v == v else v


@numba.njit(inline="always", **JIT)
def _zero_past_windows(dx, r0, w, OW, zero):
    """Zero the cells of a pair of rows (at ``dx[r0]``, ``w`` wide) right of the last of their
    OW 2x2 windows: an odd width's last column. With OW 0 and one "row" of the remaining
    length, an odd height's last row."""
    for c in range(uint64(2 * OW), w):
        dx[r0 + c] = zero
        if OW:
            dx[r0 + w + c] = zero


_POOL_2X2: dict = {}


def _pool_2x2_kernels(L):
    """(forward, backward) plane kernels whose rows are covered by blocks of L windows; L is
    a constant of the compiled code (the intrinsics' vector width), so one pair per L."""
    kernels = _POOL_2X2.get(L)
    if kernels is not None:
        return kernels

    # Index arithmetic stays in uint64: numba makes uint64 + int64 a float64 (4x slower).
    @numba.njit(parallel=True, **JIT)
    def forward(x, P, H, W, OH, OW, out, pos, positions):
        w, ahead, last = uint64(W), uint64(AHEAD * W), uint64(OW - L)
        for p in prange(P):
            base, ob = uint64(p * H * W), uint64(p * OH * OW)
            for i in range(OH):
                r0, o = base + uint64(2 * i) * w, ob + uint64(i * OW)
                for j0 in range(0, OW, L):  # one block, unless the row is wider than BLOCK
                    j = min(uint64(j0), last)
                    q = r0 + uint64(2) * j
                    if positions:
                        _pool_2x2_positions_block(x, q, q + w, ahead, out, pos, o + j, L)
                    elif L == 1:  # one-lane vectors compile to 4x slower code
                        one = uint64(1)
                        out[o + j] = _later(_later(_later(x[q], x[q + one]), x[q + w]), x[q + w + one])
                    else:
                        _pool_2x2_block(x, q, q + w, ahead, out, o + j, L)

    @numba.njit(parallel=True, **JIT)
    def backward(x, g, P, H, W, OH, OW, dx, relu, best, pos, positions):
        w, ahead, last = uint64(W), uint64(AHEAD * W), uint64(OW - L)
        zero = dx.dtype.type(0)
        for p in prange(P):
            base, gb = uint64(p * H * W), uint64(p * OH * OW)
            for i in range(OH):
                r0, o = base + uint64(2 * i) * w, gb + uint64(i * OW)
                for j0 in range(0, OW, L):
                    j = min(uint64(j0), last)
                    q = r0 + uint64(2) * j
                    if positions:
                        _unpool_2x2_block(g, best, pos, o + j, q, q + w, dx, L)
                    elif relu:
                        _pool_2x2_relu_backward_block(x, g, o + j, q, q + w, ahead, dx, L)
                    else:
                        _pool_2x2_backward_block(x, g, o + j, q, q + w, ahead, dx, L)
                _zero_past_windows(dx, r0, w, OW, zero)
            _zero_past_windows(dx, base + uint64(2 * OH) * w, uint64(H - 2 * OH) * w, 0, zero)

    kernels = _POOL_2X2[L] = (forward, backward)
    return kernels


@intrinsic
def _pool_2x2_positions_block(typingctx, x, q0, q1, ahead, out, pos, o, L):
    """:func:`_pool_2x2_block`, and ``pos[o + j]`` (int8) = the position of window j's first
    maximum, 0-3 row by row: the cell the backward block takes."""
    n = _block_size(L)

    def codegen(context, builder, signature, args):
        a, b, c, d = _corners(context, builder, signature.args[0], args[0], args[1], args[2], args[3], n)
        right, right_below, below, top, bottom = _first_max(builder, a, b, c, d)
        _store(context, builder, signature.args[4], args[4], args[6], builder.select(below, bottom, top))
        bytes_ = ir.VectorType(ir.IntType(8), n)
        row = builder.shl(builder.zext(below, bytes_), ir.Constant(bytes_, [1] * n))
        column = builder.zext(builder.select(below, right_below, right), bytes_)
        _store(context, builder, signature.args[5], args[5], args[6], builder.or_(row, column))
        return context.get_dummy_value()

    return types.void(x, q0, q1, ahead, out, pos, o, L), codegen


@intrinsic
def _unpool_2x2_block(typingctx, g, best, pos, o, q0, q1, dx, L):
    """Both rows of dx for L windows from the pooled arrays alone: ``0 + g[o + j]`` at
    position ``pos[o + j]`` of window j where ReLU passes it (``best[o + j] > 0``), +0.0 in
    its other cells: the ReLU + pool backward block's values, without the layer's output."""
    n = _block_size(L)

    def codegen(context, builder, signature, args):
        g_type, best_type, pos_type, _, _, _, dx_type, _ = signature.args
        grad = _load(context, builder, g_type, args[0], args[3], n)
        zero = ir.Constant(grad.type, None)
        passes = builder.fcmp_ordered(">", _load(context, builder, best_type, args[1], args[3], n), zero)
        grad = builder.select(passes, builder.fadd(grad, zero), zero)  # 0 + g: a -0.0 becomes +0.0
        p = _load(context, builder, pos_type, args[2], args[3], n)
        bytes_ = p.type
        below = builder.icmp_unsigned("!=", builder.and_(p, ir.Constant(bytes_, [2] * n)), ir.Constant(bytes_, None))
        right = builder.icmp_unsigned("!=", builder.and_(p, ir.Constant(bytes_, [1] * n)), ir.Constant(bytes_, None))
        _store_cells(context, builder, dx_type, args[6], args[4], args[5], grad, below, right, right)
        return context.get_dummy_value()

    return types.void(g, best, pos, o, q0, q1, dx, L), codegen


_NO_POSITIONS = np.empty(0, np.int8)


def max_pool_2x2_planes(x, P, H, W, OH, OW, out):
    """out[p, i, j] = the max of window (i, j) of plane p of contiguous x (P, H, W), for
    kernel 2 and stride 2 without padding or dilation: the kernel for OW's block width."""
    _pool_2x2_kernels(min(OW, BLOCK))[0](x, P, H, W, OH, OW, out, _NO_POSITIONS, False)


def max_pool_2x2_backward_planes(x, g, P, H, W, OH, OW, dx, relu=False):
    """Its VJP: each window's gradient at its first maximum, zeros elsewhere -- every cell of
    dx written once (the windows do not overlap), with no separate zeroing pass. ``relu``:
    only the windows whose maximum is above zero pass theirs (see _backward_block)."""
    _pool_2x2_kernels(min(OW, BLOCK))[1](x, g, P, H, W, OH, OW, dx, relu, x, _NO_POSITIONS, False)


def _here(kernel):
    """``kernel`` (the pool's forward or backward) on the calling thread alone: for a chunk of
    a larger piece of work, on the thread that took it."""
    return launch.for_work(kernel, 0)


def relu_pool_2x2_backward_planes(x, g, P, H, W, OH, OW, dx):
    """:func:`max_pool_2x2_backward_planes` with ``relu``, on the calling thread alone."""
    _here(_pool_2x2_kernels(min(OW, BLOCK))[1])(x, g, P, H, W, OH, OW, dx, True, x, _NO_POSITIONS, False)


def pool_2x2_positions(x, P, H, W, OH, OW, out, pos):
    """:func:`max_pool_2x2_planes` of a ReLU's output (never NaN), and ``pos`` (int8) = each
    window's first maximum's position, 0-3 row by row; on the calling thread alone."""
    _here(_pool_2x2_kernels(min(OW, BLOCK))[0])(x, P, H, W, OH, OW, out, pos, True)


def unpool_2x2(g, best, pos, P, H, W, OH, OW, dx):
    """The ReLU + 2x2 pool backward's ``dx`` (P, H, W) from the pooled arrays alone: ``0 + g``
    at position ``pos`` of each window where ReLU passes it (``best > 0``), +0.0 elsewhere; on
    the calling thread alone."""
    _here(_pool_2x2_kernels(min(OW, BLOCK))[1])(g, g, P, H, W, OH, OW, dx, True, best, pos, True)


def _is_2x2(args) -> bool:
    """Kernel 2, stride 2, no padding, no dilation, no ceil_mode window past the edge."""
    _, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW = args
    return (KH, KW, SH, SW, PH, PW, DH, DW) == (2, 2, 2, 2, 0, 0, 1, 1) and 2 * OH <= H and 2 * OW <= W


def _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode):
    """(P, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW) for the plane kernels, or None where
    the reference should run (and raise its error)."""
    from ember.nn.functional import pool_geometry

    def pair(v):
        return (int(v), int(v)) if isinstance(v, (int, np.integer)) else tuple(int(a) for a in v)

    try:
        k, p, d = pair(kernel_size), pair(padding), pair(dilation)
        s = k if stride is None or stride == () else pair(stride)
    except (TypeError, ValueError):
        return None
    if (
        x.dtype not in FLOATS
        or x.ndim < 3
        or x.size == 0
        or any(len(v) != 2 for v in (k, s, p, d))
        or min(k + s + d) < 1
        or min(p) < 0
        or any(2 * pi > ki for pi, ki in zip(p, k))
    ):
        return None
    H, W = x.shape[-2:]
    (OH, _), (OW, _) = (pool_geometry(n, k[i], s[i], p[i], d[i], bool(ceil_mode)) for i, n in enumerate((H, W)))
    if OH <= 0 or OW <= 0:
        return None
    return (x.size // (H * W), H, W, OH, OW) + k + s + p + d


def max_pool2d(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    params = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    args = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode)
    if args is None or not launch.hot(("max_pool2d", x.shape, x.dtype.num) + args):
        return _reference("max_pool2d", x, **params)
    out = np.empty(x.shape[:-2] + args[3:5], x.dtype)
    if _is_2x2(args):
        kernel, args = max_pool_2x2_planes, args[:5]
    elif args[-2:] == (1, 1):  # no dilation: rows, then columns
        kernel, args = max_pool_rows_planes, args[:-2]
    else:
        kernel = max_pool_planes
    xs, outs = np.ascontiguousarray(x).reshape(-1), out.reshape(-1)
    if x.ndim == 4 and x.shape[0] == 1:
        _sample_planes(kernel, xs, args, outs)
    else:
        launch.run(kernel, x.size, xs, *args, outs)
    return out


#: One thread or all for one sample's pool (:func:`_sample_planes`), by measurement.
SAMPLE_THREADS = launch.ThreadChoice()


def _sample_planes(kernel, xs, args, outs):
    """``kernel(xs, *args, outs)`` (args: P, H, W, OH, OW, ...) for one sample's planes, as its
    one-thread twin on blocks of planes that the plugin's threads take on demand (blas.on_demand),
    as the batch-1 convolutions before and after it run. numba's own threads would have to be
    woken for it, and its parallel loop ends at a barrier that waits for each of them: on the
    2-core development machine, busy, the stem's pool forced onto two of them took 6.2 ms
    against 0.45 on one, where on_demand's caller never waits for a helper that has not started."""
    nt = launch.threads()
    if nt == 1 or xs.size < launch.PAR_MIN:
        launch.for_work(kernel, 0)(xs, *args, outs)
        return
    one, explore, st = SAMPLE_THREADS.choose((kernel, args), watch=True)
    planes, hw, ohw = args[0], args[1] * args[2], args[3] * args[4]
    blocks = 1 if one else min(planes, 2 * nt)
    e = [planes * i // blocks for i in range(blocks + 1)]
    twin = launch.for_work(kernel, 0)
    t0 = time.perf_counter()
    with awake():
        on_demand(
            blocks,
            nt,
            lambda i: twin(
                xs[e[i] * hw : e[i + 1] * hw], e[i + 1] - e[i], *args[1:], outs[e[i] * ohw : e[i + 1] * ohw]
            ),
        )
    SAMPLE_THREADS.record(st, one, explore, time.perf_counter() - t0)


def relu_max_pool_2x2_backward(grad, r, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """``where(r > 0, max_pool2d_backward(grad, r), 0)`` for a ReLU output ``r`` in one pass,
    for the 2x2 pools the vector kernel covers (None for others, and until the shapes are hot)."""
    args = _pool_args(r, kernel_size, stride, padding, dilation, ceil_mode)
    if (
        args is None
        or not _is_2x2(args)
        or grad.dtype != r.dtype
        or grad.shape != r.shape[:-2] + args[3:5]
        or not launch.hot(("relu_max_pool2d_backward", r.shape, r.dtype.num) + args)
    ):
        return None
    dx = np.empty(r.shape, r.dtype)
    xs, gs = np.ascontiguousarray(r).reshape(-1), np.ascontiguousarray(grad).reshape(-1)
    launch.run(max_pool_2x2_backward_planes, r.size, xs, gs, *args[:5], dx.reshape(-1), True)
    return dx


def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    params = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    args = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode)
    if (
        args is None
        or grad.dtype != x.dtype
        or grad.shape != x.shape[:-2] + args[3:5]
        or not launch.hot(("max_pool2d_backward", x.shape, x.dtype.num) + args)
    ):
        return _reference("max_pool2d_backward", grad, x, **params)
    dx = np.empty(x.shape, x.dtype)
    xs, gs = np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(grad).reshape(-1)
    if _is_2x2(args):
        launch.run(max_pool_2x2_backward_planes, x.size, xs, gs, *args[:5], dx.reshape(-1), False)
    else:
        launch.run(max_pool_backward_planes, x.size, xs, gs, *args, dx.reshape(-1))
    return dx
