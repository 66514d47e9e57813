"""Reductions: sum, max, min over a tuple of axes; argmax along one.

(The records are named ``sum``, ``max`` and ``min``, so this module does not use those builtins.)
"""

from __future__ import annotations

import math

from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from .adjoint import keepdims_shape
from .record import FLOATS, NUMERIC, defprim
from .shapes import normalize_axis

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = ["sum", "max", "min", "argmax"]


# ----------------------------------------------------------------------------- abstract rules
def _reduce_shape(shape, axes, keepdims):
    axes = {normalize_axis(a, len(shape)) for a in axes}
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _reduce(x, axes, keepdims=False):
    if x[1] is D.bool_:
        raise DTypeError("cannot reduce a bool tensor; cast it to int64 first")
    return _reduce_shape(x[0], axes, keepdims), x[1]


def _reduce_nonempty(x, axes, keepdims=False):
    for a in axes:
        if x[0][normalize_axis(a, len(x[0]))] == 0:
            raise ShapeError(f"max/min over an empty dim {a} of shape {x[0]} has no identity")
    return _reduce(x, axes, keepdims)


def _argmax(x, axis, keepdims=False):
    _reduce_nonempty(x, (axis,), keepdims)
    return _reduce_shape(x[0], (axis,), keepdims), D.int64


# ----------------------------------------------------------------------------- tier-2 cases
def _sum_tier2(d, dt):
    x = d.array(d.shape(), dt, special=True)
    axes = d.axes(x.ndim)
    terms = math.prod(x.shape[a] for a in axes)
    return d.case([x], dict(axes=axes, keepdims=d.booleans()), terms=terms, scale=d.finite_max(x))


def _max_min_tier2(d, dt):
    x = d.array(d.shape(), dt, special=True, ties=d.booleans())
    axes = d.axes(x.ndim, among=[i for i, s in enumerate(x.shape) if s > 0])
    return d.case([x], dict(axes=axes, keepdims=d.booleans()))


def _argmax_tier2(d, dt):
    s = d.shape(min_dims=1)
    axis = d.axis(len(s))
    a = axis % len(s)
    s = s[:a] + (s[a] or 1,) + s[a + 1 :]
    x = d.array(s, dt, ties=d.booleans())  # ties: the first maximum wins, floats and ints alike
    if dt in FLOATS and x.size and d.booleans():
        x.reshape(-1)[d.integers(0, x.size - 1)] = d.sampled_from((math.inf, -math.inf))
    return d.case([x], dict(axis=axis, keepdims=d.booleans()))


# ----------------------------------------------------------------------------- tier-3 cases
def _sum_tier3(r):
    x = r.normal((3, 4, 2))
    return [
        r.case([x], dict(axes=(0, 2), keepdims=False)),
        r.case([x], dict(axes=(1,), keepdims=True)),
        r.case([x], dict(axes=(), keepdims=False), label="no axes"),
    ]


def _extremum_tier3(r):
    # distinct values at least 0.25 apart: one winner per reduction, and finite differences see it
    x = r.array(r.rng.permutation(24).reshape(2, 3, 4) * 0.25 + r.rng.uniform(0, 0.05, (2, 3, 4)))
    return [r.case([x], dict(axes=(1,), keepdims=False)), r.case([x], dict(axes=(0, 2), keepdims=True))]


# ----------------------------------------------------------------------------- VJP rules
def _sum_vjp(g, out, x, axes, keepdims=False):
    if not keepdims:
        g = g.reshape(keepdims_shape(x.shape, axes))
    return (g.expand(x.shape),)


def _extremum_vjp(g, out, x, axes, keepdims=False):
    kshape = keepdims_shape(x.shape, axes)
    if not keepdims:
        g, out = g.reshape(kshape), out.reshape(kshape)
    mask = (x == out).to(g.dtype)  # ties share the gradient evenly, as in torch.amax
    return (g * mask / mask.sum(tuple(axes), keepdim=True),)


# ----------------------------------------------------------------------------- the records
sum = defprim(
    "sum",
    "reduce",
    "sum(x, axes, keepdims): sum over `axes`, a tuple of distinct dims, each in "
    "[-ndim, ndim) (negative counts from the end; () = identity, all dims = NumPy's axis=None); "
    "keepdims keeps them as size 1. Same dtype as x (float16 accumulates in float32). Empty reductions give 0.",
    _reduce,
    dtypes=NUMERIC,
    cases=_sum_tier2,
    grad_cases=_sum_tier3,
    vjp=_sum_vjp,
)
EXTREMUM = dict(
    group="reduce",
    abstract=_reduce_nonempty,
    dtypes=NUMERIC,
    cases=_max_min_tier2,
    grad_cases=_extremum_tier3,
    vjp=_extremum_vjp,
    doc="max/min(x, axes, keepdims): over `axes` (as for sum); NaN propagates (any NaN gives NaN); "
    "an empty axis is an error.",
)
max = defprim("max", **EXTREMUM, second_order=True)
min = defprim("min", **EXTREMUM)
argmax = defprim(
    "argmax",
    "reduce",
    "argmax(x, axis, keepdims): index (int64) of the first maximum along one axis "
    "(in [-ndim, ndim)): of tied maxima the lowest index wins, for floats and integers alike. NaN inputs "
    "are not part of the contract (not generated).",
    _argmax,
    dtypes=NUMERIC,
    cases=_argmax_tier2,
)
