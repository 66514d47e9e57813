"""The storage dtypes on the pure-Python backend: bfloat16, the float8 formats, float4 e2m1,
the e8m0 scale format and the 4- and 2-bit integers (ember.dtypes.STORAGE).

A :class:`~.buffer.PyBuffer` of a storage dtype holds each element's exact value: a Python
float for the float formats, a Python int for the narrow integers. The primitives that only
move values (ember.dtypes.KEEPS) then work on it unchanged, and the upcast that dispatch
makes before any arithmetic is a plain copy. A value becomes its format's code only at the
byte boundary (``to_codes``; safetensors, transfers between backends, NumPy).

The rules are the NumPy backend's (backends/numpy/bfloat16.py, float8.py, narrow.py), written
with the standard library so that they run where NumPy cannot (Pyodide without its wheel):

==============  =====================================================================
format          a value that is not one of the format's
==============  =====================================================================
bfloat16        rounded to float32 first, then to nearest, ties to even
float8          to nearest, ties to the even code; past the largest finite value:
                infinity (e5m2) or NaN (the others), unless the caller clamps first
float4_e2m1fn   to nearest, ties to even; past 6: ±6; NaN: a zero of the other sign
float8_e8m0fnu  the float32 exponent plus its first mantissa bit; inf, NaN: NaN
int4 ... uint2  float: toward zero, and 0 out of range or NaN; integer: its low bits
==============  =====================================================================

>>> from ember import dtypes as D
>>> encode([1.0625, 1.1875, 500.0], D.float8_e4m3fn)
[1.0, 1.25, nan]
>>> encode([2.7, -9, 7], D.int4), to_codes([-1, 7], D.int4)
([2, 7, 7], [15, 7])
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left

from ember import dtypes as D

_NAN = math.nan

#: float8 format -> (exponent bits, mantissa bits, bias, has inf, unsigned zero: "fnuz")
FLOAT8 = {
    D.float8_e4m3fn: (4, 3, 7, False, False),
    D.float8_e4m3fnuz: (4, 3, 8, False, True),
    D.float8_e5m2: (5, 2, 15, True, False),
    D.float8_e5m2fnuz: (5, 2, 16, False, True),
}


def _float8_values(spec) -> list[float]:
    e_bits, m_bits, bias, has_inf, fnuz = spec
    top, values = (1 << e_bits) - 1, []
    for code in range(256):
        e, m = (code >> m_bits) & top, code & ((1 << m_bits) - 1)
        magnitude = math.ldexp(m, 1 - bias - m_bits) if e == 0 else math.ldexp((1 << m_bits) + m, e - bias - m_bits)
        if fnuz and code == 0x80:
            magnitude = _NAN  # the code of -0 is the only NaN
        elif not fnuz and e == top and (has_inf and m or not has_inf and m == (1 << m_bits) - 1):
            magnitude = _NAN
        elif has_inf and e == top:
            magnitude = math.inf
        values.append(-magnitude if code >> 7 else magnitude)
    return values


def _int_values(bits: int, signed: bool) -> list[int]:
    return [c - (1 << bits) if signed and c >> (bits - 1) else c for c in range(1 << bits)]


#: every code's value, by format (bfloat16 decodes through float32's bits instead)
VALUES: dict[D.DType, list] = {d: _float8_values(spec) for d, spec in FLOAT8.items()}
VALUES[D.float4_e2m1fn] = [s * v for s in (1.0, -1.0) for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)]
VALUES[D.float8_e8m0fnu] = [math.ldexp(1.0, c - 127) for c in range(255)] + [_NAN]
VALUES.update({d: _int_values(bits, d.kind == "i") for d, bits in D.NARROW_INTS.items()})


def _grid(d: D.DType) -> list[float]:
    """The non-negative finite values, increasing with their code, then one more where the
    format would go on (a value nearest to it overflows)."""
    values = []
    for v in VALUES[d][:0x80]:
        if not math.isfinite(v):
            break
        values.append(v)
    return values + [2 * values[-1] - values[-2]]


_GRIDS = {d: _grid(d) for d in FLOAT8}
_F4_GRID = VALUES[D.float4_e2m1fn][:8]  # saturating: its last value is the largest


def _nearest_even(grid: list[float], mag: float) -> int:
    """The index of ``grid``'s value nearest to ``mag``, ties to the even index; at or past
    the last value, the last index."""
    if mag >= grid[-1]:
        return len(grid) - 1
    hi = min(max(bisect_left(grid, mag), 1), len(grid) - 1)
    below, above = mag - grid[hi - 1], grid[hi] - mag
    return hi - 1 if below < above or below == above and (hi - 1) % 2 == 0 else hi


def _f32_bits(x: float) -> int:
    try:
        return struct.unpack("<I", struct.pack("<f", x))[0]
    except OverflowError:  # struct refuses what IEEE rounds to inf
        return 0xFF800000 if x < 0 else 0x7F800000


def _bf16_code(x: float) -> int:
    bits = _f32_bits(x)
    if x != x:
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def _bf16_value(code: int) -> float:
    return struct.unpack("<f", struct.pack("<I", code << 16))[0]


def _float8_code(x: float, d: D.DType) -> int:
    _, _, _, has_inf, fnuz = FLOAT8[d]
    nan_code = 0x80 if fnuz else 0x7F
    if x != x:
        return nan_code
    grid = _GRIDS[d]
    code = _nearest_even(grid, abs(x))
    overflow = code == len(grid) - 1
    if overflow:
        code = len(grid) - 1 if has_inf else nan_code  # e5m2: the code after the largest is inf
    if math.copysign(1.0, x) < 0 and not (fnuz and (code == 0 or overflow)):
        code |= 0x80
    return code


def _float4_code(x: float) -> int:
    negative = math.copysign(1.0, x) < 0
    if x != x:
        return 0 if negative else 8
    code = _nearest_even(_F4_GRID, abs(x))
    return code | 8 if negative else code


def _e8m0_code(x: float) -> int:
    bits = _f32_bits(x)
    exponent, guard, rest = (bits >> 23) & 0xFF, (bits >> 22) & 1, bits & 0x3FFFFF
    if exponent == 0xFF:
        return 0xFF
    up = guard == 1 and (rest != 0 or exponent > 0)  # a subnormal's leading 0 does not round up
    return min(exponent + up, 0xFF)


def _int_code(x, d: D.DType) -> int:
    bits = D.NARROW_INTS[d]
    if isinstance(x, float):
        lo, hi = D.int_range(d)
        x = int(x) if lo - 1 < x < hi + 1 else 0  # NaN and inf fail the test
    return int(x) & ((1 << bits) - 1)


def code_of(x, d: D.DType) -> int:
    """The code of one value in format ``d`` (the value rounded by the module's rules)."""
    if d is D.bfloat16:
        return _bf16_code(float(x))
    if d in FLOAT8:
        return _float8_code(float(x), d)
    if d is D.float4_e2m1fn:
        return _float4_code(float(x))
    if d is D.float8_e8m0fnu:
        return _e8m0_code(float(x))
    return _int_code(x, d)


def to_codes(values, d: D.DType) -> list[int]:
    """Each value's code in format ``d`` (exact for a buffer's own values, except that a NaN
    of several codes becomes one: e5m2's NaN payloads are not kept)."""
    if d in FLOAT8 and not FLOAT8[d][4]:  # a NaN keeps its sign bit: -NaN is what an overflow to -inf leaves
        return [(0xFF if math.copysign(1.0, x) < 0 else 0x7F) if x != x else _float8_code(x, d) for x in values]
    return [code_of(x, d) for x in values]


def from_codes(codes, d: D.DType) -> list:
    """The values of codes in format ``d``; bits above a narrow format's width are ignored."""
    if d is D.bfloat16:
        return [_bf16_value(c & 0xFFFF) for c in codes]
    table = VALUES[d]
    mask = len(table) - 1
    return [table[c & mask] for c in codes]


def encode(values, d: D.DType) -> list:
    """``values`` (Python numbers) rounded to format ``d``, as the values it holds.

    >>> encode([1.00390625, 3.0e38], D.bfloat16)
    [1.0, 3.00405527047391e+38]
    """
    if d is D.bfloat16:
        return [_bf16_value(_bf16_code(float(x))) for x in values]
    table = VALUES[d]
    if d in D.NARROW_INTS:
        return [table[_int_code(x, d)] for x in values]
    return [table[code_of(x, d)] for x in values]
