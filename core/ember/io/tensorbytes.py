"""What a safetensors file stores per tensor: its dtype table and ``TensorBytes``.

Below both the format (``safetensors``) and the converters (``numpy_io``), so that the writer
can convert ember tensors and arrays without an import cycle.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class DType(NamedTuple):
    code: str  # as written in the file: "F32"
    ember: str  # ember's (and NumPy's) name: "float32"
    itemsize: int  # bytes per element (of a packed dtype: 1, the byte that holds several)
    per_byte: int = 1  # elements a byte: 2 for F4, packed low nibble first

    def nbytes(self, numel: int) -> int | None:
        """The bytes ``numel`` elements take, or None when they do not fill whole bytes.

        >>> dtype_info("F4").nbytes(6), dtype_info("F4").nbytes(3), dtype_info("F32").nbytes(3)
        (3, None, 12)
        """
        if numel % self.per_byte:
            return None
        return numel * self.itemsize // self.per_byte


# In the reference implementation's order, smallest alignment first: the writer lays tensors
# out in reverse, so each one starts on a multiple of its own item size (zero-copy loads).
_TABLE = (
    DType("BOOL", "bool", 1),
    DType("F4", "float4_e2m1fn", 1, 2),
    DType("U8", "uint8", 1),
    DType("I8", "int8", 1),
    DType("F8_E5M2", "float8_e5m2", 1),
    DType("F8_E4M3", "float8_e4m3fn", 1),
    DType("F8_E8M0", "float8_e8m0fnu", 1),
    DType("F8_E4M3FNUZ", "float8_e4m3fnuz", 1),
    DType("F8_E5M2FNUZ", "float8_e5m2fnuz", 1),
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
    DType(code='F32', ember='float32', itemsize=4, per_byte=1)
    >>> dtype_info("bfloat16").code
    'BF16'
    """
    d = DTYPES.get(name) or _BY_EMBER.get(name)
    if d is None:
        if name == "string":
            raise ValueError(
                "safetensors has no string dtype: a string tensor cannot be saved (keep text such as class "
                "labels in the metadata or beside the file)"
            )
        if name in UNCODED:
            raise ValueError(
                f"safetensors has no code for dtype {name}: store it as {UNCODED[name]} (t.to(ember.{UNCODED[name]}))"
            )
        raise ValueError(f"unknown dtype {name!r}; safetensors knows {', '.join(DTYPES)}")
    return d


#: ember's dtypes the safetensors format has no code for, and the one to store them in instead
UNCODED = {
    "int4": "int8",
    "int2": "int8",
    "uint4": "uint8",
    "uint2": "uint8",
}


def pack(data: bytes | memoryview, per_byte: int) -> bytes:
    """Codes one a byte → ``per_byte`` codes a byte, the first in the low bits (as ONNX and torch pack).

    >>> pack(bytes([1, 2, 3, 4]), 2).hex()
    '2143'
    """
    data, bits = bytes(data), 8 // per_byte
    n, mask, whole = len(data) // per_byte, (1 << bits) - 1, 0
    for k in range(per_byte):  # bytes.translate and big-int OR run in C: no Python loop per value
        placed = data[k::per_byte].translate(bytes((b & mask) << (k * bits) for b in range(256)))
        whole |= int.from_bytes(placed, "little")
    return whole.to_bytes(n, "little")


def packed(d: DType, data: Any, numel: int, what: str) -> Any:
    """``data`` (one value a byte) as a file holds dtype ``d``: packed where ``d`` packs several
    values a byte, which needs a count that fills whole bytes (``what`` names the tensor)."""
    if d.per_byte == 1:
        return data
    if d.nbytes(numel) is None:
        raise ValueError(
            f"safetensors packs {d.code} {d.per_byte} values a byte: {what} has {numel} values, "
            f"not a multiple of {d.per_byte}"
        )
    return pack(data, d.per_byte)


def unpack(data: bytes | memoryview, per_byte: int) -> bytes:
    """The inverse of :func:`pack`.

    >>> list(unpack(bytes([0x21, 0x43]), 2))
    [1, 2, 3, 4]
    """
    data, bits = bytes(data), 8 // per_byte
    mask, out = (1 << bits) - 1, bytearray(len(data) * per_byte)
    for k in range(per_byte):
        out[k::per_byte] = data.translate(bytes((b >> (k * bits)) & mask for b in range(256)))
    return bytes(out)


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
