"""Creation primitives: constants, ranges and counter-based random bits. None is differentiable."""

from __future__ import annotations

from .. import dtypes as D
from .record import ALL, FLOATS, NUMERIC, defprim

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = ["full", "arange", "random_bits"]


# ----------------------------------------------------------------------------- abstract rules
def _full(shape, dtype, **_):
    return tuple(shape), D.get(dtype)


def _arange(start, stop, step, dtype):
    n = (
        max(0, -(-(stop - start) // step))
        if isinstance(step, int) and isinstance(start, int)
        else max(0, int(-(-(stop - start) // step)))
    )
    return (n,), D.get(dtype)


def _random_bits(shape, seed, offset):
    return tuple(shape), D.uint32


# ----------------------------------------------------------------------------- tier-2 cases
def _full_tier2(d, dt):
    return d.case([], dict(shape=d.shape(), value=d.scalar(dt, special=True), dtype=D.get(dt)))


def _arange_tier2(d, dt):
    if dt in FLOATS:
        start, stop = (d.integers(-40, 40) / 4 for _ in range(2))
        step = d.sampled_from((0.25, 1.0, 2.75, -0.5, -3.0))
    else:
        lo = 0 if dt.startswith("uint") else -20
        start, stop = d.integers(lo, 20), d.integers(lo, 20)
        step = d.sampled_from((1, 3, -1, -4))
    return d.case([], dict(start=start, stop=stop, step=step, dtype=D.get(dt)))


def _random_bits_tier2(d, dt):
    # a 64-bit key (both words matter) and an offset at each position within a Philox block
    offset = 4 * d.integers(0, 2**34) + d.sampled_from((0, 1, 2, 3))
    return d.case([], dict(shape=d.shape(max_side=5), seed=d.integers(0, 2**64 - 1), offset=offset))


# ----------------------------------------------------------------------------- the records
full = defprim(
    "full",
    "creation",
    "full(shape, value, dtype): a new tensor of `shape` filled with `value`.",
    _full,
    dtypes=ALL,
    cases=_full_tier2,
)
arange = defprim(
    "arange",
    "creation",
    "arange(start, stop, step, dtype): start, start+step, ... up to but excluding stop.",
    _arange,
    dtypes=NUMERIC,
    cases=_arange_tier2,
)
# no dtype parameter: the column of the op x dtype matrix is its output, uint32
random_bits = defprim(
    "random_bits",
    "creation",
    "random_bits(shape, seed, offset): uint32 words of Philox-4x32-10. "
    "Element i (row-major) is word (offset+i) % 4 of the block for counter (offset+i) // 4 under "
    "key `seed` (64-bit: low word, high word). Every backend must produce the same bits.",
    _random_bits,
    dtypes=("uint32",),
    cases=_random_bits_tier2,
)
