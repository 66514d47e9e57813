"""Reductions: the ten Reduce* operators, ArgMax/ArgMin, the softmax family, CumSum, TopK.

The Reduce* operators differ only in what they apply before and after a sum or max, so they
are one table of (pre, reduce, post) rules and one handler.
"""

from __future__ import annotations

from ... import dtypes as D, primitives as P
from ...tensor import where
from .common import axes as norm_axes, axis, filled, ints, scalar

# name → (before, reduction, after, value of an empty reduction)
RULES = {
    "ReduceSum": (None, "sum", None, 0),
    "ReduceMean": (None, "mean", None, float("nan")),
    "ReduceMax": (None, "amax", None, float("-inf")),
    "ReduceMin": (None, "amin", None, float("inf")),
    "ReduceProd": (None, "prod", None, 1),
    "ReduceL1": (lambda x: x.abs(), "sum", None, 0),
    "ReduceL2": (lambda x: x * x, "sum", lambda x: x.sqrt(), 0),
    "ReduceSumSquare": (lambda x: x * x, "sum", None, 0),
    "ReduceLogSum": (None, "sum", lambda x: x.log(), float("-inf")),
    "ReduceLogSumExp": (None, "logsumexp", None, float("-inf")),
}
# Opset from which `axes` is an input instead of an attribute.
AXES_INPUT = {"ReduceSum": 13}


def _prod(x, dims, keepdim):
    # No product primitive: |x| multiplies as exp(sum(log|x|)); sign and zeros counted apart.
    if not x.dtype.is_floating_point:
        return _prod(x.to(D.float64), dims, keepdim).round().to(x.dtype)
    mag = x.abs().log().sum(dims, keepdim).exp()
    neg = (x < 0).to(x.dtype).sum(dims, keepdim)
    sign = 1 - 2 * (neg - 2 * (neg / 2).floor())
    zero = (x == 0).any(dims, keepdim) if dims else x == 0
    return where(zero, 0.0, sign * mag)


def _logsumexp(x, dims, keepdim):
    m = x.amax(dims, keepdim=True)
    m = where(m.isinf(), 0.0, m)
    out = (x - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dims)


def reduce(node, x, axes_in=None):
    before, how, after, empty = RULES[node.op_type]
    keep = bool(node.attr("keepdims", 1))
    if node.version >= AXES_INPUT.get(node.op_type, 18):
        dims = ints(axes_in)
    else:
        dims = node.attr("axes")
    if not dims:
        if node.attr("noop_with_empty_axes", 0):
            return before(x) if before and node.op_type != "ReduceLogSumExp" else x
        dims = list(range(x.ndim))
    dims = tuple(sorted(norm_axes(dims, x.ndim)))
    if any(x.shape[d] == 0 for d in dims):
        shape = [1 if d in dims else s for d, s in enumerate(x.shape)]
        shape = shape if keep else [s for d, s in enumerate(x.shape) if d not in dims]
        if x.dtype == D.bool_:
            empty = node.op_type == "ReduceMin"
        return filled(shape, empty, x)
    y = before(x) if before else x
    if how == "prod":
        out = _prod(y, dims, keep)
    elif how == "logsumexp":
        out = _logsumexp(y, dims, keep)
    elif how == "mean":
        out = (
            y.mean(dims, keepdim=keep) if y.dtype.is_floating_point else (y.sum(dims, keepdim=keep) // _count(y, dims))
        )
    else:
        out = getattr(y, how)(dims, keepdim=keep)
    out = after(out) if after else out
    return out.to(x.dtype) if out.dtype != x.dtype else out


def _count(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def arg_reduce(node, x):
    a = axis(node.attr("axis", 0), x.ndim)
    keep = bool(node.attr("keepdims", 1))
    y = -x if node.op_type == "ArgMin" else x
    if not y.dtype.is_floating_point and y.dtype in (D.uint8, D.uint32, D.bool_):
        y = y.to(D.int64) if node.op_type == "ArgMax" else -(x.to(D.int64))
    if node.attr("select_last_index", 0):
        n = x.shape[a]
        return (n - 1) - y.flip(a).argmax(a, keepdim=keep)
    return y.argmax(a, keepdim=keep)


# ---------------------------------------------------------------- softmax family
def _along(node, x, fn):
    """Softmax-style ops: opset < 13 flattens to 2-d at `axis` (default 1), later ones use one axis (default -1)."""
    if node.version < 13:
        a = axis(node.attr("axis", 1), x.ndim)
        flat = x.reshape(_prod_int(x.shape[:a]), -1)
        return fn(flat, 1).reshape(x.shape)
    return fn(x, axis(node.attr("axis", -1), x.ndim))


def _prod_int(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _hardmax(x, a):
    idx = x.argmax(a, keepdim=True)
    n = x.shape[a]
    shape = [1] * x.ndim
    shape[a] = n
    from ...tensor import arange

    pos = arange(n, backend=x.backend).reshape(shape)
    return (pos == idx).to(x.dtype)


def softmax(node, x):
    return _along(node, x, lambda t, a: t.softmax(a))


def log_softmax(node, x):
    return _along(node, x, lambda t, a: t.log_softmax(a))


def hardmax(node, x):
    return _along(node, x, _hardmax)


def cumsum(node, x, ax):
    a = axis(int(scalar(ax)), x.ndim)
    reverse = bool(node.attr("reverse", 0))
    out = P.cumsum(x, axis=a, reverse=reverse)  # the input's dtype (torch's would be int64)
    if node.attr("exclusive", 0):
        # shift by one along the axis, a zero coming in: exact, unlike out - x in floats
        n = x.shape[a]
        widths = [(0, 0)] * x.ndim
        widths[a] = (0, 1) if reverse else (1, 0)
        start = 1 if reverse else 0
        out = out.pad(widths).narrow(a, start, n)
    return out


def topk(node, x, k):
    k = int(scalar(k)) if node.version >= 10 else node.attr("k")
    a = axis(node.attr("axis", -1), x.ndim)
    # one selection primitive; ties take the lower index first (the operator's rule), and an
    # unsorted request gets the sorted order, which the operator allows
    return tuple(x.topk(k, a, largest=bool(node.attr("largest", 1))))


OPS = {
    **dict.fromkeys(RULES, (reduce, 1)),
    "ArgMax": (arg_reduce, 1),
    "ArgMin": (arg_reduce, 1),
    "Softmax": (softmax, 1),
    "LogSoftmax": (log_softmax, 1),
    "Hardmax": (hardmax, 1),
    "CumSum": (cumsum, 11),
    "TopK": (topk, 1),
}
