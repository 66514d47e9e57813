"""Ordering primitives: ``argsort`` and ``argtopk`` along one axis, and the scan ``cumsum``.

The sorting primitives return indices only (int64, no gradient), like ``argmax``: the front
end gathers the values with them (``Tensor.sort`` returns ``(values, indices)`` as torch does),
so the values' gradient is gather's — the output gradient scattered back to the selected
positions — and a backend implements one sort, not a sort per output.

Order rules, one for every backend: NaN sorts as the largest value (last ascending, first
descending, as in torch); ties keep their order along the axis (stable), so ``argtopk`` takes
the lower index first among equal values (ONNX TopK's rule); -0.0 equals 0.0.
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import ShapeError
from .record import ALL, NUMERIC, defprim
from .shapes import normalize_axis

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = ["argsort", "argtopk", "cumsum"]


# ----------------------------------------------------------------------------- abstract rules
def _argsort(x, axis, descending=False):
    normalize_axis(axis, len(x[0]))
    return x[0], D.int64


def _argtopk(x, k, axis, largest=True):
    a = normalize_axis(axis, len(x[0]))
    n = x[0][a] if x[0] else 1
    if not (0 <= k <= n if x[0] else k == 1):  # a 0-d tensor is its own top 1
        raise ShapeError(f"topk: k={k} is out of range for dim {axis} of size {n} in shape {x[0]}")
    return (x[0][:a] + (k,) + x[0][a + 1 :]) if x[0] else (), D.int64


def _cumsum(x, axis, reverse=False):
    normalize_axis(axis, len(x[0]))
    return x


# ----------------------------------------------------------------------------- tier-2 cases
def _along(d, dt, special=True):
    """(x, axis): values with repeats (ties), NaN and infinities along a drawn axis."""
    s = d.shape(min_dims=1, max_side=6)
    axis = d.integers(-len(s), len(s) - 1)
    # few distinct values, so that ties occur and stability is checked
    return d.array(s, dt, special=special, lo=-3, hi=3).round() if dt[0] == "f" else d.array(s, dt), axis


def _argsort_tier2(d, dt):
    x, axis = _along(d, dt)
    return d.case([x], dict(axis=axis, descending=d.booleans()))


def _argtopk_tier2(d, dt):
    x, axis = _along(d, dt)
    n = x.shape[axis] if x.ndim else 1
    return d.case([x], dict(k=d.integers(0, n), axis=axis, largest=d.booleans()))


def _cumsum_tier2(d, dt):
    x, axis = _along(d, dt)
    n = x.shape[axis] if x.ndim else 1
    return d.case([x], dict(axis=axis, reverse=d.booleans()), terms=n, scale=d.finite_max(x))


# ----------------------------------------------------------------------------- tier-3 cases
def _cumsum_tier3(r):
    x = r.normal((3, 4, 2))
    return [
        r.case([x], dict(axis=1)),
        r.case([x], dict(axis=0, reverse=True), label="reverse"),
        r.case([r.normal((5,))], dict(axis=-1), label="1-d"),
    ]


# ----------------------------------------------------------------------------- the records
argsort = defprim(
    "argsort",
    "sort",
    "argsort(x, axis, descending): int64 indices that sort x along `axis`, ascending "
    "or descending; stable (ties keep their order); NaN sorts as the largest value.",
    _argsort,
    dtypes=ALL,
    cases=_argsort_tier2,
    required=False,
)
argtopk = defprim(
    "argtopk",
    "sort",
    "argtopk(x, k, axis, largest): int64 indices of the k largest (largest=True) or "
    "smallest values along `axis`, in that order; ties take the lower index first; NaN is the largest.",
    _argtopk,
    dtypes=ALL,
    cases=_argtopk_tier2,
    required=False,
)
cumsum = defprim(
    "cumsum",
    "scan",
    "cumsum(x, axis, reverse): inclusive running sum along `axis`, from the end when "
    "`reverse`; same dtype (integers wrap; float16 accumulates in float32).",
    _cumsum,
    dtypes=NUMERIC,
    cases=_cumsum_tier2,
    grad_cases=_cumsum_tier3,
    second_order=True,
    vjp=lambda g, out, x, axis, reverse=False: (cumsum(g, axis=axis, reverse=not reverse),),  # type: ignore[has-type]
    required=False,
)
