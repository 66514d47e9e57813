"""Fused ops (ember.fused): one kernel where the reference decomposition makes several passes.

* ``softmax``, ``log_softmax``, ``cross_entropy``, ``layer_norm`` and their backward ops: one
  task per row (the normalized dims flattened), reading the row two or three times while it
  is in cache, sums in float64; layer norm's weight and bias gradients one task per column;
* ``max_pool2d`` and ``max_pool2d_backward``: one task per (N*C) plane. Kernel 2, stride 2
  (most pools) runs on explicit vectors, a block of windows from two row loads; its backward
  recomputes each window's first maximum (reading x again costs what reading saved indices
  would) and writes every cell of the input gradient once. Other geometries build each
  output row kernel position by kernel position, so neighbouring windows are independent
  work instead of a chain of compares; their backward zeroes the plane and adds each
  gradient at its window's first maximum;
* ``batch_norm`` (training) and ``batch_norm_backward``: one task per channel (or a few
  neighbouring channels when a channel's runs are short), reading its N runs of H*W values;
  statistics and gradient sums in float64, the output and the input gradient one
  multiply-add per element;
* ``gelu``, ``gelu_backward`` and the optimizer steps ``sgd_step``, ``adam_step``,
  ``rmsprop_step``: elementwise programs (render.py) built from the same arithmetic as the
  references, operation for operation and rounded to the tensor's dtype at each step, so
  they agree with them to the last bit or so. The optimizer kernels write the new parameter and state into the buffers
  they were given (when those are writable and contiguous), which saves the optimizer's
  copy-back; hyperparameters are kernel arguments, so a learning-rate schedule compiles
  nothing new.

Each function takes the reference's arguments with buffers for tensors and falls back to the
reference (run on this backend through ember's Tensor ops) for what its kernel does not
cover: float16 and integer inputs, unusual shapes.

Each forward op is declared with its backward op, so ember.fused runs both in eager training
(one autodiff node per op); inference, evaluation and optimizer updates use the rest.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types, uint64
from numba.core.errors import TypingError
from numba.extending import intrinsic

from . import launch
from .render import Program

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
JIT = dict(cache=True, nogil=True, error_model="numpy")
REASSOC = {"reassoc"}        # lets LLVM vectorize a float64 sum of float32 values (it reorders the additions)


def _reference(name, *args, **params):
    """Run the reference decomposition of fused op ``name`` on buffers of this backend."""
    import ember
    from ember import dispatch
    from ember.conformance import fused_ops
    backend = ember.get_backend("numba")
    wrapped = [dispatch.wrap(a, backend) if isinstance(a, np.ndarray) else a for a in args]
    with ember.no_grad():
        out = fused_ops()[name](*wrapped, **params)
    if isinstance(out, tuple):
        return tuple(None if t is None else t._data for t in out)
    return out._data


# ============================================================================ row kernels
@numba.njit(inline="always", **JIT)
def _row_max_sumexp(x, base, c_n):
    """(max, sum of exp(x - max)) of one row; NaN wins the max so it propagates."""
    m = x[base]
    for c in range(c_n):
        v = x[base + c]
        if v > m or v != v:
            m = v
    s = 0.0
    for c in range(c_n):
        s += math.exp(x[base + c] - m)
    return m, s


@numba.njit(inline="always", **JIT)
def _row_mean_rstd(x, base, c_n, C, eps):
    """(mean, 1 / sqrt(biased variance + eps)) of one row, two passes (as the reference)."""
    s = 0.0
    for c in range(c_n):
        s += x[base + c]
    mean = s / C
    q = 0.0
    for c in range(c_n):
        d = x[base + c] - mean
        q += d * d
    return mean, 1.0 / math.sqrt(q / C + eps)


@numba.njit(parallel=True, **JIT)
def softmax_rows(x, R, C, log, out):
    """Softmax (or log-softmax) of each row of a contiguous (R, C) x, shifted by its max."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        m, s = _row_max_sumexp(x, base, c_n)
        if log:
            ls = math.log(s)
            for c in range(c_n):
                out[base + c] = (x[base + c] - m) - ls
        else:
            for c in range(c_n):
                out[base + c] = math.exp(x[base + c] - m) / s


@numba.njit(parallel=True, **JIT)
def cross_entropy_rows(x, target, R, C, ignore, losses):
    """losses[r] = logsumexp(x[r]) - x[r, target[r]], or 0 where target[r] == ignore."""
    c_n = uint64(C)
    for r in prange(R):
        if target[r] == ignore:
            losses[r] = 0.0
            continue
        base = uint64(r * C)
        m, s = _row_max_sumexp(x, base, c_n)
        losses[r] = (m + math.log(s)) - x[base + uint64(target[r])]


@numba.njit(parallel=True, **JIT)
def layer_norm_rows(x, w, b, R, C, eps, has_w, has_b, out):
    """Each row normalized by its mean and biased variance, then scaled and shifted."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        mean, rstd = _row_mean_rstd(x, base, c_n, C, eps)
        for c in range(c_n):
            v = (x[base + c] - mean) * rstd
            if has_w:
                v = v * w[c]
            if has_b:
                v = v + b[c]
            out[base + c] = v


@numba.njit(parallel=True, **JIT)
def softmax_backward_rows(y, g, R, C, log, out):
    """The VJP of softmax (``y * (g - sum(g * y))``) or log-softmax (``g - exp(y) * sum(g)``)
    from its output ``y``, row by row."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        s = 0.0
        if log:
            for c in range(c_n):
                s += g[base + c]
            for c in range(c_n):
                out[base + c] = g[base + c] - math.exp(y[base + c]) * s
        else:
            for c in range(c_n):
                s += g[base + c] * y[base + c]
            for c in range(c_n):
                out[base + c] = y[base + c] * (g[base + c] - s)


