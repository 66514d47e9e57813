"""Movement, indexing and window primitives of the pure-Python backend.

One idea carries them all: a *strided view* ``(shape, strides, offset)`` of a flat list.
Permute, expand, slice, flip and windows are strided views of their input, so each is one call
to :func:`gather`, which walks the view's last dim with a C-level list slice
(``data[o:o + n*s:s]``) and everything else with a precomputed list of offsets. Plans are
cached by view, so a training loop that repeats its shapes builds each one once.
"""

from __future__ import annotations

from itertools import chain
from operator import add, itemgetter

from ember.primitives import broadcast_shapes

from .buffer import PyBuffer, cast_value, fix, prod


def strides_of(shape) -> tuple:
    """Row-major strides in elements.

    >>> strides_of((2, 3, 4))
    (12, 4, 1)
    """
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return tuple(reversed(out))


def _merged(shape, strides):
    """Drop unit dims and fuse neighbours that are contiguous in memory: fewer, longer runs."""
    dims = []
    for n, st in zip(shape, strides):
        if n == 1:
            continue
        if dims and dims[-1][1] == st * n:
            dims[-1] = (dims[-1][0] * n, st)
        else:
            dims.append((n, st))
    return dims


def _offsets(dims, base):
    offs = [base]
    for n, st in dims:
        steps = [k * st for k in range(n)]
        offs = [o + s for o in offs for s in steps]
    return offs


def _plan(shape, strides, offset):
    """(kind, payload, size) for reading one view: a single slice, one slice per run of the
    last dim, or (last stride 0) each value repeated; size is what caching it costs."""
    dims = _merged(shape, strides)
    if not dims:
        return "slice", slice(offset, offset + 1), 1
    n, st = dims[-1]
    offs = _offsets(dims[:-1], offset)
    if st == 0:
        return "repeat", (offs, range(n)), len(offs)
    slices = [slice(o, o + n * st if o + n * st >= 0 else None, st) for o in offs]
    if len(slices) == 1:
        return "slice", slices[0], 1
    return "slices", itemgetter(*slices), len(slices)


class _Cache(dict):
    """Plans by view, within a budget of stored offsets (about 60 bytes each): a training
    loop that repeats its shapes builds each plan once, a long session does not grow."""

    def __init__(self, build, size, budget=1_000_000):
        super().__init__()
        self.build, self.size, self.budget, self.used = build, size, budget, 0

    def lookup(self, key):
        hit = self.get(key)
        if hit is None:
            hit = self.build(*key)
            cost = self.size(hit)
            if cost <= self.budget // 4:
                if self.used + cost > self.budget:
                    self.clear()
                    self.used = 0
                self[key] = hit
                self.used += cost
        return hit


_PLANS = _Cache(_plan, lambda plan: plan[2])
_INDEX = _Cache(lambda sh, st, off: _offsets(_merged(sh, st), off), len)


def gather(data: list, shape: tuple, strides: tuple, offset: int = 0) -> list:
    """The elements of the strided view ``(shape, strides, offset)`` of ``data``, row-major.

    >>> gather([0, 1, 2, 3, 4, 5], (3, 2), (1, 3))       # the transpose of a 2x3 matrix
    [0, 3, 1, 4, 2, 5]
    """
    if not prod(shape):
        return []
    kind, plan, _ = _PLANS.lookup((tuple(shape), tuple(strides), offset))
    if kind == "slice":
        return data[plan]
    if kind == "slices":
        return list(chain.from_iterable(plan(data)))
    offs, reps = plan
    return [v for v in map(data.__getitem__, offs) for _ in reps]


def gather_index(shape: tuple, strides: tuple, offset: int = 0) -> list:
    """The flat positions of every element of a strided view (for scatter-adds)."""
    return _INDEX.lookup((tuple(shape), tuple(strides), offset))


def scatter_add(out: list, index: list, values) -> None:
    """``out[index[i]] += values[i]`` for every i; repeated positions accumulate."""
    for i, v in zip(index, values):
        out[i] += v


