"""Tier 2 inputs: for each primitive, which dtypes it takes and how to draw a case.

``GENERATORS[name](draw, dtype, ctx)`` draws one :class:`Case` (arguments as NumPy arrays or
Python scalars, plus parameters) with hypothesis. Shapes include empty dims and 0-d arrays;
floats include NaN, +-inf and -0.0 where the op is elementwise, a reduction or a movement
(matrix products and convolutions get finite values: their NaN behaviour is the elementwise
one, and finite inputs let the tolerance follow the accumulated rounding). Each array input
reaches the backend in one of four layouts: a permuted, strided (every other element) or
offset view made by the backend's own ``permute``/``slice``, or a fresh buffer, so that ops
are checked on buffers other ops produce. Hypothesis tries the simplest choices first: a
(3, 4)-like shape of random values, as a permuted view.

Value ranges are small on purpose: integer results must be exact, so no case overflows a
signed type; unsigned arithmetic wraps modulo 2**bits (NumPy, C and PyTorch agree).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .. import dtypes as D

ALL = tuple(d.name for d in D.ALL)
NUMERIC = tuple(n for n in ALL if n != "bool")
FLOATS = ("float16", "float32", "float64")

#: primitive -> the dtypes its tier-2 cases cover (the columns of the op x dtype matrix).
#: ``random_bits`` has no dtype parameter: its column is its output, uint32.
DTYPES = {
    "full": ALL, "arange": NUMERIC, "random_bits": ("uint32",),
    **{op: FLOATS for op in "exp log sin cos tanh sqrt reciprocal erf floor div pow".split()},
    **{op: NUMERIC for op in "neg abs sign add sub mul maximum minimum sum max min argmax index_add "
                              "windows_grad".split()},
    **{op: ("bool",) for op in "logical_not logical_and logical_or logical_xor".split()},
    **{op: ALL for op in "eq ne lt le gt ge where cast reshape permute expand pad slice concatenate "
                         "flip take windows".split()},
    "matmul": ("int32", "int64") + FLOATS,
    **{op: FLOATS for op in "conv2d conv2d_grad_input conv2d_grad_weight".split()},
}

# the first is what hypothesis tries first: a view, since fresh buffers are the easy case
LAYOUTS = ("permuted", "sliced", "offset", "contiguous")
SPECIALS = (math.nan, math.inf, -math.inf, -0.0)


@dataclass
class Case:
    args: list
    params: dict = field(default_factory=dict)
    terms: int = 1            # values added into one output element (for the tolerance)
    scale: float = 1.0        # size of the largest of them


# ----------------------------------------------------------------------------- values
def _int_bounds(dtype, lo=None, hi=None):
    if dtype.startswith("uint"):
        return (0 if lo is None else lo), ((3 if dtype == "uint8" else 9) if hi is None else hi)
    return (-20 if lo is None else lo), (20 if hi is None else hi)


def elements(dtype: str, lo=None, hi=None):
    """Finite element values of ``dtype``, small enough that integer results stay exact."""
    if dtype == "bool":
        return st.booleans()
    if dtype not in FLOATS:
        return st.integers(*_int_bounds(dtype, lo, hi))
    width = {"float16": 16, "float32": 32, "float64": 64}[dtype]
    return st.floats(-10.0 if lo is None else lo, 10.0 if hi is None else hi, width=width,
                     allow_subnormal=False)


def scalar(draw, dtype: str, special=False):
    """A Python scalar of ``dtype``'s kind (the spec's weak operand)."""
    if dtype == "bool":
        return draw(st.booleans())
    if dtype in FLOATS:
        if special and draw(st.integers(0, 3)) == 3:        # a special value one time in four
            return float(draw(st.sampled_from(SPECIALS)))
        return float(draw(elements(dtype)))
    return int(draw(elements(dtype)))


def array(draw, shape, dtype: str, special=False, lo=None, hi=None):
    """An array of ``shape``: random values from a drawn seed (so even hypothesis's first,
    simplest example is not all zeros), then a few elements set to values hypothesis picks
    (boundaries, small integers) and, with ``special``, to NaN, +-inf or -0.0."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if dtype == "bool":
        out = rng.random(shape) < 0.5
    elif dtype in FLOATS:
        out = rng.uniform(-10.0 if lo is None else lo, 10.0 if hi is None else hi, shape)
    else:
        low, high = _int_bounds(dtype, lo, hi)
        out = rng.integers(low, high + 1, shape)
    out = np.asarray(out).astype(dtype)
    if out.size:
        values = elements(dtype, lo, hi)
        if special and dtype in FLOATS:
            values = values | st.sampled_from(SPECIALS)
        flat = out.reshape(-1)
        for i, v in draw(st.lists(st.tuples(st.integers(0, out.size - 1), values), max_size=3)):
            flat[i] = v
    return out