@numba.njit(parallel=True, **JIT)
def cross_entropy_backward_rows(x, target, R, C, ignore, scale, out):
    """out[r] = (softmax(x[r]) - one_hot(target[r])) * scale; zero where target[r] == ignore."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        t = target[r]
        if t == ignore:
            for c in range(c_n):
                out[base + c] = 0.0
            continue
        m, s = _row_max_sumexp(x, base, c_n)
        for c in range(c_n):
            out[base + c] = math.exp(x[base + c] - m) / s * scale
        if 0 <= t < C:               # the reference's one-hot has no 1 for a target out of range
            k = base + uint64(t)
            out[k] = (math.exp(x[k] - m) / s - 1.0) * scale


@numba.njit(parallel=True, **JIT)
def layer_norm_backward_rows(x, w, g, R, C, eps, has_w, dx, mean, rstd):
    """dx of each row (``rstd * (gw - mean(gw) - xhat * mean(gw * xhat))``, gw = g * w); keeps
    each row's mean and 1/std for the parameters' column sums."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        mu, rs = _row_mean_rstd(x, base, c_n, C, eps)
        a = 0.0
        b = 0.0
        for c in range(c_n):
            gw = g[base + c] * w[c] if has_w else g[base + c]
            a += gw
            b += gw * ((x[base + c] - mu) * rs)
        a /= C
        b /= C
        for c in range(c_n):
            gw = g[base + c] * w[c] if has_w else g[base + c]
            dx[base + c] = (gw - a - (x[base + c] - mu) * rs * b) * rs
        mean[r] = mu
        rstd[r] = rs


@numba.njit(parallel=True, **JIT)
def layer_norm_param_grads(x, g, R, C, mean, rstd, dw, db):
    """Column sums over the rows: dw = sum(g * xhat), db = sum(g)."""
    for c in prange(C):
        a = 0.0
        b = 0.0
        for r in range(R):
            i = r * C + c
            a += g[i] * ((x[i] - mean[r]) * rstd[r])
            b += g[i]
        dw[c] = a
        db[c] = b


def _rows(x, dim):
    """x with ``dim`` moved last, contiguous, as (R, C); and how to put a result back."""
    dim %= max(x.ndim, 1)
    moved = np.moveaxis(x, dim, -1) if x.ndim else x.reshape(1)
    rows = np.ascontiguousarray(moved)
    C = rows.shape[-1] if rows.ndim else 1
    shape = rows.shape

    def back(flat):
        y = flat.reshape(shape)
        return np.ascontiguousarray(np.moveaxis(y, -1, dim)) if x.ndim else y.reshape(())
    return rows.reshape(-1, C) if C else rows.reshape(0, 0), back


def _dim_ok(dim, ndim):
    return isinstance(dim, int) and -max(ndim, 1) <= dim < max(ndim, 1)


def _softmax_like(name, log):
    def impl(x, *, dim=-1):
        if x.dtype not in FLOATS or x.size == 0 or not _dim_ok(dim, x.ndim) \
                or not launch.hot((name, x.shape, x.dtype.num, dim)):
            return _reference(name, x, dim=dim)
        rows, back = _rows(x, dim)
        out = np.empty_like(rows)
        launch.run(softmax_rows, rows.size, rows.reshape(-1), rows.shape[0], rows.shape[1], log, out.reshape(-1))
        return back(out)
    impl.__name__ = f"numba_{name}"
    return impl


def _softmax_backward_like(name, log):
    def impl(grad, out, *, dim=-1):
        if out.dtype not in FLOATS or grad.dtype != out.dtype or grad.shape != out.shape or out.size == 0 \
                or not _dim_ok(dim, out.ndim) or not launch.hot((name, out.shape, out.dtype.num, dim)):
            return _reference(name, grad, out, dim=dim)
        ys, back = _rows(out, dim)
        gs, _ = _rows(grad, dim)
        res = np.empty_like(ys)
        launch.run(softmax_backward_rows, ys.size, ys.reshape(-1), gs.reshape(-1), ys.shape[0], ys.shape[1], log,
                   res.reshape(-1))
        return back(res)
    impl.__name__ = f"numba_{name}"
    return impl


def _ce_ok(name, logits, target):
    return logits.dtype in FLOATS and logits.ndim == 2 and target.shape == logits.shape[:1] \
        and target.dtype.kind in "iu" and logits.shape[0] > 0 and logits.shape[1] > 0 \
        and launch.hot((name, logits.shape, logits.dtype.num))