def broadcast_strides(shape, out_shape) -> tuple:
    """Strides that read ``shape`` as ``out_shape`` (0 along broadcast dims)."""
    lead = len(out_shape) - len(shape)
    st = strides_of(shape)
    return (0,) * lead + tuple(0 if n == 1 else s for n, s in zip(shape, st))


def expand_data(x: PyBuffer, out_shape) -> list:
    """``x``'s elements broadcast to ``out_shape`` (a new list)."""
    if len(x.data) == 1:
        return x.data * prod(out_shape)
    return gather(x.data, out_shape, broadcast_strides(x.shape, out_shape))


def permute_data(data, shape, axes) -> list:
    st = strides_of(shape)
    return gather(data, tuple(shape[a] for a in axes), tuple(st[a] for a in axes))


# ----------------------------------------------------------------------------- movement
def reshape(x, shape):
    # Shares the list, as NumPy's reshape shares memory: in-place assign reaches both.
    return PyBuffer(x.data, tuple(shape), x.dtype)


def permute(x, axes):
    axes = tuple(axes)
    src = x
    if x.view is not None:  # a permute of a permute is one permute
        src, first = x.view
        axes = tuple(first[a] for a in axes)
    shape = tuple(src.shape[a] for a in axes)
    if axes == tuple(range(len(axes))):
        return PyBuffer(src.data, shape, x.dtype)
    return PyBuffer(None, shape, x.dtype, (src, axes))


def expand(x, shape):
    shape = tuple(shape)
    return PyBuffer(expand_data(x, shape) if shape != x.shape else list(x.data), shape, x.dtype)


def slice_(x, starts, stops, steps):
    st = strides_of(x.shape)
    shape = tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
    offset = sum(a * s for a, s in zip(starts, st))
    return PyBuffer(gather(x.data, shape, tuple(s * c for s, c in zip(st, steps)), offset), shape, x.dtype)


def flip(x, axes):
    nd = len(x.shape)
    axes = {a % nd for a in axes} if nd else set()
    st = strides_of(x.shape)
    offset = sum((x.shape[d] - 1) * st[d] for d in axes)
    strides = tuple(-s if d in axes else s for d, s in enumerate(st))
    return PyBuffer(gather(x.data, x.shape, strides, offset), x.shape, x.dtype)


def pad_data(data, shape, widths, value) -> list:
    shape, widths = list(shape), [tuple(w) for w in widths]
    # Trailing dims without padding join their neighbour: one copy per long row.
    while len(shape) >= 2 and widths[-1] == (0, 0):
        n = shape.pop()
        widths.pop()
        shape[-1] *= n
        widths[-1] = (widths[-1][0] * n, widths[-1][1] * n)
    out_shape = [s + lo + hi for s, (lo, hi) in zip(shape, widths)]
    out = [value] * prod(out_shape)
    if not data:
        return out
    if not shape:
        return list(data)
    ost = strides_of(out_shape)
    base = sum(lo * s for (lo, _), s in zip(widths, ost))
    n = shape[-1]
    for k, o in enumerate(_offsets(list(zip(shape[:-1], ost[:-1])), base)):
        out[o : o + n] = data[k * n : k * n + n]
    return out


def pad(x, widths, value=0):
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, widths))
    return PyBuffer(pad_data(x.data, x.shape, widths, cast_value(value, x.dtype)), shape, x.dtype)


def concatenate(*xs, axis):
    first = xs[0].shape
    axis %= max(len(first), 1)
    outer, inner = prod(first[:axis]), prod(first[axis + 1 :])
    parts = [(x.data, x.shape[axis] * inner) for x in xs]
    out = []
    for o in range(outer):
        for data, n in parts:
            out += data[o * n : o * n + n]
    shape = first[:axis] + (sum(x.shape[axis] for x in xs),) + first[axis + 1 :]
    return PyBuffer(out, shape, xs[0].dtype)


# ----------------------------------------------------------------------------- indexing
def _checked(indices, n, axis):
    idx = indices.data
    if idx:
        lo, hi = min(idx), max(idx)
        if lo < -n or hi >= n:
            raise IndexError(f"index {hi if hi >= n else lo} is out of bounds for axis {axis} with size {n}")
        if lo < 0:
            idx = [i + n if i < 0 else i for i in idx]
    return idx