def shape(draw, min_dims=0, max_dims=3, min_side=0, max_side=4):
    """A shape; the first (simplest) one hypothesis tries is an ordinary (3, 4)-like shape,
    later ones include 0-d, empty and size-1 dims."""
    ndim = min(max(min_dims, 2), max_dims)
    typical = tuple(max(min_side, min(s, max_side)) for s in (3, 4, 2)[:ndim])
    # a third each: the typical shape, shapes without degenerate dims, anything (0-d, empty, 1s)
    return draw(st.just(typical)
                | hnp.array_shapes(min_dims=max(min_dims, 1), max_dims=max_dims, min_side=min(2, max_side),
                                   max_side=max_side)
                | hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side))


def broadcastable(draw, n, max_dims=3, max_side=3):
    """``n`` shapes that broadcast together: each drops some leading dims of a common shape
    and turns some dims into 1 (the simplest case: all equal)."""
    base = shape(draw, max_dims=max_dims, max_side=max_side)
    out = []
    for _ in range(n):
        # each operand, one time in three, drops leading dims and, one time in three, has 1s
        s = list(base[draw(st.integers(1, len(base))):] if base and draw(st.integers(0, 2)) == 2 else base)
        if s and draw(st.integers(0, 2)) == 2:
            for d in draw(st.lists(st.integers(0, len(s) - 1), min_size=1, max_size=len(s), unique=True)):
                s[d] = 1
        out.append(tuple(s))
    return out


def finite_max(*arrays) -> float:
    m = 0.0
    for a in arrays:
        if isinstance(a, np.ndarray) and a.size:
            f = np.abs(a[np.isfinite(a)].astype(np.float64)) if a.dtype.kind == "f" else np.abs(a.astype(np.float64))
            m = max(m, float(f.max()) if f.size else 0.0)
        elif isinstance(a, (int, float)) and math.isfinite(a):
            m = max(m, abs(a))
    return m


def subset(draw, items, min_size=0):
    return tuple(sorted(draw(st.lists(st.sampled_from(items), min_size=min_size, unique=True)))) \
        if items else ()


# ----------------------------------------------------------------------------- generators
def _full(draw, dt, ctx):
    return Case([], dict(shape=shape(draw), value=scalar(draw, dt, special=True), dtype=D.get(dt)))


def _arange(draw, dt, ctx):
    if dt in FLOATS:
        start, stop = (draw(st.integers(-40, 40)) / 4 for _ in range(2))
        step = draw(st.integers(1, 12).map(lambda k: k / 4) | st.integers(-12, -1).map(lambda k: k / 4))
    else:
        lo = 0 if dt.startswith("uint") else -20
        start, stop = draw(st.integers(lo, 20)), draw(st.integers(lo, 20))
        step = draw(st.integers(1, 4) | st.integers(-4, -1))
    return Case([], dict(start=start, stop=stop, step=step, dtype=D.get(dt)))


def _random_bits(draw, dt, ctx):
    return Case([], dict(shape=shape(draw, max_side=5), seed=draw(st.integers(0, 2 ** 64 - 1)),
                         offset=draw(st.integers(0, 2 ** 36))))