def cross_entropy(logits, target, *, ignore_index=-100):
    if not _ce_ok("cross_entropy", logits, target):
        return _reference("cross_entropy", logits, target, ignore_index=ignore_index)
    R, C = logits.shape
    t = np.ascontiguousarray(target, dtype=np.int64)
    counted = t != ignore_index
    n = int(counted.sum())
    if n and (t.min(where=counted, initial=0) < 0 or t.max(where=counted, initial=0) >= C):
        return _reference("cross_entropy", logits, target, ignore_index=ignore_index)   # its error names it
    losses = np.empty(R, np.float64)
    launch.run(cross_entropy_rows, logits.size, np.ascontiguousarray(logits).reshape(-1), t, R, C, ignore_index,
               losses)
    return np.asarray(losses.sum() / n if n else np.nan, dtype=logits.dtype)


def cross_entropy_backward(grad, logits, target, *, ignore_index=-100):
    if grad.dtype != logits.dtype or grad.size != 1 or not _ce_ok("cross_entropy_backward", logits, target):
        return _reference("cross_entropy_backward", grad, logits, target, ignore_index=ignore_index)
    R, C = logits.shape
    t = np.ascontiguousarray(target, dtype=np.int64)
    scale = float(grad.reshape(())) / max(int((t != ignore_index).sum()), 1)
    out = np.empty((R, C), logits.dtype)
    launch.run(cross_entropy_backward_rows, logits.size, np.ascontiguousarray(logits).reshape(-1), t, R, C,
               ignore_index, scale, out.reshape(-1))
    return out


def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    ok = x.dtype in FLOATS and x.size > 0 and k <= x.ndim and tuple(x.shape[x.ndim - k:]) == normalized_shape \
        and all(p is None or (p.dtype == x.dtype and tuple(p.shape) == normalized_shape) for p in (weight, bias))
    if not ok or not launch.hot(("layer_norm", x.shape, x.dtype.num, normalized_shape)):
        return _reference("layer_norm", x, weight, bias, normalized_shape=normalized_shape, eps=eps)
    C = math.prod(normalized_shape)
    rows = np.ascontiguousarray(x).reshape(-1, C)
    out = np.empty_like(rows)
    dummy = np.zeros(1, x.dtype)
    w = dummy if weight is None else np.ascontiguousarray(weight).reshape(-1)
    b = dummy if bias is None else np.ascontiguousarray(bias).reshape(-1)
    launch.run(layer_norm_rows, rows.size, rows.reshape(-1), w, b, rows.shape[0], C, float(eps),
               weight is not None, bias is not None, out.reshape(-1))
    return out.reshape(x.shape)


def layer_norm_backward(grad, x, weight, bias, *, normalized_shape, eps=1e-5):
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    ok = x.dtype in FLOATS and x.size > 0 and k <= x.ndim and tuple(x.shape[x.ndim - k:]) == normalized_shape \
        and grad.dtype == x.dtype and grad.shape == x.shape \
        and all(p is None or (p.dtype == x.dtype and tuple(p.shape) == normalized_shape) for p in (weight, bias))
    if not ok or not launch.hot(("layer_norm_backward", x.shape, x.dtype.num, normalized_shape)):
        return _reference("layer_norm_backward", grad, x, weight, bias, normalized_shape=normalized_shape, eps=eps)
    C = math.prod(normalized_shape)
    rows = np.ascontiguousarray(x).reshape(-1)
    g = np.ascontiguousarray(grad).reshape(-1)
    R = rows.size // C
    w = np.zeros(1, x.dtype) if weight is None else np.ascontiguousarray(weight).reshape(-1)
    dx = np.empty(x.shape, x.dtype)
    mean, rstd = np.empty(R), np.empty(R)
    launch.run(layer_norm_backward_rows, rows.size, rows, w, g, R, C, float(eps), weight is not None,
               dx.reshape(-1), mean, rstd)
    if weight is None and bias is None:
        return dx, None, None
    dw, db = np.empty(C, x.dtype), np.empty(C, x.dtype)
    launch.run(layer_norm_param_grads, rows.size, rows, g, R, C, mean, rstd, dw, db)
    return (dx, None if weight is None else dw.reshape(normalized_shape),
            None if bias is None else db.reshape(normalized_shape))


# ============================================================================ pooling
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
            if a == 0 and b == 0:              # the first position sets every output
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
            _pool_row(x, p * H * W, H, W, i * SH - PH, OW, KH, KW, SW, PW, DH, DW, lo, hi, out, (p * OH + i) * OW,
                      no_arg, False)


@numba.njit(parallel=True, **JIT)
def max_pool_backward_planes(x, g, P, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, dx):
    """dx[p] = each g[p, i, j] added at the first maximum of window (i, j) of plane p, in
    order (the reference's scatter-add; a maximum in the padding takes nothing); one task per
    plane, so no two tasks write one cell."""
    rows, cols = np.empty(KH * KW, np.int64), np.empty(KH * KW, np.int64)     # kernel position -> offsets
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
        builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]), name="llvm.prefetch")
    read, all_levels, data_cache = (ir.Constant(i32, v) for v in (0, 3, 1))
    lanes = 64 // (arr_type.dtype.bitwidth // 8)            # values a cache line
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
    return (_shuffle(builder, top, top, even), _shuffle(builder, top, top, odd),
            _shuffle(builder, bottom, bottom, even), _shuffle(builder, bottom, bottom, odd))


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
        top, bottom = builder.select(_wins(builder, b, a), b, a), builder.select(_wins(builder, d, c), d, c)
        _store(context, builder, signature.args[4], args[4], args[5],
               builder.select(_wins(builder, bottom, top), bottom, top))
        return context.get_dummy_value()
    return types.void(x, q0, q1, ahead, out, o, L), codegen


