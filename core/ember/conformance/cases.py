"""Tier 2 inputs: the toolkit a primitive's case generator draws with (its random half).

Each primitive's record says which dtypes tier 2 covers (``P.add.dtypes``) and how to draw one
case (``P.add.cases(d, dtype)``, see ember.primitives). ``d`` is a :class:`Draw`: hypothesis's
``draw`` plus the shapes, arrays and scalars below, and it returns a :class:`Case` (arguments as
NumPy arrays or Python scalars, plus parameters). Shapes include empty dims and 0-d arrays;
floats include NaN, +-inf and -0.0 where the op is elementwise, a reduction or a movement
(matrix products and convolutions get finite values: their NaN behaviour is the elementwise
one, and finite inputs let the tolerance follow the accumulated rounding). Each array input
reaches the backend in one of four layouts: a permuted, strided (every other element) or
offset view made by the backend's own ``permute``/``slice``, or a fresh buffer, so that ops
are checked on buffers other ops produce. Hypothesis tries the simplest choices first: a
(3, 4)-like shape of random values, as a permuted view.

The same generator also runs under structure.Enumerate, which lists every answer to its
structural questions (shapes, broadcasting patterns, axes, keepdims, permutations, the side and
kind of a Python scalar) instead of drawing one: tier 2 checks those cases first, then the
hypothesis examples drawn here.

Value ranges are small on purpose: integer results must be exact, so no case overflows a
signed type; unsigned arithmetic wraps modulo 2**bits (NumPy, C and PyTorch agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ..primitives import FLOATS

# the first is what hypothesis tries first: a view, since fresh buffers are the easy case
LAYOUTS = ("permuted", "sliced", "offset", "contiguous")
SPECIALS = (math.nan, math.inf, -math.inf, -0.0)
#: the kinds of Python scalar a binary primitive takes on either side (the spec's weak operand)
SCALAR_KINDS = ("bool", "int", "float")


@dataclass
class Case:
    args: list
    params: dict = field(default_factory=dict)
    terms: int = 1  # values added into one output element (for the tolerance)
    scale: float = 1.0  # size of the largest of them


# ----------------------------------------------------------------------------- values
def int_bounds(dtype, lo=None, hi=None):
    if dtype.startswith("uint"):
        return (0 if lo is None else lo), ((3 if dtype == "uint8" else 9) if hi is None else hi)
    return (-20 if lo is None else lo), (20 if hi is None else hi)


def elements(dtype: str, lo=None, hi=None):
    """Finite element values of ``dtype``, small enough that integer results stay exact."""
    if dtype == "bool":
        return st.booleans()
    if dtype not in FLOATS:
        return st.integers(*int_bounds(dtype, lo, hi))
    width: Literal[16, 32, 64] = 16 if dtype == "float16" else 32 if dtype == "float32" else 64
    return st.floats(-10.0 if lo is None else lo, 10.0 if hi is None else hi, width=width, allow_subnormal=False)


def scalar(draw, dtype: str, special=False):
    """A Python scalar of ``dtype``'s kind (the spec's weak operand)."""
    if dtype == "bool":
        return draw(st.booleans())
    if dtype in FLOATS:
        if special and draw(st.integers(0, 3)) == 3:  # a special value one time in four
            return float(draw(st.sampled_from(SPECIALS)))
        return float(draw(elements(dtype)))
    return int(draw(elements(dtype)))


def array(draw, shape, dtype: str, special=False, lo=None, hi=None, ties=False):
    """An array of ``shape``: random values from a drawn seed (so even hypothesis's first,
    simplest example is not all zeros), then a few elements set to values hypothesis picks
    (boundaries, small integers) and, with ``special``, to NaN, +-inf or -0.0. With ``ties``
    the values come from a few small integers, so many elements are equal (argmax's ties)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype == "bool":
        out = rng.random(shape) < 0.5
    elif ties:
        out = rng.integers(0 if dtype.startswith("uint") else -2, 3, shape)
    elif dtype in FLOATS:
        out = rng.uniform(-10.0 if lo is None else lo, 10.0 if hi is None else hi, shape)
    else:
        low, high = int_bounds(dtype, lo, hi)
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
    return draw(
        st.just(typical)
        | hnp.array_shapes(min_dims=max(min_dims, 1), max_dims=max_dims, min_side=min(2, max_side), max_side=max_side)
        | hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)
    )


def broadcastable(draw, n, max_dims=3, max_side=3):
    """``n`` shapes that broadcast together: each drops some leading dims of a common shape
    and turns some dims into 1 (the simplest case: all equal)."""
    base = shape(draw, max_dims=max_dims, max_side=max_side)
    out = []
    for _ in range(n):
        # each operand, one time in three, drops leading dims and, one time in three, has 1s
        s = list(base[draw(st.integers(1, len(base))) :] if base and draw(st.integers(0, 2)) == 2 else base)
        if s and draw(st.integers(0, 2)) == 2:
            for d in draw(st.lists(st.integers(0, len(s) - 1), min_size=1, max_size=len(s), unique=True)):
                s[d] = 1
        out.append(tuple(s))
    return out