def _unary(draw, dt, ctx):
    return Case([array(draw, shape(draw), dt, special=True)])


def _binary(draw, dt, ctx):
    shapes = broadcastable(draw, 2)
    a = array(draw, shapes[0], dt, special=True)
    b = scalar(draw, dt, special=True) if draw(st.booleans()) else array(draw, shapes[1], dt, special=True)
    return Case([a, b])


def _logical(draw, dt, ctx):
    shapes = broadcastable(draw, 2)
    return Case([array(draw, s, "bool") for s in shapes])


def _where(draw, dt, ctx):
    shapes = broadcastable(draw, 3)
    cond = array(draw, shapes[0], "bool")
    scalar_at = draw(st.sampled_from((None, None, 1, 2)))
    vals = [scalar(draw, dt, special=True) if i == scalar_at else array(draw, shapes[i], dt, special=True)
            for i in (1, 2)]
    return Case([cond] + vals)


def _cast(draw, dt, ctx):
    target = draw(st.sampled_from(sorted(ctx.dtype_names)))
    if dt in FLOATS and target not in FLOATS and target != "bool":
        # float -> int truncates toward zero; NaN, inf and out-of-range values are undefined
        lo, hi = (0.0, 9.0) if target.startswith("uint") else (-20.0, 20.0)
        x = array(draw, shape(draw), dt, lo=lo, hi=hi)
    else:
        x = array(draw, shape(draw), dt, special=True)
    return Case([x], dict(dtype=D.get(target)))


def _sum(draw, dt, ctx):
    x = array(draw, shape(draw), dt, special=True)
    axes = subset(draw, list(range(x.ndim)))
    terms = math.prod(x.shape[a] for a in axes)
    return Case([x], dict(axes=axes, keepdims=draw(st.booleans())), terms=terms, scale=finite_max(x))


def _max_min(draw, dt, ctx):
    x = array(draw, shape(draw), dt, special=True)
    axes = subset(draw, [i for i, s in enumerate(x.shape) if s > 0])
    return Case([x], dict(axes=axes, keepdims=draw(st.booleans())))


def _argmax(draw, dt, ctx):
    s = shape(draw, min_dims=1)
    axis = draw(st.integers(0, len(s) - 1))
    s = s[:axis] + (max(s[axis], 1),) + s[axis + 1:]
    x = array(draw, s, dt)
    if dt in FLOATS and x.size and draw(st.booleans()):
        x.reshape(-1)[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from((math.inf, -math.inf)))
    return Case([x], dict(axis=axis, keepdims=draw(st.booleans())))