@intrinsic
def _pool_2x2_backward_block(typingctx, x, g, o, q0, q1, ahead, dx, L):
    """The input gradient of L windows: ``0 + g[o + j]`` at the maximum of window j (the cell
    the forward block takes), zero in its other three cells: both rows of dx, whole."""
    n = _block_size(L)

    def codegen(context, builder, signature, args):
        x_type, g_type, _, _, _, _, dx_type, _ = signature.args
        a, b, c, d = _corners(context, builder, x_type, args[0], args[3], args[4], args[5], n)
        right, right_below = _wins(builder, b, a), _wins(builder, d, c)
        top, bottom = builder.select(right, b, a), builder.select(right_below, d, c)
        below = _wins(builder, bottom, top)
        zero = ir.Constant(a.type, None)
        # 0 + g, not g: the reference adds the gradient into zeros (a -0.0 becomes +0.0)
        grad = builder.fadd(_load(context, builder, g_type, args[1], args[2], n), zero)
        cells = (builder.select(builder.or_(below, right), zero, grad),
                 builder.select(right, builder.select(below, zero, grad), zero),
                 builder.select(below, builder.select(right_below, zero, grad), zero),
                 builder.select(builder.and_(below, right_below), grad, zero))
        interleave = [k for j in range(n) for k in (j, n + j)]
        _store(context, builder, dx_type, args[6], args[3], _shuffle(builder, cells[0], cells[1], interleave))
        _store(context, builder, dx_type, args[6], args[4], _shuffle(builder, cells[2], cells[3], interleave))
        return context.get_dummy_value()
    return types.void(x, g, o, q0, q1, ahead, dx, L), codegen


@numba.njit(inline="always", **JIT)
def _later(best, v):
    """max(best, v) where v comes later in the window: larger, or NaN, to win."""
    return v if (v > best) | (v != v) else best


_POOL_2X2: dict = {}


def _pool_2x2_kernels(L):
    """(forward, backward) plane kernels whose rows are covered by blocks of L windows; L is
    a constant of the compiled code (the intrinsics' vector width), so one pair per L."""
    kernels = _POOL_2X2.get(L)
    if kernels is not None:
        return kernels

    # Index arithmetic stays in uint64: numba makes uint64 + int64 a float64 (4x slower).
    @numba.njit(parallel=True, **JIT)
    def forward(x, P, H, W, OH, OW, out):
        w, ahead, last = uint64(W), uint64(AHEAD * W), uint64(OW - L)
        for p in prange(P):
            base, ob = uint64(p * H * W), uint64(p * OH * OW)
            for i in range(OH):
                r0, o = base + uint64(2 * i) * w, ob + uint64(i * OW)
                for j0 in range(0, OW, L):        # one block, unless the row is wider than BLOCK
                    j = min(uint64(j0), last)
                    q = r0 + uint64(2) * j
                    if L == 1:                    # one-lane vectors compile to 4x slower code
                        one = uint64(1)
                        out[o + j] = _later(_later(_later(x[q], x[q + one]), x[q + w]), x[q + w + one])
                    else:
                        _pool_2x2_block(x, q, q + w, ahead, out, o + j, L)

    @numba.njit(parallel=True, **JIT)
    def backward(x, g, P, H, W, OH, OW, dx):
        w, ahead, last = uint64(W), uint64(AHEAD * W), uint64(OW - L)
        zero = dx.dtype.type(0)
        for p in prange(P):
            base, gb = uint64(p * H * W), uint64(p * OH * OW)
            for i in range(OH):
                r0, o = base + uint64(2 * i) * w, gb + uint64(i * OW)
                for j0 in range(0, OW, L):
                    j = min(uint64(j0), last)
                    q = r0 + uint64(2) * j
                    _pool_2x2_backward_block(x, g, o + j, q, q + w, ahead, dx, L)
                for c in range(uint64(2 * OW), w):         # an odd width's last column
                    dx[r0 + c] = zero
                    dx[r0 + w + c] = zero
            for k in range(uint64(2 * OH) * w, uint64(H) * w):   # an odd height's last row
                dx[base + k] = zero

    kernels = _POOL_2X2[L] = (forward, backward)
    return kernels


def max_pool_2x2_planes(x, P, H, W, OH, OW, out):
    """out[p, i, j] = the max of window (i, j) of plane p of contiguous x (P, H, W), for
    kernel 2 and stride 2 without padding or dilation: the kernel for OW's block width."""
    _pool_2x2_kernels(min(OW, BLOCK))[0](x, P, H, W, OH, OW, out)


def max_pool_2x2_backward_planes(x, g, P, H, W, OH, OW, dx):
    """Its VJP: each window's gradient at its first maximum, zeros elsewhere -- every cell of
    dx written once (the windows do not overlap), with no separate zeroing pass."""
    _pool_2x2_kernels(min(OW, BLOCK))[1](x, g, P, H, W, OH, OW, dx)


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
    if x.dtype not in FLOATS or x.ndim < 3 or x.size == 0 or any(len(v) != 2 for v in (k, s, p, d)) \
            or min(k + s + d) < 1 or min(p) < 0 or any(2 * pi > ki for pi, ki in zip(p, k)):
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
        launch.run(max_pool_2x2_planes, x.size, np.ascontiguousarray(x).reshape(-1), *args[:5], out.reshape(-1))
    else:
        launch.run(max_pool_planes, x.size, np.ascontiguousarray(x).reshape(-1), *args, out.reshape(-1))
    return out