def take(x, indices, axis):
    shape = x.shape
    axis %= max(len(shape), 1)
    n = shape[axis]
    idx = _checked(indices, n, axis)
    outer, inner = prod(shape[:axis]), prod(shape[axis + 1 :])
    out_shape = shape[:axis] + indices.shape + shape[axis + 1 :]
    data = x.data
    if inner == 1:
        out = [data[i] for i in idx] if outer == 1 else [data[o + i] for o in range(0, outer * n, n) for i in idx]
    else:
        starts = [(o + i) * inner for o in range(0, outer * n, n) for i in idx]
        out = list(chain.from_iterable(data[s : s + inner] for s in starts))
    return PyBuffer(out, out_shape, x.dtype)


def index_add(x, indices, values, axis):
    shape = x.shape
    axis %= max(len(shape), 1)
    n = shape[axis]
    idx = _checked(indices, n, axis)
    outer, inner = prod(shape[:axis]), prod(shape[axis + 1 :])
    out, vals = list(x.data), values.data
    src = 0
    for o in range(0, outer * n, n):
        for i in idx:
            dst = (o + i) * inner
            if inner == 1:
                out[dst] += vals[src]
            else:
                out[dst : dst + inner] = map(add, out[dst : dst + inner], vals[src : src + inner])
            src += inner
    if x.dtype.kind == "b":
        return PyBuffer([v != 0 for v in out], shape, x.dtype)  # NumPy's bool add is "or"
    return PyBuffer(fix(x.dtype, out), shape, x.dtype)


# ----------------------------------------------------------------------------- windows
def _window_view(shape, kernel, stride, dilation):
    *lead, h, w = shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    *ls, s_h, s_w = strides_of(shape)
    return (*lead, oh, ow, kh, kw), (*ls, s_h * sh, s_w * sw, s_h * dh, s_w * dw)


def windows(x, kernel, stride, dilation=(1, 1)):
    shape, strides = _window_view(x.shape, kernel, stride, dilation)
    return PyBuffer(gather(x.data, shape, strides), shape, x.dtype)


def windows_grad(g, input_shape, kernel, stride, dilation=(1, 1)):
    input_shape = tuple(input_shape)
    shape, strides = _window_view(input_shape, kernel, stride, dilation)
    zero = 0.0 if g.dtype.kind == "f" else 0
    out = [zero] * prod(input_shape)
    scatter_add(out, gather_index(shape, strides), g.data)
    return PyBuffer(fix(g.dtype, out), input_shape, g.dtype)


# ----------------------------------------------------------------------------- reductions
def reduce_groups(data, shape, axes):
    """The inputs of each output element of a reduction over ``axes``, in output order, or
    None when no dim of size > 1 is reduced (each output is then its one input)."""
    red = set(axes)
    segs = []  # [size, reduced?] runs of non-unit dims
    for i, n in enumerate(shape):
        if n != 1:
            r = i in red
            if segs and segs[-1][1] == r:
                segs[-1][0] *= n
            else:
                segs.append([n, r])
    nred = sum(r for _, r in segs)
    if nred == 0:
        return None
    if nred == 1:
        k = next(i for i, (_, r) in enumerate(segs) if r)
        outer, r, inner = prod(n for n, _ in segs[:k]), segs[k][0], prod(n for n, _ in segs[k + 1 :])
        if inner == 1:
            return [data] if outer == 1 else [data[i : i + r] for i in range(0, outer * r, r)]
        span = r * inner  # a strided slice per output: data[start::inner] over one block
        return [data[b + j : b + span : inner] for b in range(0, outer * span, span) for j in range(inner)]
    keep = [i for i in range(len(shape)) if i not in red]
    flat = permute_data(data, shape, keep + sorted(red))
    r = prod(shape[i] for i in red)
    return [flat[i : i + r] for i in range(0, len(flat), r)]


def binary_operands(a, b):
    """Two buffers as equal-length element lists of their broadcast shape."""
    shape = a.shape if a.shape == b.shape else broadcast_shapes(a.shape, b.shape)
    x = a.data if a.shape == shape else expand_data(a, shape)
    y = b.data if b.shape == shape else expand_data(b, shape)
    return x, y, shape
