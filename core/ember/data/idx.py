"""The IDX file format (MNIST, Fashion-MNIST): read, validate and write.

An IDX file is a 4-byte magic ``00 00 <type> <ndim>``, then ``ndim`` big-endian uint32 sizes,
then the array bytes in C order, big-endian. The format is canonical: one array has exactly
one encoding, so a file's checksum identifies its content.

>>> import numpy as np
>>> a = np.arange(6, dtype=np.uint8).reshape(2, 3)
>>> decode_idx(encode_idx(a)).tolist()
[[0, 1, 2], [3, 4, 5]]
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from .errors import DataError

# type code -> big-endian numpy dtype, as listed in the MNIST page's format description
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {(dt.kind, dt.itemsize): code for code, dt in IDX_DTYPES.items()}


def decode_idx(buf, name: str = "<bytes>") -> np.ndarray:
    """Parse IDX bytes (already decompressed) into a native-endian array.

    Checks the magic, the dimension count and that the data is exactly as long as the
    header promises; ``name`` is used in error messages.

    >>> decode_idx(bytes([0, 0, 8, 1, 0, 0, 0, 2, 7, 9])).tolist()
    [7, 9]
    """
    buf = memoryview(buf).cast("B")
    fix = "delete the file so it is fetched again, or replace it with a good copy"
    if len(buf) < 4:
        raise DataError(f"{name}: not an IDX file: only {len(buf)} bytes, the header alone is 4+. {fix}")
    zero, code, ndim = struct.unpack(">HBB", buf[:4])
    if zero != 0 or code not in IDX_DTYPES:
        raise DataError(
            f"{name}: not an IDX file: magic is {bytes(buf[:4]).hex()}, expected 0000 then a type "
            f"code in {sorted(hex(c) for c in IDX_DTYPES)}. {fix}"
        )
    header = 4 + 4 * ndim
    if ndim == 0 or len(buf) < header:
        raise DataError(
            f"{name}: truncated IDX header: {ndim} dimensions need {header} bytes, file has {len(buf)}. {fix}"
        )
    shape = struct.unpack(f">{ndim}I", buf[4:header])
    dtype = IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(buf) - header
    if actual < expected:
        raise DataError(
            f"{name}: truncated IDX file: header promises shape {shape} ({expected} data bytes), "
            f"found only {actual}. {fix}"
        )
    if actual > expected:
        raise DataError(
            f"{name}: IDX file has {actual - expected} unexpected trailing bytes after shape {shape}. {fix}"
        )
    arr = np.frombuffer(buf, dtype=dtype, count=expected // dtype.itemsize, offset=header).reshape(shape)
    # native byte order so downstream arithmetic is not silently slow
    return arr.astype(dtype.newbyteorder("="), copy=False) if dtype.itemsize > 1 else arr


def encode_idx(array) -> bytes:
    """Encode an array as IDX bytes (uncompressed).

    >>> encode_idx(np.array([7, 9], dtype=np.uint8)).hex()
    '00000801000000020709'
    """
    a = np.asarray(array)
    code = _CODES.get((a.dtype.kind, a.dtype.itemsize))
    if code is None:
        names = ", ".join(str(d.newbyteorder("=")) for d in IDX_DTYPES.values())
        raise TypeError(f"IDX cannot store dtype {a.dtype}; use one of {names}")
    if a.ndim == 0 or a.ndim > 255:
        raise ValueError(f"IDX stores arrays with 1 to 255 dimensions, got shape {a.shape}")
    header = struct.pack(f">BBBB{a.ndim}I", 0, 0, code, a.ndim, *a.shape)
    return header + np.ascontiguousarray(a, dtype=IDX_DTYPES[code]).tobytes()


def read_idx(path, max_bytes: int | None = None) -> np.ndarray:
    """Read an IDX file, gzip-compressed or not (detected by content, not by name); with
    ``max_bytes``, refuse a file whose content would be larger (read nor inflated past it).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x-idx1-ubyte.gz")
    >>> write_idx(p, np.array([1, 2, 3], dtype=np.uint8))
    >>> read_idx(p).tolist()
    [1, 2, 3]
    """
    return decode_idx(read_raw(path, max_bytes), str(path))


def read_raw(path, max_bytes: int | None = None) -> bytes:
    """The content of a file, inflated if it is gzip data, at most ``max_bytes`` of it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        # gzip of incompressible data is a little larger than the data itself
        if max_bytes is not None and size > max_bytes + max_bytes // 100 + 1024:
            raise DataError(
                f"{path}: {size} bytes, more than this dataset's files can be ({max_bytes}). "
                f"It is not a genuine file; delete it."
            )
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read IDX file: {e.strerror or e}") from e
    return gunzip(raw, path, max_bytes) if raw[:2] == b"\x1f\x8b" else raw


def gunzip(raw: bytes, name, max_bytes: int | None = None) -> bytes:
    """Decompress gzip bytes, turning the library's several exception types into one clear error.
    With ``max_bytes``, stop inflating past it and refuse (a small file can inflate to gigabytes).

    >>> gunzip(gzip.compress(bytes(1000)), "zeros", max_bytes=100)
    Traceback (most recent call last):
    ...
    ember.data.errors.DataError: zeros: inflates to more than 100 bytes, more than this dataset's files can be. It is not a genuine file; delete it.
    """
    try:
        if max_bytes is None:
            return gzip.decompress(raw)
        out, rest = b"", raw
        while rest.strip(b"\0"):  # a gzip file may hold several members
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += inflater.decompress(rest, max_bytes + 1 - len(out))
            if len(out) > max_bytes or inflater.unconsumed_tail:
                raise DataError(
                    f"{name}: inflates to more than {max_bytes} bytes, more than this dataset's "
                    f"files can be. It is not a genuine file; delete it."
                )
            if not inflater.eof:
                raise EOFError("compressed data ended before the end-of-stream marker")
            rest = inflater.unused_data
        return out
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{name}: corrupt or truncated gzip data ({e}). Delete the file so it is fetched again.") from e


def write_idx(path, array, compress: bool | None = None) -> None:
    """Write ``array`` as an IDX file atomically (temp file + rename).

    ``compress`` defaults to ``True`` when the name ends in ``.gz``. A crash midway leaves
    either the old file or nothing, never half a file.
    """
    path = Path(path)
    data = encode_idx(array)
    if compress if compress is not None else path.suffix == ".gz":
        # mtime=0 keeps the bytes reproducible, so checksums of our own files are stable
        data = gzip.compress(data, compresslevel=6, mtime=0)
    atomic_write_bytes(path, data)


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
