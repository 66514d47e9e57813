"""Operators that fit no larger family: cumulative products, windows, rotary embeddings,
Einsum, crops, sequence reversal, gated units.
"""
from __future__ import annotations

import math

from ... import dtypes as D
from ...tensor import arange, cat, where
from .common import axis, ints, scalar


def cumprod(node, x, ax):
    # exp(cumsum(log|x|)) with the sign from a running count of negatives and zeros kept apart.
    a = axis(int(scalar(ax)), x.ndim)
    rev, excl = node.attr("reverse", 0), node.attr("exclusive", 0)
    y = x.flip(a) if rev else x
    if excl:
        one = y.narrow(a, 0, 1) * 0 + 1
        y = cat([one, y.narrow(a, 0, y.shape[a] - 1)], a)
    f = y if y.dtype.is_floating_point else y.to(D.float64)
    mag = f.abs().log().cumsum(a).exp()
    neg = (f < 0).to(f.dtype).cumsum(a)
    sign = 1 - 2 * (neg - 2 * (neg / 2).floor())
    zero = (f == 0).to(f.dtype).cumsum(a) > 0
    out = where(zero, 0.0, sign * mag)
    out = out.to(x.dtype) if y.dtype.is_floating_point else out.round().to(x.dtype)
    return out.flip(a) if rev else out


def window(node, size):
    n = int(scalar(size))
    dtype = node.dtype(node.attr("output_datatype", 1))
    period = n if node.attr("periodic", 1) else n - 1
    i = arange(n, backend=size.backend).to(D.float64) * (2 * math.pi / period)
    if node.op_type == "HannWindow":
        w = 0.5 - 0.5 * i.cos()
    elif node.op_type == "HammingWindow":
        alpha = 25 / 46
        w = alpha - (1 - alpha) * i.cos()
    else:
        w = 0.42 - 0.5 * i.cos() + 0.08 * (2 * i).cos()
    return w.to(dtype)


def rotary_embedding(node, x, cos, sin, positions=None):
    shape = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)
    elif x.ndim == 3:
        h = node.attr("num_heads")
        x = x.reshape(shape[0], shape[1], h, shape[2] // h)
    dim = node.attr("rotary_embedding_dim", 0) or x.shape[3]
    rot, rest = x.narrow(3, 0, dim), x.narrow(3, dim, x.shape[3] - dim)
    if positions is not None:
        cos, sin = cos.take(positions, 0), sin.take(positions, 0)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    half = dim // 2
    if node.attr("interleaved", 0):
        pairs = rot.reshape(*rot.shape[:3], half, 2)
        x1, x2 = pairs.narrow(4, 0, 1).squeeze(4), pairs.narrow(4, 1, 1).squeeze(4)
    else:
        x1, x2 = rot.narrow(3, 0, half), rot.narrow(3, half, half)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if node.attr("interleaved", 0):
        rot = cat([real.unsqueeze(4), imag.unsqueeze(4)], 4).reshape(rot.shape)
    else:
        rot = cat([real, imag], 3)
    out = cat([rot, rest], 3)
    return out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)


def center_crop_pad(node, x, shape, dims=None):
    dims = node.attr("axes")
    dims = [axis(a, x.ndim) for a in dims] if dims else list(range(x.ndim))
    for a, want in zip(dims, ints(shape)):
        have = x.shape[a]
        if want < have:
            x = x.narrow(a, (have - want) // 2, want)
        elif want > have:
            lo = (want - have) // 2
            widths = [(0, 0)] * x.ndim
            widths[a] = (lo, want - have - lo)
            x = x.pad(widths)
    return x


def reverse_sequence(node, x, lengths):
    t_ax, b_ax = node.attr("time_axis", 0), node.attr("batch_axis", 1)
    n = x.shape[t_ax]
    shape = [1] * x.ndim
    shape[t_ax] = n
    t = arange(n, backend=x.backend).reshape(shape)
    lshape = [1] * x.ndim
    lshape[b_ax] = x.shape[b_ax]
    length = lengths.to(D.int64).reshape(lshape)
    src = where(t < length, length - 1 - t, t).expand(x.shape)
    return x.gather(t_ax, src)


def einsum(node, *xs):
    # Every operand broadcast over all letters, multiplied, the non-output letters summed.
    spec = node.attr("equation").replace(" ", "")
    lhs, _, rhs = spec.partition("->")
    terms = lhs.split(",")
    letters = []
    shapes = {}
    for term, x in zip(terms, xs):
        if "..." in term:
            k = x.ndim - (len(term) - 3)
            term = term.replace("...", "".join(chr(0x100 + i) for i in range(k)))
        for c, s in zip(term, x.shape):
            shapes[c] = s
            if c not in letters:
                letters.append(c)
    ell = sorted(c for c in letters if ord(c) >= 0x100)
    if not _:
        rhs = "".join(ell) + "".join(sorted(c for c in letters if ord(c) < 0x100 and lhs.count(c) == 1))
    else:
        rhs = rhs.replace("...", "".join(ell))
    order = list(rhs) + [c for c in letters if c not in rhs]
    prod = None
    for term, x in zip(terms, xs):
        if "..." in term:
            k = x.ndim - (len(term) - 3)
            term = term.replace("...", "".join(chr(0x100 + i) for i in range(k)))
        x = _diagonal(x, term)
        term = "".join(dict.fromkeys(term))
        present = [c for c in order if c in term]
        y = x.permute(*[term.index(c) for c in present]) if present else x
        y = y.reshape([shapes[c] if c in term else 1 for c in order])
        prod = y if prod is None else prod * y
    extra = tuple(range(len(rhs), len(order)))
    return prod.sum(extra) if extra else prod


def _diagonal(x, term):
    """Collapse repeated letters of one operand (``ii->i``) to their diagonal."""
    while len(set(term)) < len(term):
        c = next(c for c in term if term.count(c) > 1)
        i, j = term.index(c), term.index(c, term.index(c) + 1)
        n = x.shape[i]
        x = x.movedim(j, i + 1) if hasattr(x, "movedim") else x.permute(*_move(x.ndim, j, i + 1))
        shape = list(x.shape)
        flat = x.reshape(shape[:i] + [n * n] + shape[i + 2:])
        x = flat.take(arange(n, backend=x.backend) * (n + 1), i)
        term = term[:j] + term[j + 1:]
    return x


def _move(ndim, src, dst):
    order = [d for d in range(ndim) if d != src]
    order.insert(dst, src)
    return order


def swiglu(node, a, b=None):
    if b is None:
        half = a.shape[-1] // 2
        a, b = a.narrow(-1, 0, half), a.narrow(-1, half, half)
    return a * (node.attr("alpha", 1.0) * a).sigmoid() * b


OPS = {
    "CumProd": (cumprod, 26), "HannWindow": (window, 17), "HammingWindow": (window, 17),
    "BlackmanWindow": (window, 17), "RotaryEmbedding": (rotary_embedding, 23),
    "CenterCropPad": (center_crop_pad, 18), "ReverseSequence": (reverse_sequence, 10),
    "Einsum": (einsum, 12), "SwiGLU": (swiglu, 28),
}
