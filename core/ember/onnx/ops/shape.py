"""Movement, creation and indexing operators: reshapes, slices, gathers, scatters, pads,
shape arithmetic and matrix products.

Shape-valued inputs (``shape``, ``axes``, ``pads``, ``starts``...) are read to the host as
Python ints, as every framework that runs ONNX eagerly does; the data itself stays on the
backend and moves through ember's movement and indexing primitives.
"""

from __future__ import annotations

import math

from ... import dtypes as D
from ...primitives import broadcast_shapes
from ...tensor import arange, cat, where
from .common import axes as norm_axes, axis, const, filled, ints, scalar


def _prod(xs):
    return math.prod(int(s) for s in xs)


# ---------------------------------------------------------------- reshapes
def reshape(node, x, shape=None):
    shape = ints(shape) if node.version >= 5 else list(node.attr("shape"))
    if not node.attr("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    if -1 in shape:
        known = _prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = _prod(x.shape) // known if known else 0
    return x.reshape(shape)


def flatten(node, x):
    a = axis(node.attr("axis", 1), x.ndim)
    return x.reshape(_prod(x.shape[:a]), _prod(x.shape[a:]))


def _axes_arg(node, given, since=13):
    return ints(given) if node.version >= since else node.attr("axes")


def squeeze(node, x, given=None):
    dims = _axes_arg(node, given)
    dims = norm_axes(dims, x.ndim) if dims else [d for d, s in enumerate(x.shape) if s == 1]
    return x.reshape([s for d, s in enumerate(x.shape) if d not in dims])


def unsqueeze(node, x, given=None):
    ndim = x.ndim + len(_axes_arg(node, given))
    dims = sorted(norm_axes(_axes_arg(node, given), ndim))
    shape = list(x.shape)
    for d in dims:
        shape.insert(d, 1)
    return x.reshape(shape)


def transpose(node, x):
    perm = node.attr("perm") or list(range(x.ndim))[::-1]
    return x.permute(*perm)


def concat(node, *xs):
    xs = [x for x in xs if x is not None]
    return cat(xs, axis(node.attr("axis"), xs[0].ndim))


def split(node, x, sizes=None):
    a = axis(node.attr("axis", 0), x.ndim)
    n = x.shape[a]
    sizes = ints(sizes) if node.version >= 13 and sizes is not None else node.attr("split")
    if not sizes:
        parts = node.attr("num_outputs") or len(node.outputs)
        each = -(-n // parts)
        sizes = [min(each, n - i * each) for i in range(parts)]
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(a, start, s))
        start += s
    return tuple(out)


def expand(node, x, shape):
    return x.expand(broadcast_shapes(x.shape, tuple(ints(shape))))


def tile(node, x, repeats):
    return x.repeat(*ints(repeats))


def depth_to_space(node, x):
    b = node.attr("blocksize")
    n, c, h, w = x.shape
    if node.attr("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(node, x):
    b = node.attr("blocksize")
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.permute(0, 1, 3, 5, 2, 4) if node.attr("mode", "DCR") == "CRD" else y.permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


# ---------------------------------------------------------------- slices and pads
def _slice_dims(x, dims, starts, ends, steps):
    """ONNX Slice = NumPy basic slicing: reversed steps become a flip, then one strided slice."""
    lo, hi, st = [0] * x.ndim, list(x.shape), [1] * x.ndim
    flips = []
    for d, s, e, k in zip(dims, starts, ends, steps):
        n = x.shape[d]
        r = range(*slice(s, e, k).indices(n))
        if k < 0:
            flips.append(d)
            r = range(n - 1 - r.start, n - 1 - r.start + len(r) * -k, -k) if len(r) else range(0)
        lo[d] = r.start if len(r) else 0
        hi[d] = min(r.start + (len(r) - 1) * r.step + 1, n) if len(r) else 0
        st[d] = abs(k)
    y = x.flip(flips) if flips else x
    return y._slice(lo, hi, st)


def slice_(node, x, starts=None, ends=None, dims=None, steps=None):
    if node.version < 10:
        starts, ends, dims = node.attr("starts"), node.attr("ends"), node.attr("axes")
    else:
        starts, ends, dims, steps = ints(starts), ints(ends), ints(dims), ints(steps)
    dims = norm_axes(dims, x.ndim) if dims else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    return _slice_dims(x, dims, starts, ends, steps)


def _pad_index(mode, i, n):
    if mode == "edge":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1) or 1  # reflect without repeating the edge
    i = i % period
    return i if i < n else period - i


def pad(node, x, pads=None, value=None, dims=None):
    if node.version < 11:
        pads, value, mode = (
            node.attr("pads") or node.attr("paddings"),
            node.attr("value", 0.0),
            node.attr("mode", "constant"),
        )
    else:
        pads, value, mode = ints(pads), scalar(value, 0), node.attr("mode", "constant")
    dims = norm_axes(ints(dims), x.ndim) if dims is not None else list(range(x.ndim))
    k = len(dims)
    lo, hi = dict(zip(dims, pads[:k])), dict(zip(dims, pads[k:]))
    # Negative pads crop first.
    cut = [(d, max(-lo[d], 0), x.shape[d] - max(-hi[d], 0)) for d in dims]
    if any(a or b != x.shape[d] for d, a, b in cut):
        x = _slice_dims(x, [d for d, _, _ in cut], [a for _, a, _ in cut], [b for _, _, b in cut], [1] * len(cut))
    widths = [(max(lo.get(d, 0), 0), max(hi.get(d, 0), 0)) for d in range(x.ndim)]
    if mode == "constant":
        return x.pad(widths, value if value is not None else 0)
    for d, (a, b) in enumerate(widths):
        if a or b:
            n = x.shape[d]
            index = [_pad_index(mode, i, n) for i in range(-a, n + b)]
            x = x.take(const(index, x, D.int64), d)
    return x


# ---------------------------------------------------------------- shape arithmetic and creation
def shape(node, x):
    n = x.ndim
    start, end = node.attr("start", 0), node.attr("end", n)
    start, end = min(max(axis(start, n), 0), n), min(max(axis(end, n), 0), n)
    return const(list(x.shape[start:end]), x, D.int64).reshape(max(end - start, 0))


def size(node, x):
    return const(_prod(x.shape), x, D.int64)


def constant_of_shape(node, shape):
    value = node.attr("value")
    fill, dtype = (0.0, D.float32) if value is None else (value.reshape(-1)[0].item(), D.get(value.dtype.name))
    return filled(ints(shape) if shape.numel() else [], fill, shape, dtype)


def constant(node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in node.attrs:
            v = node.attrs[key]
            from ...tensor import tensor

            if key == "value":
                return tensor(v)
            return tensor(v, dtype=D.float32 if "float" in key else D.int64)
    raise node.error(f"constant kind {', '.join(node.attrs)} is not supported (sparse or string constants)")


def range_(node, start, limit, delta):
    s, e, d = scalar(start), scalar(limit), scalar(delta)
    n = max(math.ceil((e - s) / d), 0)
    return (arange(n, backend=start.backend).to(start.dtype) * d + s).to(start.dtype)


def eye_like(node, x):
    dtype = node.dtype(node.attr("dtype")) if node.attr("dtype") is not None else x.dtype
    rows, cols = x.shape
    i = arange(rows, backend=x.backend).reshape(rows, 1)
    j = arange(cols, backend=x.backend).reshape(1, cols)
    return (j - i == node.attr("k", 0)).to(dtype)


def trilu(node, x, k=None):
    k = int(scalar(k, 0))
    rows, cols = x.shape[-2:]
    i = arange(rows, backend=x.backend).reshape(rows, 1)
    j = arange(cols, backend=x.backend).reshape(1, cols)
    keep = (j - i >= k) if node.attr("upper", 1) else (j - i <= k)
    return where(keep, x, filled((), 0, x))


def one_hot(node, indices, depth, values):
    n = int(scalar(depth))
    a = axis(node.attr("axis", -1), indices.ndim + 1)
    idx = indices.to(D.int64)
    idx = where(idx < 0, idx + n, idx).unsqueeze(a)
    shape = [1] * (indices.ndim + 1)
    shape[a] = n
    pos = arange(n, backend=indices.backend).reshape(shape)
    off, on = values.reshape(2).take(const([0], values, D.int64)), values.reshape(2).take(const([1], values, D.int64))
    return where(pos == idx, on, off)


# ---------------------------------------------------------------- gathers and scatters
def _positive(idx, n):
    idx = idx.to(D.int64)
    return where(idx < 0, idx + n, idx)


def gather(node, x, idx):
    a = axis(node.attr("axis", 0), x.ndim)
    return x.take(_positive(idx, x.shape[a]), a)


def gather_elements(node, x, idx):
    a = axis(node.attr("axis", 0), x.ndim)
    return x.gather(a, _positive(idx, x.shape[a]))


def _element_positions(shape, idx, a):
    """Flat positions in a tensor of `shape` of idx's elements, idx standing for dim `a`."""
    pos = None
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        if d == a:
            coord = idx
        else:
            s = [1] * idx.ndim
            s[d] = idx.shape[d]
            coord = arange(idx.shape[d], backend=idx.backend).reshape(s)
        term = coord * stride
        pos = term if pos is None else pos + term
        stride *= shape[d]
    return pos.expand(idx.shape) if pos.shape != idx.shape else pos


def _scatter(node, data, pos, updates, reduction):
    flat = data.reshape(-1)
    pos, upd = pos.reshape(-1), updates.reshape(-1)
    if reduction == "add":
        return flat.index_add(0, pos, upd).reshape(data.shape)
    if reduction == "none":
        hit = filled(flat.shape, 0, flat).index_add(0, pos, filled(upd.shape, 1, flat)) > 0
        new = filled(flat.shape, 0, flat).index_add(0, pos, upd)
        return where(hit, new, flat).reshape(data.shape)
    # No scatter-reduce primitive: a (updates x positions) match matrix, reduced over updates.
    # Quadratic in size, so fine for the small tensors such models scatter into.
    match = pos.reshape(-1, 1) == arange(flat.shape[0], backend=flat.backend).reshape(1, -1)
    hit = match.any(0)
    f, u = flat.to(D.float64), upd.to(D.float64).reshape(-1, 1)
    if reduction == "mul":
        from .reduce import _prod

        out = f * _prod(where(match, u, 1.0), (0,), False)
    elif reduction in ("max", "min"):
        fill = float("-inf") if reduction == "max" else float("inf")
        best = getattr(where(match, u, fill), "amax" if reduction == "max" else "amin")(0)
        out = where(hit, getattr(f, "maximum" if reduction == "max" else "minimum")(best), f)
    else:
        raise node.error(f"reduction {reduction!r} is not one of none, add, mul, max, min")
    out = out if data.dtype.is_floating_point else out.round()
    return out.to(data.dtype).reshape(data.shape)


def scatter_elements(node, data, idx, updates):
    a = axis(node.attr("axis", 0), data.ndim)
    pos = _element_positions(data.shape, _positive(idx, data.shape[a]), a)
    return _scatter(node, data, pos, updates, node.attr("reduction", "none"))


def _nd_positions(shape, idx, batch_dims=0):
    """Flat row numbers of GatherND/ScatterND index tuples (last dim of idx) into shape."""
    k = idx.shape[-1]
    dims = shape[batch_dims : batch_dims + k]
    pos = None
    stride = 1
    for j in range(k - 1, -1, -1):
        col = idx.narrow(idx.ndim - 1, j, 1).squeeze(-1).to(D.int64)
        col = where(col < 0, col + dims[j], col)
        pos = col * stride if pos is None else pos + col * stride
        stride *= dims[j]
    if batch_dims:
        b = _prod(shape[:batch_dims])
        offs = arange(b, backend=idx.backend).reshape(list(idx.shape[:batch_dims]) + [1] * (idx.ndim - 1 - batch_dims))
        pos = pos + offs * stride
    return pos, k


def gather_nd(node, x, idx):
    b = node.attr("batch_dims", 0)
    pos, k = _nd_positions(x.shape, idx, b)
    rest = list(x.shape[b + k :])
    rows = x.reshape([-1] + rest)
    return rows.take(pos.reshape(-1), 0).reshape(list(idx.shape[:-1]) + rest)


def scatter_nd(node, data, idx, updates):
    pos, k = _nd_positions(data.shape, idx)
    rest = list(data.shape[k:])
    inner = _prod(rest)
    flat = pos.reshape(-1, 1) * inner + arange(inner, backend=data.backend).reshape(1, inner)
    return _scatter(node, data, flat, updates.reshape(-1, inner), node.attr("reduction", "none"))


def _true_at(mask) -> list:
    """Flat positions of the true elements, read to the host (no numpy: Pyodide may lack it)."""
    return [i for i, v in enumerate(mask.reshape(-1).tolist()) if v]


def nonzero(node, x):
    # The output's shape depends on the values, so the mask is read to the host.
    shape = x.shape or (1,)  # a 0-d input counts as 1-d, as in NumPy
    flat = _true_at(x != 0)
    coords = [[(i // math.prod(shape[d + 1 :])) % shape[d] for i in flat] for d in range(len(shape))]
    return const(coords, x, D.int64).reshape(len(shape), len(flat))


def compress(node, x, cond):
    keep = const(_true_at(cond), x, D.int64)
    a = node.attr("axis")
    if a is None:
        return x.reshape(-1).take(keep, 0)
    return x.take(keep, axis(a, x.ndim))


def unique(node, x):
    # Sort the slices (one stable argsort per column, last column first: lexicographic order,
    # ties in their original order), mark where a new value starts, and read that mask to the
    # host: it gives the count (the outputs' length) and where each group starts.
    a = node.attr("axis")
    if a is None:
        rows = x.reshape(-1, 1)
    else:
        a = axis(a, x.ndim)
        rows = x.permute(a, *[d for d in range(x.ndim) if d != a]).reshape(x.shape[a], -1)
    n, m = rows.shape
    perm = arange(n, backend=x.backend)
    for col in reversed(range(m)):
        perm = perm.take(rows[:, col].take(perm, 0).argsort(0), 0)
    ordered = rows.take(perm, 0)
    new = (ordered[1:] != ordered[:-1]).any(1) if n > 1 else filled((max(n - 1, 0),), False, x, D.bool_)
    starts = [0] + [i + 1 for i, v in enumerate(new.tolist()) if v] if n else []
    group = cat([filled((min(n, 1),), 0, x, D.int64), new.long()]).cumsum(0)  # each sorted slice's group
    first = perm.take(const(starts, x, D.int64), 0)  # the lowest index of each group
    counts = const([b - e for b, e in zip(starts[1:] + [n], starts)], x, D.int64)
    inverse = filled((n,), 0, x, D.int64).index_add(0, perm, group)
    if not node.attr("sorted", 1):  # groups in order of first occurrence
        by_first = first.argsort(0)
        first, counts = first.take(by_first, 0), counts.take(by_first, 0)
        inverse = by_first.argsort(0).take(inverse, 0)
    y = x.reshape(-1).take(first, 0) if a is None else x.take(first, a)
    return y, first, inverse, counts


# ---------------------------------------------------------------- matrix products
def matmul(node, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return (a * b).sum()
    if a.ndim == 1:
        return (a.unsqueeze(0) @ b).squeeze(-2)
    if b.ndim == 1:
        return (a @ b.unsqueeze(-1)).squeeze(-1)
    return a @ b


def gemm(node, a, b, c=None):
    a = a.t() if node.attr("transA", 0) else a
    b = b.t() if node.attr("transB", 0) else b
    y = a @ b
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    y = y * alpha if alpha != 1 else y
    if c is not None:
        y = y + (c * beta if beta != 1 else c)
    return y


OPS = {
    "Reshape": (reshape, 1),
    "Flatten": (flatten, 1),
    "Squeeze": (squeeze, 1),
    "Unsqueeze": (unsqueeze, 1),
    "Transpose": (transpose, 1),
    "Concat": (concat, 1),
    "Split": (split, 1),
    "Expand": (expand, 8),
    "Tile": (tile, 6),
    "DepthToSpace": (depth_to_space, 1),
    "SpaceToDepth": (space_to_depth, 1),
    "Slice": (slice_, 1),
    "Pad": (pad, 1),
    "Shape": (shape, 1),
    "Size": (size, 1),
    "ConstantOfShape": (constant_of_shape, 9),
    "Constant": (constant, 1),
    "Range": (range_, 11),
    "EyeLike": (eye_like, 9),
    "Trilu": (trilu, 14),
    "OneHot": (one_hot, 9),
    "Gather": (gather, 1),
    "GatherElements": (gather_elements, 11),
    "GatherND": (gather_nd, 11),
    "ScatterElements": (scatter_elements, 11),
    "Scatter": (scatter_elements, 9, 10),
    "ScatterND": (scatter_nd, 11),
    "NonZero": (nonzero, 9),
    "Unique": (unique, 11),
    "Compress": (compress, 9),
    "MatMul": (matmul, 1),
    "Gemm": (gemm, 1),
}
