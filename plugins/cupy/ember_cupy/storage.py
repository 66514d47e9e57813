"""The storage dtypes on the cupy backend: bfloat16, the float8 formats, float4 e2m1, the e8m0
scale format and the 4- and 2-bit integers (ember.dtypes.STORAGE).

CuPy has no record dtypes, so where the NumPy backend keeps a one-field record array, a buffer
here is a :class:`Stored`: the codes on the device (uint16 for bfloat16, a byte for the others,
as ml_dtypes holds them) and the ember dtype. The primitives that only move values
(ember.dtypes.KEEPS) run on the codes; every other primitive gets the float32 (or int32)
upcast from dispatch, never a Stored.

- Decoding runs on the device: bfloat16 is a shift into float32's top bits, the byte formats a
  lookup in the table of every code's value (the NumPy backend's tables, uploaded once).
- Encoding bfloat16 runs on the device too (integer round to nearest even, NaN kept quiet).
- Text (``ember.string``) stays on the host as NumPy object arrays of ``str``, as the NumPy
  backend holds it: its moving primitives, ``==`` and ``!=`` run there through the NumPy
  backend's table, and a comparison's bools go to the device.
  The byte formats are encoded on the host by the NumPy backend's rules (a download and an
  upload, counted in the backend's ``transfers``): casting into float8 or int4 converts a
  model or a node's result, it is not a step of a training loop.

>>> import numpy
>>> from types import SimpleNamespace
>>> host = SimpleNamespace(xp=numpy, _upload=numpy.array, _download=numpy.array)
>>> s = encode(numpy.array([1.0, 1.00390625, -3.5], numpy.float32), D.bfloat16, host)
>>> s, decode(s, numpy).tolist()
(Stored((3,), bfloat16), [1.0, 1.0, -3.5])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import dtypes as D
from ember.backends.numpy import bfloat16 as bf16, float8 as f8, narrow

#: the primitives that run on a Stored's codes unchanged (cast, full and arange are below)
MOVES = D.KEEPS - {"cast"}


class Stored:
    """A storage-dtype buffer: ``codes`` (an array on the backend's device) and ``dtype``."""

    __slots__ = ("codes", "dtype")

    # Array arithmetic on a Stored must fail, not compare or combine the objects: dispatch then
    # computes on the upcast (ember.dtypes.STORAGE), as it does for the NumPy backend's records.
    __array_ufunc__ = None

    def __array_function__(self, func, types, args, kwargs):
        return NotImplemented

    def __init__(self, codes: Any, dtype: D.DType):
        self.codes, self.dtype = codes, dtype

    shape = property(lambda self: self.codes.shape)
    ndim = property(lambda self: self.codes.ndim)
    size = property(lambda self: self.codes.size)
    nbytes = property(lambda self: self.codes.nbytes)

    def __repr__(self) -> str:
        return f"Stored({tuple(self.shape)}, {self.dtype})"


def code_dtype(dtype: D.DType) -> str:
    return "<u2" if dtype is D.bfloat16 else "u1"


def _table(dtype: D.DType) -> np.ndarray:
    return f8.TABLES[dtype.name] if dtype.name in f8.TABLES else narrow.TABLES[dtype.name]


_TABLES: dict = {}  # (xp module name, dtype) -> the table on that device


def decode(x: Stored, xp) -> Any:
    """The exact values of ``x``: float32, or int8 for the 4- and 2-bit integers."""
    if x.dtype is D.bfloat16:
        return (x.codes.astype(xp.uint32) << 16).view(xp.float32)
    key = (xp.__name__, x.dtype)
    if key not in _TABLES:
        _TABLES[key] = xp.asarray(_table(x.dtype))
    table = _TABLES[key]
    return table[x.codes & (len(table) - 1)]


def host_codes(values: np.ndarray, dtype: D.DType) -> np.ndarray:
    """The codes of host ``values`` in ``dtype`` by the NumPy backend's rules."""
    if dtype is D.bfloat16:
        buf = bf16.from_float(values)
    elif dtype.name in f8.FORMATS:
        buf = f8.from_float(values, dtype.name)
    else:
        buf = narrow.from_values(values, dtype.name)
    return buf.view(code_dtype(dtype))


def encode(values: Any, dtype: D.DType, backend: Any) -> Stored:
    """``values`` (an array on the backend's device) rounded to storage dtype ``dtype``."""
    xp = backend.xp
    if dtype is D.bfloat16:  # on the device: NumPy's bfloat16.from_float, in xp
        x = values.astype(xp.float32)
        bits = x.view(xp.uint32).astype(xp.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        rounded = xp.where(xp.isnan(x), (bits >> 16) | 0x40, rounded)
        return Stored(rounded.astype(xp.uint16), dtype)
    codes = host_codes(np.asarray(backend._download(values)), dtype)
    return Stored(backend._upload(np.ascontiguousarray(codes)), dtype)


def is_text(a: Any) -> bool:
    """Is ``a`` a text buffer (a NumPy object array on the host)?"""
    return type(a) is np.ndarray and a.dtype.kind == "O"


def with_storage(table: dict, backend: Any) -> dict:
    """``table`` (the primitive implementations) taught to hold the storage dtypes and text."""
    from ember.backends.numpy.backend import IMPLS as ON_HOST

    xp, out = backend.xp, dict(table)

    def host(a):
        return a if type(a) is np.ndarray or not hasattr(a, "shape") else np.asarray(backend._download(a))

    def texts(name, f):
        def run(*args, **kwargs):
            if not any(is_text(a) for a in args):
                return f(*args, **kwargs)
            result = ON_HOST[name](*(host(a) for a in args), **kwargs)
            return result if is_text(result) else backend._upload(np.asarray(result))

        return run

    def moves(f):
        def run(*args, **kwargs):
            stored = next((a for a in args if isinstance(a, Stored)), None)
            if stored is None:
                return f(*args, **kwargs)
            return Stored(f(*(a.codes if isinstance(a, Stored) else a for a in args), **kwargs), stored.dtype)

        return run

    for name in MOVES - {"pad"}:
        out[name] = moves(table[name])
    cast, full, arange, pad = table["cast"], table["full"], table["arange"], table["pad"]

    def pad_(x, widths, value=0):
        if not isinstance(x, Stored):
            return pad(x, widths, value)
        code = int(host_codes(np.array([value], np.float32), x.dtype)[0]) if value else 0  # as NumPy's record pads
        return Stored(pad(x.codes, widths, code), x.dtype)

    def cast_(x, dtype):
        values = decode(x, xp) if isinstance(x, Stored) else x
        if dtype in D.STORAGE:
            return encode(values, dtype, backend)
        return cast(values, dtype)

    def made(make):
        def run(*args, **kwargs):
            dtype = kwargs["dtype"] if "dtype" in kwargs else args[-1]
            if dtype not in D.STORAGE:
                return make(*args, **kwargs)
            # made in float32, then cast, as the NumPy backend does
            args, kwargs = (
                (args, {**kwargs, "dtype": D.float32}) if "dtype" in kwargs else ((*args[:-1], D.float32), kwargs)
            )
            return encode(make(*args, **kwargs), dtype, backend)

        return run

    out.update(cast=cast_, pad=pad_, full=made(full), arange=made(arange))
    for name in D.TEXT_OPS:
        out[name] = texts(name, out[name])
    return out
