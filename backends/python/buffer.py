"""Storage and number formats of the pure-Python backend (standard library only).

A :class:`PyBuffer` is a flat row-major Python list plus a shape and an ember dtype. Floats are
Python floats (IEEE doubles); a float32 or float16 result is rounded to its format once, at the
end of each primitive (``array('f')`` / ``struct`` 'e'), so add, sub, mul, div and sqrt give
exactly NumPy's float32 bits (a double holds the exact float32 result before its one rounding).
Integers are Python ints wrapped to their width, bools are Python bools. A storage dtype
(bfloat16, float8, ...) holds its exact values, and its codes only as bytes (storage.py).
"""

from __future__ import annotations

import math
import struct
import sys
from array import array

from ember import dtypes as D

from . import storage

# array typecodes of each dtype (bool and float16 are handled by hand: array has neither).
TYPECODE = {
    D.uint8: "B",
    D.int8: "b",
    D.int16: "h",
    D.uint16: "H",
    D.int32: "i",
    D.int64: "q",
    D.float32: "f",
    D.float64: "d",
    D.uint32: "I" if array("I").itemsize == 4 else "L",
    D.uint64: "Q",
}
LITTLE = sys.byteorder == "little"
_BITS = {D.uint8: 8, D.int8: 8, D.int16: 16, D.uint16: 16, D.uint32: 32, D.int32: 32, D.int64: 64, D.uint64: 64}
_INF = math.inf


class PyBuffer:
    """A tensor's storage: ``data`` (flat row-major list), ``shape`` (tuple), ``dtype``.

    ``permute`` is lazy: it stores ``(source, axes)`` and builds its list on first use, so
    ``x @ w.T`` reads ``w``'s rows as columns without ever transposing them.

    >>> b = PyBuffer([1.0, 2.0, 3.0, 4.0], (2, 2), D.float32)
    >>> b.data, b.shape
    ([1.0, 2.0, 3.0, 4.0], (2, 2))
    """

    __slots__ = ("_data", "shape", "dtype", "view")

    def __init__(self, data, shape, dtype, view=None):
        self._data = data
        self.shape = shape
        self.dtype = dtype
        self.view = view  # (source PyBuffer, axes) while a permute is not yet built

    @property
    def data(self) -> list:
        if self._data is None:
            from .layout import permute_data

            src, axes = self.view
            self._data = permute_data(src.data, src.shape, axes)
            self.view = None
        return self._data

    def __repr__(self):
        return f"PyBuffer(shape={self.shape}, dtype={self.dtype})"


def prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


# ----------------------------------------------------------------------------- rounding
def round_f32(values) -> list:
    """Round doubles to the nearest float32 (overflow gives inf, as in C)."""
    return array("f", values).tolist()


def _f16(x):
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:  # struct refuses what IEEE rounds to inf
        return math.copysign(_INF, x)


def round_f16(values) -> list:
    """Round doubles to the nearest float16 (round half to even; overflow gives inf)."""
    values = values if isinstance(values, list) else list(values)
    fmt = f"<{len(values)}e"
    try:
        return list(struct.unpack(fmt, struct.pack(fmt, *values)))
    except OverflowError:
        return [_f16(x) for x in values]


def _wrap_one(x, bits, signed):
    x &= (1 << bits) - 1
    return x - (1 << bits) if signed and x >> (bits - 1) else x


def wrap_int(dtype, values) -> list:
    """Integers wrapped modulo 2**bits like NumPy's fixed-width arithmetic."""
    try:
        array(TYPECODE[dtype], values)  # a C-speed range check; the common case passes
        return values
    except OverflowError:
        bits, signed = _BITS[dtype], dtype.kind == "i"
        return [_wrap_one(x, bits, signed) for x in values]


def fix(dtype, values) -> list:
    """Bring freshly computed Python numbers back into ``dtype``'s format."""
    if dtype is D.float32:
        return round_f32(values)
    if dtype is D.float64 or dtype is D.bool_:
        return values
    if dtype is D.float16:
        return round_f16(values)
    return wrap_int(dtype, values)