def _reshape(draw, dt, ctx):
    x = array(draw, shape(draw), dt, special=True)
    n, s = x.size, x.shape
    options = [(n,), s[::-1], s + (1,), (1,) + s]
    if len(s) >= 2:
        options.append((s[0] * s[1],) + s[2:])
    if n and n % 2 == 0:
        options.append((2, n // 2))
    return Case([x], dict(shape=tuple(draw(st.sampled_from(options)))))


def _permute(draw, dt, ctx):
    x = array(draw, shape(draw), dt, special=True)
    return Case([x], dict(axes=tuple(draw(st.permutations(range(x.ndim))))))


def _expand(draw, dt, ctx):
    x = array(draw, shape(draw, max_side=3), dt, special=True)
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    target = lead + tuple(draw(st.integers(0, 3)) if s == 1 else s for s in x.shape)
    return Case([x], dict(shape=target))


def _pad(draw, dt, ctx):
    x = array(draw, shape(draw, min_dims=1), dt, special=True)     # the front end never pads a 0-d
    widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in x.shape)
    return Case([x], dict(widths=widths, value=scalar(draw, dt, special=True)))


def _slice(draw, dt, ctx):
    x = array(draw, shape(draw, max_side=6), dt, special=True)
    starts = tuple(draw(st.integers(0, s)) for s in x.shape)
    stops = tuple(draw(st.integers(0, s)) for s in x.shape)
    steps = tuple(draw(st.integers(1, 3)) for _ in x.shape)
    return Case([x], dict(starts=starts, stops=stops, steps=steps))


def _concatenate(draw, dt, ctx):
    s = shape(draw, min_dims=1, max_side=3)
    axis = draw(st.integers(0, len(s) - 1))
    xs = [array(draw, s[:axis] + (draw(st.integers(0, 3)),) + s[axis + 1:], dt, special=True)
          for _ in range(draw(st.integers(1, 3)))]
    return Case(xs, dict(axis=axis))


def _flip(draw, dt, ctx):
    x = array(draw, shape(draw), dt, special=True)
    return Case([x], dict(axes=subset(draw, list(range(x.ndim)), min_size=1 if x.ndim else 0)))


def _indices(draw, n, max_dims=2):
    idt = draw(st.sampled_from(("int64", "int32")))
    return array(draw, shape(draw, max_dims=max_dims, max_side=4), idt, lo=-n, hi=n - 1)


def _take(draw, dt, ctx):
    s = shape(draw, min_dims=1, max_side=4)
    axis = draw(st.integers(0, len(s) - 1))
    s = s[:axis] + (max(s[axis], 1),) + s[axis + 1:]
    x = array(draw, s, dt, special=True)
    return Case([x, _indices(draw, s[axis])], dict(axis=axis))


def _index_add(draw, dt, ctx):
    s = shape(draw, min_dims=1, max_side=4)
    axis = draw(st.integers(0, len(s) - 1))
    s = s[:axis] + (max(s[axis], 1),) + s[axis + 1:]
    x = array(draw, s, dt, special=True)
    idx = _indices(draw, s[axis])
    values = array(draw, s[:axis] + idx.shape + s[axis + 1:], dt, special=True)
    repeats = int(np.bincount(idx.reshape(-1) % s[axis]).max()) if idx.size else 0
    return Case([x, idx, values], dict(axis=axis), terms=repeats + 1, scale=finite_max(x, values))


def _matmul(draw, dt, ctx):
    batch = broadcastable(draw, 2, max_dims=2)
    m, k, n = (draw(st.sampled_from((3, 1, 2, 4, 2, 3, 1, 4, 0))) for _ in range(3))    # 0 now and then
    a = array(draw, batch[0] + (m, k), dt, special=draw(st.booleans()))
    b = array(draw, batch[1] + (k, n), dt)
    return Case([a, b], terms=max(k, 1), scale=finite_max(a) * finite_max(b))


def _conv_geometry(draw):
    groups = draw(st.integers(1, 2))
    cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    # the smallest input the kernel fits in, plus a little
    h = draw(st.integers(max(1, dilation[0] * (kh - 1) + 1 - 2 * padding[0]), 6))
    w = draw(st.integers(max(1, dilation[1] * (kw - 1) + 1 - 2 * padding[1]), 6))
    n = draw(st.integers(1, 2))
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return (n, cg * groups, h, w), (og * groups, cg, kh, kw), (n, og * groups, oh, ow), params


def _conv2d(draw, dt, ctx):
    xs, ws, _, params = _conv_geometry(draw)
    x, w = array(draw, xs, dt), array(draw, ws, dt)
    return Case([x, w], params, terms=math.prod(ws[1:]), scale=finite_max(x) * finite_max(w))


def _conv2d_grad_input(draw, dt, ctx):
    xs, ws, gs, params = _conv_geometry(draw)
    g, w = array(draw, gs, dt), array(draw, ws, dt)
    terms = ws[0] // params["groups"] * ws[2] * ws[3]
    return Case([g, w], dict(input_shape=xs, **params), terms=terms, scale=finite_max(g) * finite_max(w))


def _conv2d_grad_weight(draw, dt, ctx):
    xs, ws, gs, params = _conv_geometry(draw)
    x, g = array(draw, xs, dt), array(draw, gs, dt)
    return Case([x, g], dict(weight_shape=ws, **params), terms=gs[0] * gs[2] * gs[3],
                scale=finite_max(x) * finite_max(g))


def _window_geometry(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    lead = tuple(draw(st.lists(st.integers(0, 2), max_size=2)))
    hw = tuple(draw(st.integers(d * (k - 1) + 1, 6)) for k, d in zip(kernel, dilation))
    out = tuple((s - d * (k - 1) - 1) // st_ + 1 for s, k, st_, d in zip(hw, kernel, stride, dilation))
    return lead + hw, lead + out + kernel, dict(kernel=kernel, stride=stride, dilation=dilation)


def _windows(draw, dt, ctx):
    xs, _, params = _window_geometry(draw)
    return Case([array(draw, xs, dt, special=True)], params)


def _windows_grad(draw, dt, ctx):
    xs, gs, params = _window_geometry(draw)
    g = array(draw, gs, dt, special=True)
    return Case([g], dict(input_shape=xs, **params), terms=math.prod(params["kernel"]), scale=finite_max(g))


GENERATORS = {
    "full": _full, "arange": _arange, "random_bits": _random_bits,
    **{op: _unary for op in "neg exp log sin cos tanh sqrt reciprocal abs sign floor erf logical_not".split()},
    **{op: _binary for op in "add sub mul div pow maximum minimum eq ne lt le gt ge".split()},
    **{op: _logical for op in "logical_and logical_or logical_xor".split()},
    "where": _where, "cast": _cast, "sum": _sum, "max": _max_min, "min": _max_min, "argmax": _argmax,
    "reshape": _reshape, "permute": _permute, "expand": _expand, "pad": _pad, "slice": _slice,
    "concatenate": _concatenate, "flip": _flip, "take": _take, "index_add": _index_add,
    "matmul": _matmul, "conv2d": _conv2d, "conv2d_grad_input": _conv2d_grad_input,
    "conv2d_grad_weight": _conv2d_grad_weight, "windows": _windows, "windows_grad": _windows_grad,
}


# ----------------------------------------------------------------------------- layouts
def upload(backend, arr: np.ndarray, layout: str):
    """Put ``arr`` on ``backend`` as a buffer of the given layout (see the module doc)."""
    impls = backend.impls
    nd = arr.ndim
    junk = np.array(7, dtype=arr.dtype) if arr.dtype != np.bool_ else np.array(True)
    if layout == "permuted" and nd >= 2 and "permute" in impls:
        perm = tuple(reversed(range(nd)))                      # its own inverse
        return impls["permute"](backend.from_numpy(np.array(arr.transpose(perm), order="C")), axes=perm)
    if layout == "sliced" and nd >= 1 and "slice" in impls:
        big = np.full(arr.shape[:-1] + (2 * arr.shape[-1],), junk, dtype=arr.dtype)
        big[..., ::2] = arr
        return impls["slice"](backend.from_numpy(big), starts=(0,) * nd, stops=big.shape,
                              steps=(1,) * (nd - 1) + (2,))
    if layout == "offset" and nd >= 1 and "slice" in impls:
        big = np.concatenate([np.full((1,) + arr.shape[1:], junk, dtype=arr.dtype), arr])
        return impls["slice"](backend.from_numpy(big), starts=(1,) + (0,) * (nd - 1), stops=big.shape,
                              steps=(1,) * nd)
    return backend.from_numpy(np.array(arr, order="C"))      # a copy (ascontiguousarray makes 0-d 1-d)


def describe(case: Case, layouts) -> str:
    """The case in one line, for failure messages."""
    def arg(a, layout):
        if isinstance(a, np.ndarray):
            return f"{a.dtype}{list(a.shape)}" + ("" if layout == "contiguous" else f"({layout})")
        return repr(a)
    params = ", ".join(f"{k}={v}" for k, v in case.params.items())
    return f"({', '.join(arg(a, l) for a, l in zip(case.args, layouts))}{', ' if params and case.args else ''}{params})"
