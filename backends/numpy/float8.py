"""float8 storage for the NumPy-array backends: the four 8-bit float formats ONNX and torch know.

A buffer holds the bytes in a one-field structured dtype per format (``BUFFERS``), as
bfloat16.py does for bfloat16: NumPy has no arithmetic for it, so dispatch computes on the
float32 upcast (ember.dtypes.STORAGE). Decoding is one lookup in a 256-entry table. Encoding
rounds to the nearest value, ties to the even code (the even mantissa), by a binary search in
the table of the format's non-negative finite values; a value past the largest finite one
rounds as if the format went on, and what rounds beyond it overflows: to infinity in e5m2,
to NaN in the formats without infinities. Saturating instead (ONNX's Cast) is a clamp first.

=============  ====  ========  ====  ==============  ===========  =========
format         bias  largest   inf   NaN             negative 0   like
=============  ====  ========  ====  ==============  ===========  =========
float8_e4m3fn     7       448  no    S.1111.111      yes          OCP E4M3
float8_e4m3fnuz   8       240  no    1.0000.000      no           Graphcore
float8_e5m2      15     57344  yes   S.11111.xx≠0    yes          IEEE-like
float8_e5m2fnuz  16     57344  no    1.00000.00      no           Graphcore
=============  ====  ========  ====  ==============  ===========  =========
"""

from __future__ import annotations

import numpy as np

#: format name -> (exponent bits, mantissa bits, bias, has inf, unsigned zero: "fnuz")
FORMATS = {
    "float8_e4m3fn": (4, 3, 7, False, False),
    "float8_e4m3fnuz": (4, 3, 8, False, True),
    "float8_e5m2": (5, 2, 15, True, False),
    "float8_e5m2fnuz": (5, 2, 16, False, True),
}

#: the buffer dtype of each format
BUFFERS = {name: np.dtype([(name, "u1")]) for name in FORMATS}


def _decode_table(name: str) -> np.ndarray:
    """The float32 value of each of the 256 codes."""
    e_bits, m_bits, bias, has_inf, fnuz = FORMATS[name]
    codes = np.arange(256)
    sign = np.where(codes >> 7, -1.0, 1.0)
    e, m = (codes >> m_bits) & ((1 << e_bits) - 1), codes & ((1 << m_bits) - 1)
    normal = (1 + m / (1 << m_bits)) * np.exp2(e - bias)
    value = sign * np.where(e == 0, m * np.exp2(1 - bias - m_bits), normal)
    top = (1 << e_bits) - 1
    if fnuz:
        value[0x80] = np.nan  # the code of -0 is the only NaN
    elif has_inf:
        value[(e == top) & (m == 0)] = sign[(e == top) & (m == 0)] * np.inf
        value[(e == top) & (m != 0)] = np.nan
    else:
        value[(e == top) & (m == (1 << m_bits) - 1)] = np.nan
    return value.astype(np.float32)


TABLES = {name: _decode_table(name) for name in FORMATS}


def largest(name: str) -> float:
    """The format's largest finite value (what a saturating cast clamps to).

    >>> largest("float8_e4m3fn"), largest("float8_e5m2")
    (448.0, 57344.0)
    """
    return float(np.nanmax(np.where(np.isinf(TABLES[name]), np.nan, TABLES[name])))


def to_float(x) -> np.ndarray:
    """The exact float32 values of a float8 buffer."""
    x = np.asarray(x)
    return TABLES[x.dtype.names[0]][x.view("u1")]


def nearest_even(grid: np.ndarray, mag: np.ndarray) -> np.ndarray:
    """The index of the value of the increasing ``grid`` nearest to each of ``mag``, ties to
    the even index; at or past the last value (NaN too), the last index.

    >>> nearest_even(np.array([0.0, 0.5, 1.0, 1.5]), np.array([0.25, 0.75, 1.2, 9.0])).tolist()
    [0, 2, 2, 3]
    """
    hi = np.clip(np.searchsorted(grid, mag), 1, len(grid) - 1)
    lo = hi - 1
    below, above = mag - grid[lo], grid[hi] - mag
    code = np.where((below < above) | ((below == above) & (lo % 2 == 0)), lo, hi)
    return np.where(mag >= grid[-1], len(grid) - 1, code)


def from_float(x, name: str) -> np.ndarray:
    """Round float values to float8 format ``name``: to nearest, ties to even, overflow to inf
    (e5m2) or NaN (the others); NaN stays NaN.

    >>> to_float(from_float(np.array([1.0, 1.0625, 1.1875, 500.0, -0.0], np.float32), "float8_e4m3fn")).tolist()
    [1.0, 1.0, 1.25, nan, -0.0]
    """
    table = TABLES[name]
    _, _, _, has_inf, fnuz = FORMATS[name]
    with np.errstate(invalid="ignore"):  # signalling NaNs become quiet ones
        x = np.asarray(x, dtype=np.float64)  # float32 values and the midpoints below are exact in float64
    positive = table[:0x80].astype(np.float64)  # codes 0..127: 0, the subnormals, the normals, by value
    finite = int(np.argmax(~np.isfinite(positive))) if not np.isfinite(positive).all() else 0x80
    values = positive[:finite]  # the non-negative finite values, increasing with their code
    step = values[-1] - values[-2]
    grid = np.append(values, values[-1] + step)  # one more, where the format would go on: overflow
    code = nearest_even(grid, np.abs(x))
    overflow = code == len(grid) - 1
    nan_code = 0x80 if fnuz else 0x7F
    inf_code = finite  # e5m2: the code after the largest finite value is infinity
    code = np.where(overflow, inf_code if has_inf else nan_code, code)
    negative = np.signbit(x) & ~(fnuz & (code == 0)) & ~(fnuz & overflow)  # fnuz has no -0 (0x80 is NaN)
    code = np.where(negative, code | 0x80, code)
    code = np.where(np.isnan(x), nan_code, code)
    return code.astype("u1").view(BUFFERS[name])


def ml_dtypes_type(name: str):
    """The ``ml_dtypes`` scalar type of format ``name``, or None where ml_dtypes is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return getattr(ml_dtypes, name)