# ----------------------------------------------------------------------------- casting
_I32_MIN, _I64_MIN = -(1 << 31), -(1 << 63)


def _float_to_int(x, bits):
    """C's truncating conversion as NumPy does it on x86-64: int32 and narrower go through a
    32-bit conversion, the rest through a 64-bit one; NaN, inf and out-of-range give the minimum
    (NumPy calls these undefined and warns; they are platform-specific)."""
    if x - x == 0:
        t = int(x)
        if bits <= 32 and -(1 << 31) <= t < (1 << 31) or bits > 32 and -(1 << 63) <= t < (1 << 63):
            return t
    return _I32_MIN if bits <= 32 else _I64_MIN


def to_ints(dtype, values, src_kind):
    if src_kind == "f":
        try:
            out = list(map(int, values))
            array("q" if _BITS[dtype] == 64 else "i", out)
        except (ValueError, OverflowError):
            bits = 32 if _BITS[dtype] < 32 or dtype is D.int32 else 64
            out = [_float_to_int(x, bits) for x in values]
        return wrap_int(dtype, out)
    return wrap_int(dtype, list(map(int, values)))  # also turns bools into ints


def convert(values, src: D.DType, dst: D.DType) -> list:
    """Elementwise cast (a new list): float to int truncates toward zero, to bool is x != 0."""
    if dst in D.STORAGE:
        return storage.encode(values if src is not D.bool_ else list(map(int, values)), dst)
    if dst is D.bool_:
        return [x != 0 for x in values]
    if dst.kind == "f":
        if dst is D.float32:
            return round_f32(values)
        floats = list(values) if src.kind == "f" else list(map(float, values))
        return floats if dst is D.float64 else round_f16(floats)
    return to_ints(dst, values, src.kind)


def scalar_kind(value) -> D.DType:
    return D.bool_ if isinstance(value, bool) else D.int64 if isinstance(value, int) else D.float64


def scalar_result_dtype(dtype: D.DType, value) -> D.DType:
    """NumPy 2's rule for ``array OP python_scalar``: the scalar takes the array's dtype unless it is
    of a higher kind (bool < int < float), then the default dtype of that kind wins."""
    kind = scalar_kind(value)
    order = "biuf"
    if order.index(kind.kind) <= order.index(dtype.kind):
        return dtype
    return kind


def scalar_as(dtype: D.DType, value):
    """A Python scalar as an element of ``dtype`` (``0.1`` becomes float32(0.1) for float32)."""
    if dtype.kind == "f":
        return convert([float(value)], D.float64, dtype)[0]
    if dtype is D.bool_:
        return bool(value)
    return int(value)


def cast_value(value, dtype: D.DType):
    """One Python number converted to ``dtype`` with the cast rules (full, pad values)."""
    return convert([value], scalar_kind(value), dtype)[0]


# ----------------------------------------------------------------------------- bytes
def from_bytes(data: bytes, n: int, dtype: D.DType) -> list:
    if len(data) != n * dtype.itemsize:
        raise ValueError(f"{len(data)} bytes do not hold {n} elements of {dtype} ({n * dtype.itemsize} bytes expected)")
    if dtype is D.bool_:
        return [b != 0 for b in data]
    if dtype is D.float16:
        return list(struct.unpack(f"<{n}e", data))
    if dtype in D.STORAGE:
        return storage.from_codes(from_bytes(data, n, D.uint16 if dtype.itemsize == 2 else D.uint8), dtype)
    arr = array(TYPECODE[dtype])
    arr.frombytes(data)
    if not LITTLE:
        arr.byteswap()
    return arr.tolist()


def to_bytes(values: list, dtype: D.DType) -> bytes:
    if dtype is D.bool_:
        return bytes(values)
    if dtype is D.float16:
        return struct.pack(f"<{len(values)}e", *values)
    if dtype in D.STORAGE:
        return to_bytes(storage.to_codes(values, dtype), D.uint16 if dtype.itemsize == 2 else D.uint8)
    arr = array(TYPECODE[dtype], values)
    if not LITTLE:
        arr.byteswap()
    return arr.tobytes()
