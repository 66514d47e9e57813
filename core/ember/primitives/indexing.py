"""Indexing primitives: ``take`` (gather) and its adjoint ``index_add`` (scatter-add)."""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from .record import ALL, NUMERIC, defprim
from .shapes import normalize_axis

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = ["take", "index_add"]


# ----------------------------------------------------------------------------- abstract rules
def _take(x, indices, axis):
    if indices[1].kind not in "iu":
        raise DTypeError(f"take: indices must be integers, got {indices[1]}")
    axis = normalize_axis(axis, len(x[0]))
    return x[0][:axis] + indices[0] + x[0][axis + 1 :], x[1]


def _index_add(x, indices, values, axis):
    axis = normalize_axis(axis, len(x[0]))
    expect = x[0][:axis] + indices[0] + x[0][axis + 1 :]
    if values[0] != expect:
        raise ShapeError(f"index_add: values of shape {values[0]} should have shape {expect}")
    return x


# ----------------------------------------------------------------------------- tier-2 cases
def _indexed_tier2(d, dt):
    """(x, axis, n): an array with at least one element along ``axis`` to index."""
    s = d.shape(min_dims=1, max_side=4)
    axis = d.sampled_from(range(len(s)))
    s = s[:axis] + (s[axis] or 1,) + s[axis + 1 :]
    return d.array(s, dt, special=True), axis, s[axis]


def _take_tier2(d, dt):
    x, axis, n = _indexed_tier2(d, dt)
    return d.case([x, d.indices(n)], dict(axis=axis))


def _index_add_tier2(d, dt):
    x, axis, n = _indexed_tier2(d, dt)
    idx = d.indices(n)
    values = d.array(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], dt, special=True)
    return d.case([x, idx, values], dict(axis=axis), terms=d.most_repeated(idx, n) + 1, scale=d.finite_max(x, values))


# ----------------------------------------------------------------------------- tier-3 cases
def _take_tier3(r):
    idx = r.array([[0, 3], [3, -1]], "int64")  # repeats: the VJP must accumulate
    return [
        r.case([r.normal((4, 3)), idx], dict(axis=0)),
        r.case([r.normal((2, 5)), r.array([4, 0, 4], "int64")], dict(axis=1)),
    ]


def _index_add_tier3(r):
    idx = r.array([0, 2, 0], "int64")
    return [r.case([r.normal((4, 3)), idx, r.normal((3, 3))], dict(axis=0), diff=(0, 2))]


# ----------------------------------------------------------------------------- the records
take = defprim(
    "take",
    "index",
    "take(x, indices, axis): NumPy take: out.shape = x.shape[:axis] + indices.shape + "
    "x.shape[axis+1:]; indices are integers in [-n, n) (negative counts from the end).",
    _take,
    dtypes=ALL,
    cases=_take_tier2,
    grad_cases=_take_tier3,
    second_order=True,
    vjp=lambda g, out, x, indices, axis: (x._full_like(0).index_add(axis, indices, g), None),
)
index_add = defprim(
    "index_add",
    "index",
    "index_add(x, indices, values, axis): a copy of x with `values` added at "
    "`indices` along `axis`, repeated indices accumulating (scatter-add); values.shape = "
    "take(x, indices, axis).shape.",
    _index_add,
    dtypes=NUMERIC,
    cases=_index_add_tier2,
    grad_cases=_index_add_tier3,
    vjp=lambda g, out, x, indices, values, axis: (g, None, g.take(indices, axis)),
)
