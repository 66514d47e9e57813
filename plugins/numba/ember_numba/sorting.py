"""Kernels for the ordering primitives: ``argtopk`` by selection, ``argsort`` and ``cumsum`` by rows.

The reference sorts a whole axis to take k of it, and NumPy's sort and running sum run on one
thread. Here the rows (the axis' lines, as ``(outer, n, inner)``) are split across threads;
``argtopk`` keeps the k best of each row in a small sorted buffer while it scans the row once
(O(n) when k is small against n, against the reference's O(n log n)). The order rules are the
spec's: NaN is the largest value, ties take the lower index first, so the results equal the
reference's exactly; ``cumsum`` adds in the reference's order (one running sum per line), so
its sums are the same to the bit.

They run for float32/float64 inputs of at least MIN_SIZE elements, and fall back to the
reference otherwise (kernels.py explains the thresholds).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ember.backends.numpy import backend as nb

from . import kernels, launch
from .kernels import FLOATS, JIT

#: k from which argtopk sorts the row instead of selecting (insertion into the buffer is O(k))
SELECT_MAX_K = 64


@numba.njit(inline="always")
def _before(a, i, b, j, largest):
    """Does value a at index i come before value b at index j? NaN is the largest; ties by index."""
    if a != a or b != b:
        if a != a and b != b:
            return i < j
        return (a != a) == largest
    if a == b:
        return i < j
    return (a > b) == largest


@numba.njit(parallel=True, **JIT)
def _topk_rows(x, outer, n, inner, k, largest, out):
    """out[o, :, c] = the k best indices of line x[o, :, c], best first."""
    for line in prange(outer * inner):
        o, c = line // inner, line % inner
        base = o * n * inner + c
        vals = np.empty(k, x.dtype)
        idx = np.empty(k, np.int64)
        filled = 0
        for i in range(n):
            v = x[base + i * inner]
            if filled == k and not _before(v, i, vals[k - 1], idx[k - 1], largest):
                continue
            p = filled if filled < k else k - 1
            while p > 0 and _before(v, i, vals[p - 1], idx[p - 1], largest):
                if p < k:
                    vals[p], idx[p] = vals[p - 1], idx[p - 1]
                p -= 1
            vals[p], idx[p] = v, i
            if filled < k:
                filled += 1
        for j in range(k):
            out[(o * k + j) * inner + c] = idx[j]


@numba.njit(parallel=True, **JIT)
def _argsort_rows(x, outer, n, inner, descending, out):
    for line in prange(outer * inner):
        o, c = line // inner, line % inner
        base = o * n * inner + c
        row = np.empty(n, x.dtype)
        for i in range(n):  # descending: the reversed line, so ties stay in order
            row[i] = x[base + (n - 1 - i if descending else i) * inner]
        order = np.argsort(row, kind="mergesort")
        for j in range(n):
            out[base + j * inner] = (n - 1 - order[n - 1 - j]) if descending else order[j]


@numba.njit(parallel=True, **JIT)
def _cumsum_rows(x, outer, n, inner, reverse, out):
    for line in prange(outer * inner):
        o, c = line // inner, line % inner
        base = o * n * inner + c
        s = x.dtype.type(0)
        for t in range(n):
            i = n - 1 - t if reverse else t
            s += x[base + i * inner]
            out[base + i * inner] = s


def _lines(x, axis):
    axis %= x.ndim
    return math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :])


def _covered(name, x) -> bool:
    return (
        x.ndim > 0
        and x.size >= kernels.MIN_SIZE
        and x.dtype in FLOATS
        and x.flags.c_contiguous
        and launch.hot((name, x.shape, x.dtype.num))
    )


def argtopk(x, k, axis, largest=True):
    if not _covered("argtopk", x) or k > SELECT_MAX_K or k == 0:
        return nb.IMPLS["argtopk"](x, k, axis, largest)
    outer, n, inner = _lines(x, axis)
    out = np.empty(x.shape[: axis % x.ndim] + (k,) + x.shape[axis % x.ndim + 1 :], np.int64)
    launch.run(_topk_rows, x.size, x.reshape(-1), outer, n, inner, k, bool(largest), out.reshape(-1))
    return out


def argsort(x, axis, descending=False):
    if not _covered("argsort", x) or x.shape[axis] == 0:
        return nb.IMPLS["argsort"](x, axis, descending)
    outer, n, inner = _lines(x, axis)
    out = np.empty(x.shape, np.int64)
    launch.run(_argsort_rows, x.size, x.reshape(-1), outer, n, inner, bool(descending), out.reshape(-1))
    return out


def cumsum(x, axis, reverse=False):
    if not _covered("cumsum", x):
        return nb.IMPLS["cumsum"](x, axis, reverse)
    outer, n, inner = _lines(x, axis)
    out = np.empty_like(x)
    launch.run(_cumsum_rows, x.size, x.reshape(-1), outer, n, inner, bool(reverse), out.reshape(-1))
    return out


IMPLS = {"argtopk": argtopk, "argsort": argsort, "cumsum": cumsum}
