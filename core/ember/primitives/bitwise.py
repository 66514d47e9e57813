"""Bitwise primitives on integers: and, or, xor, not, the two shifts, and ``bitcast``.

Integers are two's complement of their dtype's width. Shift counts outside ``[0, bits)``
are defined (NumPy's rule, which C leaves undefined): the result is 0, or -1 for a right shift
of a negative value. None is differentiable. (bool tensors have the logical primitives.)
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import DTypeError
from .elementwise import _binary
from .record import ALL, defprim

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = [
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "bitcast",
]

INTEGERS = tuple(d.name for d in D.ALL + D.OPTIONAL if d.kind in "iu")


# ----------------------------------------------------------------------------- abstract rules
def _integer(dtype, name):
    if dtype is not None and dtype.kind not in "iu":
        raise DTypeError(f"{name} needs integer operands, got {dtype} (bool tensors use the logical ops)")


def _bitwise_binary(a, b):
    shape, dtype = _binary(a, b)
    _integer(dtype, "bitwise op")
    return shape, dtype


def _bitwise_not(x):
    _integer(x[1], "bitwise_not")
    return x


def _bitcast(x, dtype):
    dtype = D.get(dtype)
    if dtype.itemsize != x[1].itemsize:
        raise DTypeError(f"bitcast: {x[1]} ({x[1].itemsize} bytes) and {dtype} ({dtype.itemsize} bytes) differ in size")
    return x[0], dtype


# ----------------------------------------------------------------------------- tier-2 cases
def _bits(dt):
    return D.get(dt).itemsize * 8


def _bitwise_tier2(d, dt):
    shapes = d.broadcastable(2)
    top = 2 ** (_bits(dt) - (dt[0] == "i"))  # the dtype's range, at most +-2**20
    wide = dict(lo=-min(top, 2**20), hi=min(top - 1, 2**20)) if dt[0] == "i" else dict(lo=0, hi=min(top - 1, 2**20))
    a = d.array(shapes[0], dt, **wide)
    b = d.scalar(dt) if d.booleans() else d.array(shapes[1], dt, **wide)
    return d.case([a, b])


def _not_tier2(d, dt):
    return d.case([d.array(d.shape(), dt)])


def _shift_tier2(d, dt):
    shapes = d.broadcastable(2)
    counts = dict(lo=0 if dt[0] == "u" else -2, hi=_bits(dt) + 2)  # past the width on purpose
    a = d.array(shapes[0], dt)
    b = d.integers(0, _bits(dt) - 1) if d.booleans() else d.array(shapes[1], dt, **counts)
    return d.case([a, b])


def _bitcast_tier2(d, dt):
    same = [n for n in sorted(d.ctx.dtype_names) if D.get(n).itemsize == D.get(dt).itemsize and n != "bool"]
    # floats from their bits and back: every bit pattern of an integer is a float (NaNs included)
    x = d.array(d.shape(), dt, special=True)
    return d.case([x], dict(dtype=D.get(d.sampled_from(same))))


# ----------------------------------------------------------------------------- the records
BINARY = dict(
    group="bitwise",
    abstract=_bitwise_binary,
    cases=_bitwise_tier2,
    dtypes=INTEGERS,
    required=False,
    doc="op(a, b): elementwise on the two's-complement bits of integer operands, with broadcasting; "
    "a Python int operand takes the other's dtype.",
)
bitwise_and = defprim("bitwise_and", **BINARY)
bitwise_or = defprim("bitwise_or", **BINARY)
bitwise_xor = defprim("bitwise_xor", **BINARY)
bitwise_not = defprim(
    "bitwise_not",
    "bitwise",
    "bitwise_not(x): every bit flipped (-x - 1 for signed integers).",
    _bitwise_not,
    dtypes=INTEGERS,
    cases=_not_tier2,
    required=False,
)
SHIFT = dict(group="bitwise", abstract=_bitwise_binary, cases=_shift_tier2, dtypes=INTEGERS, required=False)
bitwise_left_shift = defprim(
    "bitwise_left_shift",
    **SHIFT,
    doc="bitwise_left_shift(a, b): a shifted left by b bits, wrapping to the width; counts outside [0, bits) give 0.",
)
bitwise_right_shift = defprim(
    "bitwise_right_shift",
    **SHIFT,
    doc="bitwise_right_shift(a, b): a shifted right by b bits, arithmetic for signed a (the sign fills), logical "
    "for unsigned; counts outside [0, bits) give 0, or -1 where a is negative.",
)
bitcast = defprim(
    "bitcast",
    "bitwise",
    "bitcast(x, dtype): the same bytes read as `dtype`, of the same size "
    "(float32 <-> int32/uint32, float64 <-> int64, bool -> uint8); same shape.",
    _bitcast,
    dtypes=ALL,
    cases=_bitcast_tier2,
    required=False,
)
