"""What a safetensors file stores per tensor: its dtype table and ``TensorBytes``.

Below both the format (``safetensors``) and the converters (``numpy_io``), so that the writer
can convert ember tensors and arrays without an import cycle.
"""

from __future__ import annotations

from typing import NamedTuple


class DType(NamedTuple):
    code: str  # as written in the file: "F32"
    ember: str  # ember's (and NumPy's) name: "float32"
    itemsize: int  # bytes per element


# In the reference implementation's order, smallest alignment first: the writer lays tensors
# out in reverse, so each one starts on a multiple of its own item size (zero-copy loads).
_TABLE = (
    DType("BOOL", "bool", 1),
    DType("U8", "uint8", 1),
    DType("I8", "int8", 1),
    DType("F8_E5M2", "float8_e5m2", 1),
    DType("F8_E4M3", "float8_e4m3fn", 1),
    DType("I16", "int16", 2),
    DType("U16", "uint16", 2),
    DType("F16", "float16", 2),
    DType("BF16", "bfloat16", 2),
    DType("I32", "int32", 4),
    DType("U32", "uint32", 4),
    DType("F32", "float32", 4),
    DType("C64", "complex64", 8),
    DType("F64", "float64", 8),
    DType("I64", "int64", 8),
    DType("U64", "uint64", 8),
)
DTYPES = {d.code: d for d in _TABLE}
_BY_EMBER = {d.ember: d for d in _TABLE}
_RANK = {d.code: i for i, d in enumerate(_TABLE)}


def dtype_info(name: str) -> DType:
    """Look a dtype up by its file code ("F32") or its ember name ("float32").

    >>> dtype_info("F32")
    DType(code='F32', ember='float32', itemsize=4)
    >>> dtype_info("bfloat16").code
    'BF16'
    """
    d = DTYPES.get(name) or _BY_EMBER.get(name)
    if d is None:
        raise ValueError(f"unknown dtype {name!r}; safetensors knows {', '.join(DTYPES)}")
    return d


class TensorBytes(NamedTuple):
    """One tensor as a safetensors file stores it: dtype code, shape, raw little-endian bytes.

    >>> t = TensorBytes("F32", (2,), bytes(8))
    >>> t
    TensorBytes(dtype='F32', shape=(2,), data=<8 bytes>)
    >>> t.ember_dtype
    'float32'
    """

    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview

    @property
    def ember_dtype(self) -> str:
        return dtype_info(self.dtype).ember

    @property
    def nbytes(self) -> int:
        return memoryview(self.data).nbytes

    def __repr__(self) -> str:
        return f"TensorBytes(dtype={self.dtype!r}, shape={tuple(self.shape)!r}, data=<{self.nbytes} bytes>)"
