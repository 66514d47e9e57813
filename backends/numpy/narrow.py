"""The narrow storage formats for the NumPy-array backends: float4 e2m1, the e8m0 scale format
and the 4- and 2-bit integers (ember.dtypes.STORAGE).

A buffer holds one value a byte, the format's code in its low bits, in a one-field structured
dtype per format (``BUFFERS``) as float8.py does, and byte for byte as ml_dtypes holds them.
Files pack two 4-bit or four 2-bit codes a byte; packing and unpacking are the file readers'
job. Decoding is one lookup in a table of every code's value; encoding follows the rules below,
which are ml_dtypes' from 0.7 (and so the values ONNX's official cases expect; before 0.7 an
integer cast out of range kept the low bits), except that e8m0 rounds as torch does.

==============  =====================================  ==========================================
format          values                                 a value that is not one of them
==============  =====================================  ==========================================
int4, uint4     -8 .. 7, 0 .. 15                       float: toward zero, and 0 where that is
int2, uint2     -2 .. 1, 0 .. 3                        out of range, inf or NaN; integer: its
                                                       low bits (two's complement, as C casts)
float4_e2m1fn   ±0, .5, 1, 1.5, 2, 3, 4, 6             to nearest, ties to even; past 6: ±6;
                                                       NaN: a zero of the other sign
float8_e8m0fnu  2**-127 .. 2**127 (code - 127), NaN    to nearest, ties up (the float32 exponent
                                                       plus its first mantissa bit), sign ignored;
                                                       inf, NaN, past 2**127: NaN
==============  =====================================  ==========================================
"""

from __future__ import annotations

import numpy as np

from .float8 import nearest_even

#: integer format name -> (bits, signed)
INTEGERS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}
FORMATS = (*INTEGERS, "float4_e2m1fn", "float8_e8m0fnu")

#: the buffer dtype of each format
BUFFERS = {name: np.dtype([(name, "u1")]) for name in FORMATS}


def _integer_table(bits: int, signed: bool) -> np.ndarray:
    codes = np.arange(1 << bits)
    return (np.where(codes >> (bits - 1), codes - (1 << bits), codes) if signed else codes).astype(np.int8)


def _float4_table() -> np.ndarray:
    codes = np.arange(16)
    e, m = (codes >> 1) & 3, codes & 1
    value = np.where(e == 0, m * 0.5, (1 + m / 2) * np.exp2(e - 1))
    return (np.where(codes >> 3, -value, value)).astype(np.float32)


def _e8m0_table() -> np.ndarray:
    value = np.exp2(np.arange(256, dtype=np.float64) - 127)
    value[255] = np.nan
    return value.astype(np.float32)  # 2**-127 is a float32 subnormal, exact


TABLES = {name: _integer_table(*spec) for name, spec in INTEGERS.items()}
TABLES.update(float4_e2m1fn=_float4_table(), float8_e8m0fnu=_e8m0_table())


def to_values(x) -> np.ndarray:
    """The exact values of a narrow buffer: int8 for the integers, float32 for the floats.

    >>> to_values(from_values(np.array([-1, 7, 8]), "int4")).tolist()
    [-1, 7, -8]
    """
    x = np.asarray(x)
    table = TABLES[x.dtype.names[0]]
    return table[x.view("u1") & (len(table) - 1)]


def from_values(x, name: str) -> np.ndarray:
    """Encode float or integer values in format ``name`` by the rules of the module's table.

    >>> to_values(from_values(np.array([2.7, -3.5, 9.0, np.nan]), "int4")).tolist()
    [2, -3, 0, 0]
    >>> to_values(from_values(np.array([0.25, 0.75, 5.0, 7.0, -np.inf]), "float4_e2m1fn")).tolist()
    [0.0, 1.0, 4.0, 6.0, -6.0]
    >>> to_values(from_values(np.array([1.5, 1.4, 0.0, -4.0]), "float8_e8m0fnu")).tolist()
    [2.0, 1.0, 5.877471754111438e-39, 4.0]
    """
    x = np.asarray(x)
    if name in INTEGERS:
        code = _integer_codes(x, *INTEGERS[name])
    elif name == "float4_e2m1fn":
        code = _float4_codes(x)
    else:
        code = _e8m0_codes(x)
    return code.astype("u1").view(BUFFERS[name])


def _integer_codes(x: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    if x.dtype.kind in "fV":
        with np.errstate(invalid="ignore"):
            t = np.trunc(x.astype(np.float64))
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            x = np.where((t >= lo) & (t <= hi), t, 0)  # NaN fails both tests
    return x.astype(np.int64) & ((1 << bits) - 1)


def _float4_codes(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        x = x.astype(np.float64)
    code = nearest_even(TABLES["float4_e2m1fn"][:8].astype(np.float64), np.abs(x))  # saturates at 6
    negative = np.signbit(x)
    code = np.where(negative, code | 8, code)
    return np.where(np.isnan(x), np.where(negative, 0, 8), code)


def _e8m0_codes(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    exponent, guard, rest = (bits >> 23) & 0xFF, (bits >> 22) & 1, bits & 0x3FFFFF
    # a normal float's implied leading 1 makes a tie round up; a subnormal's leading 0 does not
    up = (guard == 1) & ((rest != 0) | (exponent > 0))
    return np.where(exponent == 0xFF, 0xFF, np.minimum(exponent + up, 0xFF))