def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    params = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    args = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode)
    if args is None or grad.dtype != x.dtype or grad.shape != x.shape[:-2] + args[3:5] \
            or not launch.hot(("max_pool2d_backward", x.shape, x.dtype.num) + args):
        return _reference("max_pool2d_backward", grad, x, **params)
    dx = np.empty(x.shape, x.dtype)
    xs, gs = np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(grad).reshape(-1)
    if _is_2x2(args):
        launch.run(max_pool_2x2_backward_planes, x.size, xs, gs, *args[:5], dx.reshape(-1))
    else:
        launch.run(max_pool_backward_planes, x.size, xs, gs, *args, dx.reshape(-1))
    return dx


# ============================================================================ batch norm
@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def batch_norm_channels(x, w, b, N, C, L, G, eps, has_w, has_b, out, mean, var):
    """Batch norm of contiguous x (N, C, L), one task per G consecutive channels (G * L values
    in a row: a single channel's runs of a few values, C * L apart -- 32 KB for 512 4x4 maps --
    would fight over the same cache sets). Per channel: mean and biased variance in float64, two passes, the mean
    rounded to x's dtype before centering as the reference does; then
    ``(x - mean) / sqrt(var + eps) * w[c] + b[c]``."""
    l_n = uint64(L)
    count = N * L
    for t in prange((C + G - 1) // G):
        c0, c1 = t * G, min(C, (t + 1) * G)
        acc = np.zeros(c1 - c0)
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                s = 0.0
                for k in range(l_n):
                    s += x[base + k]
                acc[c - c0] += s
        for c in range(c0, c1):
            mean[c] = acc[c - c0] / count
            acc[c - c0] = 0.0
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                q = 0.0
                for k in range(l_n):
                    d = x[base + k] - m
                    q += d * d
                acc[c - c0] += q
        for c in range(c0, c1):
            var[c] = acc[c - c0] / count
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                scale = 1.0 / math.sqrt(acc[c - c0] / count + eps)
                if has_w:
                    scale = scale * w[c]
                shift = b[c] if has_b else 0.0
                for k in range(l_n):
                    out[base + k] = (x[base + k] - m) * scale + shift


@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def batch_norm_backward_channels(x, g, w, mean, var, N, C, L, G, eps, has_w, dx, dw, db):
    """Batch norm's gradients, tasks as in :func:`batch_norm_channels`: per channel
    ``sum(g)`` and ``sum(g * xhat)`` (float64), then ``dx = (gw - mean(gw) - xhat *
    mean(gw * xhat)) * rstd`` with gw = g * w[c], one multiply-add per element, and the
    weight and bias gradients (those two sums)."""
    l_n = uint64(L)
    count = N * L
    for t in prange((C + G - 1) // G):
        c0, c1 = t * G, min(C, (t + 1) * G)
        sg, sgx = np.zeros(c1 - c0), np.zeros(c1 - c0)
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                a = 0.0
                bb = 0.0
                for k in range(l_n):
                    gi = g[base + k]
                    a += gi
                    bb += gi * (x[base + k] - m)
                sg[c - c0] += a
                sgx[c - c0] += bb
        for c in range(c0, c1):
            rs = 1.0 / math.sqrt(var[c] + eps)
            dw[c] = sgx[c - c0] * rs                          # sum(g * xhat)
            db[c] = sg[c - c0]
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                rs = 1.0 / math.sqrt(var[c] + eps)
                wc = w[c] if has_w else 1.0
                k_g = wc * rs
                k_x = wc * (sgx[c - c0] * rs) / count * rs * rs
                k_0 = wc * sg[c - c0] / count * rs
                for k in range(l_n):
                    dx[base + k] = g[base + k] * k_g - (x[base + k] - m) * k_x - k_0


def _channel_group(C, L) -> int:
    """Channels per task: enough for runs of ~256 values, while leaving 2 tasks a thread."""
    return max(1, min(-(-256 // L), C // (2 * launch.threads())))


def _channel_params_ok(x, *params):
    return all(p is None or (p.dtype == x.dtype and p.shape == (x.shape[1],)) for p in params)


def batch_norm(x, weight, bias, *, eps=1e-5):
    if x.dtype not in FLOATS or x.ndim < 2 or x.size == 0 or not _channel_params_ok(x, weight, bias) \
            or not launch.hot(("batch_norm", x.shape, x.dtype.num)):
        return _reference("batch_norm", x, weight, bias, eps=eps)
    N, C = x.shape[:2]
    w, b = (np.zeros(1, x.dtype) if p is None else np.ascontiguousarray(p) for p in (weight, bias))
    out, mean, var = np.empty(x.shape, x.dtype), np.empty(C, x.dtype), np.empty(C, x.dtype)
    L = x.size // (N * C)
    launch.run(batch_norm_channels, x.size, np.ascontiguousarray(x).reshape(-1), w, b, N, C, L, _channel_group(C, L),
               float(eps), weight is not None, bias is not None, out.reshape(-1), mean, var)
    return out, mean, var


def batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
    if x.dtype not in FLOATS or x.ndim < 2 or x.size == 0 or grad.dtype != x.dtype or grad.shape != x.shape \
            or not _channel_params_ok(x, weight, bias, mean, var) \
            or not launch.hot(("batch_norm_backward", x.shape, x.dtype.num)):
        return _reference("batch_norm_backward", grad, x, weight, bias, mean, var, eps=eps)
    N, C = x.shape[:2]
    L = x.size // (N * C)
    dx, dw, db = np.empty(x.shape, x.dtype), np.empty(C, x.dtype), np.empty(C, x.dtype)
    w = np.zeros(1, x.dtype) if weight is None else np.ascontiguousarray(weight)
    launch.run(batch_norm_backward_channels, x.size, np.ascontiguousarray(x).reshape(-1),
               np.ascontiguousarray(grad).reshape(-1), w, np.ascontiguousarray(mean), np.ascontiguousarray(var),
               N, C, L, _channel_group(C, L), float(eps), weight is not None, dx.reshape(-1), dw, db)
    return dx, None if weight is None else dw, None if bias is None else db


# ============================================================================ programs
class Builder:
    """Writes an elementwise Program one operation at a time, in the reference's order.

    >>> b = Builder("float32"); x = b.array(); y = b.op("mul", x, b.scalar())
    >>> b.program([y]).nodes
    [('t0', 'mul', ('x0', 'x1'), {}, 'float32')]
    """

    def __init__(self, dtype):
        self.dtype, self.inputs, self.nodes = dtype, [], []

    def array(self, dtype=None):
        self.inputs.append(("array", dtype or self.dtype))
        return f"x{len(self.inputs) - 1}"

    def scalar(self):
        self.inputs.append(("scalar", self.dtype))
        return f"x{len(self.inputs) - 1}"

    def op(self, op, *args):
        name = f"t{len(self.nodes)}"
        self.nodes.append((name, op, tuple(args), {}, self.dtype))
        return name

    def program(self, outputs):
        return Program(list(self.inputs), list(self.nodes), list(outputs))


_KERNELS: dict = {}


def _kernel(key, build):
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = launch.Kernel(build())
    return k


def gelu(x, *, approximate="none"):
    if x.dtype not in FLOATS or x.size == 0 or approximate not in ("none", "tanh") \
            or not launch.hot(("gelu", x.shape, x.dtype.num)):
        return _reference("gelu", x, approximate=approximate)

    def build():
        b = Builder(x.dtype.name)
        v = b.array()
        if approximate == "tanh":     # (x + x*x*x*0.044715) * sqrt(2/pi); x * 0.5 * (tanh + 1)
            cube = b.op("mul", b.op("mul", b.op("mul", v, v), v), 0.044715)
            inner = b.op("mul", b.op("add", v, cube), math.sqrt(2 / math.pi))
            out = b.op("mul", b.op("mul", v, 0.5), b.op("add", b.op("tanh", inner), 1))
        else:                         # x * 0.5 * (erf(x * (1/sqrt(2))) + 1)
            out = b.op("mul", b.op("mul", v, 0.5), b.op("add", b.op("erf", b.op("mul", v, 1 / math.sqrt(2))), 1))
        return b.program([out])
    k = _kernel(("gelu", approximate, x.dtype.name), build)
    return k(np.ascontiguousarray(x), force=True)[0]


def gelu_backward(grad, x, *, approximate="none"):
    if x.dtype not in FLOATS or x.size == 0 or approximate not in ("none", "tanh") or grad.dtype != x.dtype \
            or grad.shape != x.shape or not launch.hot(("gelu_backward", x.shape, x.dtype.num)):
        return _reference("gelu_backward", grad, x, approximate=approximate)

    def build():                      # ember.fused.FUSED["gelu_backward"]'s operations, in its order
        b = Builder(x.dtype.name)
        g, v = b.array(), b.array()
        if approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            cube = b.op("mul", b.op("mul", b.op("mul", v, v), v), 0.044715)
            t = b.op("tanh", b.op("mul", b.op("add", v, cube), k))
            slope = b.op("mul", b.op("add", b.op("mul", b.op("mul", v, v), 3 * 0.044715), 1), k)
            left = b.op("mul", b.op("add", t, 1), 0.5)
            right = b.op("mul", b.op("mul", b.op("mul", v, 0.5), b.op("sub", 1, b.op("mul", t, t))), slope)
            d = b.op("add", left, right)
        else:
            cdf = b.op("mul", b.op("add", b.op("erf", b.op("mul", v, 1 / math.sqrt(2))), 1), 0.5)
            pdf = b.op("mul", b.op("exp", b.op("mul", b.op("mul", v, v), -0.5)), 1 / math.sqrt(2 * math.pi))
            d = b.op("add", cdf, b.op("mul", v, pdf))
        return b.program([b.op("mul", g, d)])
    k = _kernel(("gelu_backward", approximate, x.dtype.name), build)
    return k(np.ascontiguousarray(grad), np.ascontiguousarray(x), force=True)[0]


def _writable(*bufs):
    return all(b.flags.writeable and b.flags.c_contiguous for b in bufs)


def _run_step(key, build, arrays, scalars, outputs):
    """Run an optimizer program: arrays then scalars in, results into ``outputs`` (the state
    buffers themselves where possible) or into new arrays."""
    k = _kernel(key, build)
    args = [np.ascontiguousarray(a) for a in arrays] + [float(s) for s in scalars]
    return k(*args, out=outputs, force=True)


def _step_ok(name, *bufs):
    first = bufs[0]
    return first.dtype in FLOATS and first.size > 0 and all(
        b is None or (b.dtype == first.dtype and b.shape == first.shape) for b in bufs) \
        and launch.hot((name, first.shape, first.dtype.num))


# The optimizer programs, one per option set: what sgd_step / adam_step / rmsprop_step run on
# one tensor, and foreach.py on many. Inputs: the arrays (param, grad, state), then the
# scalars; outputs: the new param, then the new state, in the rule's order.
def sgd_program(dtype, *, momentum, first, dampening, nesterov, weight_decay, maximize):
    """SGD as ember.optim.functional.sgd_step; flags say which branches exist. ``first``:
    there is no momentum buffer yet (it starts as the gradient). Scalars: :func:`sgd_scalars`."""
    b = Builder(dtype)
    p, g = b.array(), b.array()
    buf = b.array() if momentum and not first else None
    s_lr, s_m, s_damp, s_wd = b.scalar(), b.scalar(), b.scalar(), b.scalar()
    d = b.op("neg", g) if maximize else g
    if weight_decay:
        d = b.op("add", d, b.op("mul", p, s_wd))
    outs = []
    if momentum:
        if first:
            buf = d
        else:
            buf = b.op("add", b.op("mul", buf, s_m), d if not dampening else b.op("mul", d, s_damp))
        d = b.op("add", d, b.op("mul", buf, s_m)) if nesterov else buf
        outs = [buf]
    return b.program([b.op("add", p, b.op("mul", d, s_lr))] + outs)


def sgd_scalars(*, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, **_):
    return [-lr, momentum, 1 - dampening, weight_decay]


def adam_program(dtype, *, weight_decay, decoupled, amsgrad, maximize, small_weight):
    """Adam/AdamW as ember.optim.functional.adam_step (``small_weight``: which of _lerp's two
    forms the reference takes). Scalars: :func:`adam_scalars`."""
    b = Builder(dtype)
    p, g, m, v = b.array(), b.array(), b.array(), b.array()
    vmax = b.array() if amsgrad else None
    s_decay, s_wd, s_w, s_1mw, s_b2, s_1mb2, s_bc2, s_eps, s_step = (b.scalar() for _ in range(9))
    if maximize:
        g = b.op("neg", g)
    if weight_decay:
        if decoupled:
            p = b.op("mul", p, s_decay)
        else:
            g = b.op("add", g, b.op("mul", p, s_wd))
    diff = b.op("sub", g, m)
    m = b.op("add", m, b.op("mul", diff, s_w)) if small_weight else b.op("sub", g, b.op("mul", diff, s_1mw))
    v = b.op("add", b.op("mul", v, s_b2), b.op("mul", b.op("mul", g, s_1mb2), g))
    outs = [m, v]
    second = v
    if amsgrad:
        vmax = second = b.op("maximum", vmax, v)
        outs.append(vmax)
    denom = b.op("add", b.op("div", b.op("sqrt", second), s_bc2), s_eps)
    new_p = b.op("add", p, b.op("div", b.op("mul", m, s_step), denom))
    return b.program([new_p] + outs)


def adam_scalars(*, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, **_):
    bc1 = 1 - beta1 ** step
    return [1 - lr * weight_decay, weight_decay, 1 - beta1, 1 - (1 - beta1), beta2, 1 - beta2,
            (1 - beta2 ** step) ** 0.5, eps, -(lr / bc1)]


def rmsprop_program(dtype, *, weight_decay, momentum, centered, maximize, small_weight):
    """RMSprop as ember.optim.functional.rmsprop_step. Scalars: :func:`rmsprop_scalars`."""
    b = Builder(dtype)
    p, g, sq = b.array(), b.array(), b.array()
    ga = b.array() if centered else None
    mb = b.array() if momentum else None
    s_wd, s_alpha, s_1ma, s_w, s_1mw, s_eps, s_m, s_lr = (b.scalar() for _ in range(8))
    if maximize:
        g = b.op("neg", g)
    if weight_decay:
        g = b.op("add", g, b.op("mul", p, s_wd))
    sq = b.op("add", b.op("mul", sq, s_alpha), b.op("mul", b.op("mul", g, s_1ma), g))
    outs = [sq]
    if centered:
        diff = b.op("sub", g, ga)
        ga = b.op("add", ga, b.op("mul", diff, s_w)) if small_weight else b.op("sub", g, b.op("mul", diff, s_1mw))
        avg = b.op("add", b.op("sqrt", b.op("sub", sq, b.op("mul", ga, ga))), s_eps)
        outs.append(ga)
    else:
        avg = b.op("add", b.op("sqrt", sq), s_eps)
    if momentum:
        mb = b.op("add", b.op("mul", mb, s_m), b.op("div", g, avg))
        new_p = b.op("add", p, b.op("mul", mb, s_lr))
        outs.append(mb)
    else:
        new_p = b.op("add", p, b.op("div", b.op("mul", g, s_lr), avg))
    return b.program([new_p] + outs)


def rmsprop_scalars(*, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, **_):
    return [weight_decay, alpha, 1 - alpha, 1 - alpha, 1 - (1 - alpha), eps, momentum, -lr]


def sgd_flags(first, *, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False,
              **_) -> dict:
    """sgd_program's flags for these hyperparameters; ``first``: no momentum buffer yet."""
    return dict(momentum=momentum != 0, first=momentum != 0 and first,
                dampening=dampening != 0, nesterov=bool(nesterov), weight_decay=weight_decay != 0,
                maximize=bool(maximize))


def adam_flags(*, beta1=0.9, weight_decay=0.0, amsgrad=False, maximize=False, decoupled_weight_decay=False,
               **_) -> dict:
    return dict(weight_decay=weight_decay != 0, decoupled=bool(decoupled_weight_decay), amsgrad=bool(amsgrad),
                maximize=bool(maximize), small_weight=abs(1 - beta1) < 0.5)


def rmsprop_flags(*, alpha=0.99, weight_decay=0.0, momentum=0.0, centered=False, maximize=False, **_) -> dict:
    return dict(weight_decay=weight_decay != 0, momentum=momentum > 0, centered=bool(centered),
                maximize=bool(maximize), small_weight=abs(1 - alpha) < 0.5)


def _flag_key(rule, flags, dtype):
    return (rule,) + tuple(sorted(flags.items())) + (dtype,)


def sgd_step(param, grad, momentum_buffer, *, lr, momentum=0.0, dampening=0.0, nesterov=False,
             weight_decay=0.0, maximize=False):
    hyper = dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=weight_decay,
                 maximize=maximize)
    if not _step_ok("sgd_step", param, grad, momentum_buffer):
        return _reference("sgd_step", param, grad, momentum_buffer, **hyper)
    flags = sgd_flags(momentum_buffer is None, **hyper)
    first = flags["first"]
    arrays = [param, grad] + ([momentum_buffer] if momentum != 0 and not first else [])
    if momentum == 0:
        outputs = [param] if _writable(param) else None
    elif first:
        outputs = [param, np.empty_like(param)] if _writable(param) else None
    else:
        outputs = [param, momentum_buffer] if _writable(param, momentum_buffer) else None
    dt = param.dtype.name
    out = _run_step(_flag_key("sgd", flags, dt), lambda: sgd_program(dt, **flags), arrays, sgd_scalars(**hyper),
                    outputs)
    return out[0], (out[1] if momentum != 0 else None)


def adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, *, step, lr, beta1=0.9, beta2=0.999,
              eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False, decoupled_weight_decay=False):
    hyper = dict(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                 maximize=maximize, decoupled_weight_decay=decoupled_weight_decay)
    if not _step_ok("adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq if amsgrad else None) or \
            (amsgrad and max_exp_avg_sq is None):
        return _reference("adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, **hyper)
    flags = adam_flags(**hyper)
    arrays = [param, grad, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
    state = [param, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
    outputs = state if _writable(*state) else None
    dt = param.dtype.name
    out = _run_step(_flag_key("adam", flags, dt), lambda: adam_program(dt, **flags), arrays, adam_scalars(**hyper),
                    outputs)
    return out[0], out[1], out[2], (out[3] if amsgrad else max_exp_avg_sq)


def rmsprop_step(param, grad, square_avg, grad_avg, momentum_buffer, *, lr, alpha=0.99, eps=1e-8,
                 weight_decay=0.0, momentum=0.0, centered=False, maximize=False):
    hyper = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered,
                 maximize=maximize)
    needs = [param, grad, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
    if any(x is None for x in needs) or not _step_ok("rmsprop_step", *needs):
        return _reference("rmsprop_step", param, grad, square_avg, grad_avg, momentum_buffer, **hyper)
    flags = rmsprop_flags(**hyper)
    state = [param, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
    outputs = state if _writable(*state) else None
    dt = param.dtype.name
    out = list(_run_step(_flag_key("rmsprop", flags, dt), lambda: rmsprop_program(dt, **flags), needs,
                         rmsprop_scalars(**hyper), outputs))
    new_p, new_sq = out[0], out[1]
    new_ga = out[2] if centered else grad_avg
    new_mb = out[-1] if momentum > 0 else momentum_buffer
    return new_p, new_sq, new_ga, new_mb


IMPLS = {
    "softmax": _softmax_like("softmax", False),
    "log_softmax": _softmax_like("log_softmax", True),
    "cross_entropy": cross_entropy,
    "layer_norm": layer_norm,
    "gelu": gelu,
    "softmax_backward": _softmax_backward_like("softmax_backward", False),
    "log_softmax_backward": _softmax_backward_like("log_softmax_backward", True),
    "cross_entropy_backward": cross_entropy_backward,
    "layer_norm_backward": layer_norm_backward,
    "gelu_backward": gelu_backward,
    "max_pool2d": max_pool2d,
    "max_pool2d_backward": max_pool2d_backward,
    "batch_norm": batch_norm,
    "batch_norm_backward": batch_norm_backward,
    "sgd_step": sgd_step,
    "adam_step": adam_step,
    "rmsprop_step": rmsprop_step,
}
