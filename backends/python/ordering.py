"""Sorting, running sums and bits in pure Python: argsort, argtopk, cumsum, the bitwise ops, bitcast.

Along an axis, the axis is moved last (one gather), each row is processed as a list, and the
result is moved back. Python's ``sorted`` is stable, which is the spec's tie rule; a key puts
NaN where the spec wants it (largest). Python ints are exact and their bitwise operators act
on an infinite two's complement, so and/or/xor/right shift of wrapped values are already right
and only the left shift and ``not`` of unsigned values wrap back to the width.
"""

from __future__ import annotations

import heapq
from itertools import accumulate

from ember import dtypes as D

from .buffer import PyBuffer, fix, from_bytes, prod, to_bytes, wrap_int
from .layout import binary_operands, permute_data


# ----------------------------------------------------------------------------- along an axis
def _rows(x, axis):
    """(rows, axes): x's elements as lists along ``axis``, and the permutation that put it last."""
    nd = len(x.shape)
    axis %= nd
    axes = [d for d in range(nd) if d != axis] + [axis]
    data = permute_data(x.data, x.shape, axes) if axis != nd - 1 else x.data
    n = x.shape[axis]
    return [data[i : i + n] for i in range(0, len(data), n)] if n else [], axes


def _unrows(rows, shape, axes, n, dtype):
    """The inverse of :func:`_rows` for rows of length ``n`` (the axis' new size)."""
    moved = tuple(shape[a] for a in axes[:-1]) + (n,)
    flat = [v for r in rows for v in r]
    inverse = sorted(range(len(axes)), key=axes.__getitem__)
    out_shape = tuple(moved[i] for i in inverse)
    data = flat if axes == sorted(axes) else permute_data(flat, moved, inverse)
    return PyBuffer(data, out_shape, dtype)


def _key(dtype, descending):
    """Sort key of one element: NaN is the largest; descending negates (stability is kept)."""
    if dtype.kind == "f":
        if descending:
            return lambda v: (v == v, -v if v == v else 0.0)
        return lambda v: (v != v, v if v == v else 0.0)
    return (lambda v: -int(v)) if descending else int


def _order(row, key, k=None):
    keys = list(map(key, row))
    if k is None:
        return sorted(range(len(row)), key=keys.__getitem__)
    return heapq.nsmallest(k, range(len(row)), key=keys.__getitem__)  # = sorted(...)[:k]


def argsort(x, axis, descending=False):
    if not x.shape:
        return PyBuffer([0], (), D.int64)
    rows, axes = _rows(x, axis)
    key = _key(x.dtype, descending)
    return _unrows([_order(r, key) for r in rows], x.shape, axes, x.shape[axis], D.int64)


def argtopk(x, k, axis, largest=True):
    if not x.shape:
        return PyBuffer([0], (), D.int64)
    rows, axes = _rows(x, axis)
    key = _key(x.dtype, largest)
    return _unrows([_order(r, key, k) for r in rows], x.shape, axes, k, D.int64)


def cumsum(x, axis, reverse=False):
    if not x.shape:
        return PyBuffer(list(x.data), (), x.dtype)
    rows, axes = _rows(x, axis)
    start = 0.0 if x.dtype.kind == "f" else 0
    if reverse:
        out = [list(accumulate(r[::-1], initial=start))[:0:-1] for r in rows]
    else:
        out = [list(accumulate(r, initial=start))[1:] for r in rows]
    # sums in double (or exact ints), rounded to the dtype once, as the buffer's rule says
    done = _unrows(out, x.shape, axes, x.shape[axis], x.dtype)
    return PyBuffer(fix(x.dtype, done.data), done.shape, x.dtype)


# ----------------------------------------------------------------------------- bits
def _bits(dtype):
    return dtype.itemsize * 8


def _shl(a, b, bits):
    return a << b if 0 <= b < bits else 0


def _shr(a, b, bits):
    return a >> b if 0 <= b < bits else (-1 if a < 0 else 0)


_BINARY = {
    "bitwise_and": lambda a, b, bits: a & b,
    "bitwise_or": lambda a, b, bits: a | b,
    "bitwise_xor": lambda a, b, bits: a ^ b,
    "bitwise_left_shift": _shl,
    "bitwise_right_shift": _shr,
}


def _bitwise(name):
    op = _BINARY[name]

    def impl(a, b):
        if isinstance(a, PyBuffer) and isinstance(b, PyBuffer):
            xs, ys, shape = binary_operands(a, b)
            dtype = a.dtype
        else:
            t, s = (a, b) if isinstance(a, PyBuffer) else (b, a)
            dtype, shape, rep = t.dtype, t.shape, [int(s)] * len(t.data)
            xs, ys = (t.data, rep) if t is a else (rep, t.data)
        bits = _bits(dtype)
        return PyBuffer(wrap_int(dtype, [op(p, q, bits) for p, q in zip(xs, ys)]), shape, dtype)

    impl.__name__ = name
    return impl


def bitwise_not(x):
    if x.dtype.kind == "u":
        mask = (1 << _bits(x.dtype)) - 1
        return PyBuffer([mask ^ v for v in x.data], x.shape, x.dtype)
    return PyBuffer([~v for v in x.data], x.shape, x.dtype)


def bitcast(x, dtype):
    dtype = D.get(dtype)
    n = prod(x.shape)
    return PyBuffer(from_bytes(to_bytes(x.data, x.dtype), n, dtype), x.shape, dtype)


IMPLS = {
    "argsort": argsort,
    "argtopk": argtopk,
    "cumsum": cumsum,
    "bitwise_not": bitwise_not,
    "bitcast": bitcast,
    **{name: _bitwise(name) for name in _BINARY},
}