def most_repeated(indices, n) -> int:
    """How often the most frequent of ``indices`` (into a dim of size ``n``) occurs."""
    return int(np.bincount(indices.reshape(-1) % n).max()) if indices.size else 0


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
    return tuple(sorted(draw(st.lists(st.sampled_from(items), min_size=min_size, unique=True)))) if items else ()


# ----------------------------------------------------------------------------- the toolkit
class Draw:
    """What a case generator draws with: the helpers of this module with hypothesis's ``draw``
    bound, ``st`` (hypothesis.strategies) and ``draw`` for anything else, and ``ctx``, the
    run's conformance context (``ctx.dtype_names``: the dtypes the backend declares)."""

    st = st

    def __init__(self, draw, ctx):
        self.draw, self.ctx = draw, ctx

    def integers(self, lo, hi):
        return self.draw(st.integers(lo, hi))

    def booleans(self):
        return self.draw(st.booleans())

    def sampled_from(self, items):
        return self.draw(st.sampled_from(list(items)))

    choose = sampled_from

    def shape(self, min_dims=0, max_dims=3, min_side=0, max_side=4):
        return shape(self.draw, min_dims, max_dims, min_side, max_side)

    def broadcastable(self, n, max_dims=3, max_side=3):
        return broadcastable(self.draw, n, max_dims, max_side)

    def array(self, shape, dtype, special=False, lo=None, hi=None, ties=False):
        return array(self.draw, shape, dtype, special, lo, hi, ties)

    def scalar(self, dtype, special=False):
        return scalar(self.draw, dtype, special)

    def weak_scalar(self, kind, dtype, special=False):
        """A Python scalar of ``kind`` (bool, int, float) next to an array of ``dtype``: ints
        in the array's range (small and non-negative for unsigned dtypes)."""
        if kind == "int":
            return scalar(self.draw, dtype if dtype not in FLOATS and dtype != "bool" else "int32")
        return scalar(self.draw, "float64" if kind == "float" else "bool", special)

    def subset(self, items, min_size=0):
        return subset(self.draw, items, min_size)

    def axes(self, ndim, min_size=0, among=None):
        """Distinct axes (of ``among``, default all) of an ``ndim``-d array, in order, each spelt
        non-negative or negative."""
        among = list(range(ndim)) if among is None else list(among)
        return tuple(a - ndim if self.booleans() else a for a in subset(self.draw, among, min_size))

    def axis(self, ndim):
        return self.integers(-ndim, ndim - 1)

    def permutation(self, n):
        return tuple(self.draw(st.permutations(range(n))))

    def indices(self, n, max_dims=2):
        """Integer indices (int64 or int32) into a dim of size ``n``, negative ones included."""
        idt = self.sampled_from(("int64", "int32"))
        return array(self.draw, shape(self.draw, max_dims=max_dims, max_side=4), idt, lo=-n, hi=n - 1)

    most_repeated = staticmethod(most_repeated)
    scalar_kinds = SCALAR_KINDS
    finite_max = staticmethod(finite_max)
    case = staticmethod(Case)


# ----------------------------------------------------------------------------- layouts
def upload(backend, arr: np.ndarray, layout: str):
    """Put ``arr`` on ``backend`` as a buffer of the given layout (see the module doc)."""
    impls = backend.impls
    nd = arr.ndim
    junk = np.array(7, dtype=arr.dtype) if arr.dtype != np.bool_ else np.array(True)
    if layout == "permuted" and nd >= 2 and "permute" in impls:
        perm = tuple(reversed(range(nd)))  # its own inverse
        return impls["permute"](backend.from_numpy(np.array(arr.transpose(perm), order="C")), axes=perm)
    if layout == "sliced" and nd >= 1 and "slice" in impls:
        big = np.full(arr.shape[:-1] + (2 * arr.shape[-1],), junk, dtype=arr.dtype)
        big[..., ::2] = arr
        return impls["slice"](backend.from_numpy(big), starts=(0,) * nd, stops=big.shape, steps=(1,) * (nd - 1) + (2,))
    if layout == "offset" and nd >= 1 and "slice" in impls:
        big = np.concatenate([np.full((1,) + arr.shape[1:], junk, dtype=arr.dtype), arr])
        return impls["slice"](backend.from_numpy(big), starts=(1,) + (0,) * (nd - 1), stops=big.shape, steps=(1,) * nd)
    return backend.from_numpy(np.array(arr, order="C"))  # a copy (ascontiguousarray makes 0-d 1-d)


def describe(case: Case, layouts) -> str:
    """The case in one line, for failure messages."""

    def arg(a, layout):
        if isinstance(a, np.ndarray):
            return f"{a.dtype}{list(a.shape)}" + ("" if layout == "contiguous" else f"({layout})")
        return repr(a)

    params = ", ".join(f"{k}={v}" for k, v in case.params.items())
    return f"({', '.join(arg(a, l) for a, l in zip(case.args, layouts))}{', ' if params and case.args else ''}{params})"
