"""Row kernels: ``softmax``, ``log_softmax``, ``cross_entropy``, ``layer_norm`` and their backward
ops, one task per row (the normalized dims flattened), reading the row two or three times while
it is in cache, sums in float64; layer norm's weight and bias gradients one task per column."""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange, uint64

from .. import background, launch
from .common import FLOATS, JIT, _reference


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
        if 0 <= t < C:  # the reference's one-hot has no 1 for a target out of range
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
        if (
            x.dtype not in FLOATS
            or x.size == 0
            or not _dim_ok(dim, x.ndim)
            or not launch.hot((name, x.shape, x.dtype.num, dim))
        ):
            return _reference(name, x, dim=dim)
        rows, back = _rows(x, dim)
        out = np.empty_like(rows)
        launch.run(softmax_rows, rows.size, rows.reshape(-1), rows.shape[0], rows.shape[1], log, out.reshape(-1))
        return back(out)

    impl.__name__ = f"numba_{name}"
    return impl


def _softmax_backward_like(name, log):
    def impl(grad, out, *, dim=-1):
        if (
            out.dtype not in FLOATS
            or grad.dtype != out.dtype
            or grad.shape != out.shape
            or out.size == 0
            or not _dim_ok(dim, out.ndim)
            or not launch.hot((name, out.shape, out.dtype.num, dim))
        ):
            return _reference(name, grad, out, dim=dim)
        ys, back = _rows(out, dim)
        gs, _ = _rows(grad, dim)
        res = np.empty_like(ys)
        launch.run(
            softmax_backward_rows,
            ys.size,
            ys.reshape(-1),
            gs.reshape(-1),
            ys.shape[0],
            ys.shape[1],
            log,
            res.reshape(-1),
        )
        return back(res)

    impl.__name__ = f"numba_{name}"
    return impl


def _ce_ok(name, logits, target, kernel, *args):
    """Do the row kernels cover these operands, and are their shapes hot (launch.HOT)? Until
    they are, the kernel the hot call will run (``kernel`` on ``args`` after the logits,
    targets and their shape) is handed to the background compiler (background.py)."""
    if not (
        logits.dtype in FLOATS
        and logits.ndim == 2
        and target.shape == logits.shape[:1]
        and target.dtype.kind in "iu"
        and logits.shape[0] > 0
        and logits.shape[1] > 0
    ):
        return False
    if launch.hot((name, logits.shape, logits.dtype.num)):
        return True
    R, C = logits.shape
    background.soon(launch.for_work(kernel, logits.size), logits.reshape(-1), np.empty(0, np.int64), R, C, *args)
    return False


def cross_entropy(logits, target, *, ignore_index=-100):
    if not _ce_ok("cross_entropy", logits, target, cross_entropy_rows, ignore_index, np.empty(0, np.float64)):
        return _reference("cross_entropy", logits, target, ignore_index=ignore_index)
    R, C = logits.shape
    t = np.ascontiguousarray(target, dtype=np.int64)
    counted = t != ignore_index
    n = int(counted.sum())
    if n and (t.min(where=counted, initial=0) < 0 or t.max(where=counted, initial=0) >= C):
        return _reference("cross_entropy", logits, target, ignore_index=ignore_index)  # its error names it
    losses = np.empty(R, np.float64)
    kernel = launch.for_work(cross_entropy_rows, logits.size)  # one-thread twin for small logits: compiles faster
    launch.run(kernel, logits.size, np.ascontiguousarray(logits).reshape(-1), t, R, C, ignore_index, losses)
    return np.asarray(losses.sum() / n if n else np.nan, dtype=logits.dtype)


def cross_entropy_backward(grad, logits, target, *, ignore_index=-100):
    fits = grad.dtype == logits.dtype and grad.size == 1
    scaled = (ignore_index, 1.0, np.empty(0, logits.dtype))
    if not fits or not _ce_ok("cross_entropy_backward", logits, target, cross_entropy_backward_rows, *scaled):
        return _reference("cross_entropy_backward", grad, logits, target, ignore_index=ignore_index)
    R, C = logits.shape
    t = np.ascontiguousarray(target, dtype=np.int64)
    scale = float(grad.reshape(())) / max(int((t != ignore_index).sum()), 1)
    out = np.empty((R, C), logits.dtype)
    launch.run(
        launch.for_work(cross_entropy_backward_rows, logits.size),
        logits.size,
        np.ascontiguousarray(logits).reshape(-1),
        t,
        R,
        C,
        ignore_index,
        scale,
        out.reshape(-1),
    )
    return out


def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    ok = (
        x.dtype in FLOATS
        and x.size > 0
        and k <= x.ndim
        and tuple(x.shape[x.ndim - k :]) == normalized_shape
        and all(p is None or (p.dtype == x.dtype and tuple(p.shape) == normalized_shape) for p in (weight, bias))
    )
    if not ok or not launch.hot(("layer_norm", x.shape, x.dtype.num, normalized_shape)):
        return _reference("layer_norm", x, weight, bias, normalized_shape=normalized_shape, eps=eps)
    C = math.prod(normalized_shape)
    rows = np.ascontiguousarray(x).reshape(-1, C)
    out = np.empty_like(rows)
    dummy = np.zeros(1, x.dtype)
    w = dummy if weight is None else np.ascontiguousarray(weight).reshape(-1)
    b = dummy if bias is None else np.ascontiguousarray(bias).reshape(-1)
    launch.run(
        layer_norm_rows,
        rows.size,
        rows.reshape(-1),
        w,
        b,
        rows.shape[0],
        C,
        float(eps),
        weight is not None,
        bias is not None,
        out.reshape(-1),
    )
    return out.reshape(x.shape)


def layer_norm_backward(grad, x, weight, bias, *, normalized_shape, eps=1e-5):
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    ok = (
        x.dtype in FLOATS
        and x.size > 0
        and k <= x.ndim
        and tuple(x.shape[x.ndim - k :]) == normalized_shape
        and grad.dtype == x.dtype
        and grad.shape == x.shape
        and all(p is None or (p.dtype == x.dtype and tuple(p.shape) == normalized_shape) for p in (weight, bias))
    )
    if not ok or not launch.hot(("layer_norm_backward", x.shape, x.dtype.num, normalized_shape)):
        return _reference("layer_norm_backward", grad, x, weight, bias, normalized_shape=normalized_shape, eps=eps)
    C = math.prod(normalized_shape)
    rows = np.ascontiguousarray(x).reshape(-1)
    g = np.ascontiguousarray(grad).reshape(-1)
    R = rows.size // C
    w = np.zeros(1, x.dtype) if weight is None else np.ascontiguousarray(weight).reshape(-1)
    dx = np.empty(x.shape, x.dtype)
    mean, rstd = np.empty(R), np.empty(R)
    launch.run(
        layer_norm_backward_rows,
        rows.size,
        rows,
        w,
        g,
        R,
        C,
        float(eps),
        weight is not None,
        dx.reshape(-1),
        mean,
        rstd,
    )
    if weight is None and bias is None:
        return dx, None, None
    dw, db = np.empty(C, x.dtype), np.empty(C, x.dtype)
    launch.run(layer_norm_param_grads, rows.size, rows, g, R, C, mean, rstd, dw, db)
    return (
        dx,
        None if weight is None else dw.reshape(normalized_shape),
        None if bias is None else db.reshape(normalized_shape),
    )
