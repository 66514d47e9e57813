"""The safetensors format in pure Python: bytes in, bytes out, no numpy.

A safetensors file is three parts::

    8 bytes   N, the length of the header, unsigned little-endian
    N bytes   a UTF-8 JSON object, padded with spaces to a multiple of 8:
                {"__metadata__": {"key": "value"},
                 "weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
    the rest  the tensors' bytes, little-endian and row-major, back to back; offsets count
              from the end of the header

The writer produces the same bytes as the reference implementation (tensors ordered by
dtype alignment, largest first, then by name), except that it sorts ``__metadata__`` keys where
the reference's order is arbitrary. The reader trusts nothing: every way a file can
be malformed or hostile ends in a ``CheckpointError`` naming the file and the cause, and no
read is larger than the file itself.
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Iterable, Mapping
from typing import IO, Any

from .atomic import atomic_write
from .errors import CheckpointError
from .numpy_io import as_tensor_bytes
from .tensorbytes import _BY_EMBER, _RANK, DTYPES, DType, TensorBytes, dtype_info  # noqa: F401 (public here too)

# The reference reader refuses larger headers too; it bounds what a hostile file can make us parse.
MAX_NDIM = 64  # NumPy's limit on dimensions: a tensor beyond it could not be used
MAX_HEADER_SIZE = 100_000_000


# ---------------------------------------------------------------------------------------------
# Writing


def dump(tensors: Mapping[str, Any], file: IO[bytes], metadata: Mapping[str, str] | None = None) -> int:
    """Write ``tensors`` (name -> TensorBytes) to an open binary file; return the byte count.

    Everything is validated before the first byte is written.

    >>> buf = io.BytesIO()
    >>> dump({"x": TensorBytes("U8", (3,), b"abc")}, buf)
    67
    """
    return _write(file, *_layout(tensors, metadata))


def _write(file: IO[bytes], header: bytes, views: list[memoryview]) -> int:
    file.write(struct.pack("<Q", len(header)))
    file.write(header)
    for view in views:
        file.write(view)
    return 8 + len(header) + sum(v.nbytes for v in views)


def save_bytes(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialize ``tensors`` (name -> TensorBytes) and optional str -> str ``metadata``.

    >>> blob = save_bytes({"x": TensorBytes("I32", (), struct.pack("<i", 7))}, {"note": "hi"})
    >>> load_bytes(blob)
    ({'x': TensorBytes(dtype='I32', shape=(), data=<4 bytes>)}, {'note': 'hi'})
    """
    buf = io.BytesIO()
    dump(tensors, buf, metadata)
    return buf.getvalue()


def save_file(
    tensors: Mapping[str, Any], path: str | os.PathLike[str], metadata: Mapping[str, str] | None = None
) -> None:
    """Write a safetensors file atomically: a crash leaves the old file or the new, never half.

    ``tensors`` maps names to ``TensorBytes``, ember tensors or NumPy arrays, so a model's
    ``state_dict()`` can be saved as it is.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_file({"w": TensorBytes("F64", (1,), struct.pack("<d", 0.5))}, path)
    >>> tensors, metadata = load_file(path)
    >>> struct.unpack("<d", tensors["w"].data)
    (0.5,)
    """
    header, views = _layout(tensors, metadata)  # fail on bad input before creating a temporary file
    atomic_write(path, lambda f: _write(f, header, views))


def _layout(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None) -> tuple[bytes, list[memoryview]]:
    """Validate the input; return the padded header and the tensors' bytes in file order."""
    entries = []
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"tensor name {name!r}: names must be strings other than '__metadata__'")
        if not isinstance(tensor, TensorBytes):  # a state_dict's tensors, NumPy arrays
            tensor = as_tensor_bytes(tensor)
        dtype, shape, data = tensor
        d = dtype_info(dtype)
        shape = tuple(shape)
        if not all(type(s) is int and s >= 0 for s in shape) or len(shape) > MAX_NDIM:
            raise ValueError(f"tensor {name!r}: shape {shape!r} must be at most {MAX_NDIM} non-negative integers")
        view = _byte_view(data, name)
        needs = d.nbytes(_numel(shape))
        if needs is None:
            raise ValueError(f"tensor {name!r}: {d.code} of shape {shape} does not fill whole bytes (an odd count)")
        if view.nbytes != needs:
            raise ValueError(f"tensor {name!r}: {d.code} of shape {shape} needs {needs} bytes, data has {view.nbytes}")
        entries.append((name, d.code, shape, view))
    entries.sort(key=lambda e: (-_RANK[e[1]], e[0]))

    header: dict[str, Any] = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError(f"metadata must map str to str, got {metadata!r:.200}")
        header["__metadata__"] = dict(sorted(metadata.items()))  # the reference sorts it too
    offset = 0
    for name, code, shape, view in entries:
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + view.nbytes]}
        offset += view.nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return raw + b" " * (-len(raw) % 8), [e[3] for e in entries]


def _byte_view(data: Any, name: str) -> memoryview:
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"tensor {name!r}: data must be bytes-like, got {type(data).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"tensor {name!r}: data must be C-contiguous")
    if view.nbytes == 0:
        return memoryview(b"")  # memoryview.cast refuses views with a zero in their shape
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------------------------------------
# Reading


def load_bytes(
    buffer: bytes | bytearray | memoryview, *, source: str = "<bytes>"
) -> tuple[dict[str, TensorBytes], dict[str, str] | None]:
    """Parse safetensors bytes into ``({name: TensorBytes}, metadata or None)``.

    Tensor data are read-only memoryviews into ``buffer`` (no copy). ``source`` names the
    buffer in error messages.

    >>> load_bytes(b"junk")
    Traceback (most recent call last):
    ...
    ember.io.errors.CheckpointError: <bytes>: file is 4 bytes, too short to hold the 8-byte header length
    """
    view = memoryview(buffer).toreadonly()
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    n = _header_length(bytes(view[:8]), len(view), source)
    entries, metadata = _parse_header(bytes(view[8 : 8 + n]), len(view) - 8 - n, source)
    return _slice(entries, view[8 + n :]), metadata


def load_file(
    path: str | os.PathLike[str], *, mmap: bool = False
) -> tuple[dict[str, TensorBytes], dict[str, str] | None]:
    """Read a safetensors file into ``({name: TensorBytes}, metadata or None)``.

    The header is validated against the file size before anything else is read, so a
    hostile header cannot make us allocate more than the file holds. With ``mmap=True`` the
    tensor data stay on disk and are paged in on use. A missing or unreadable file raises the
    usual ``OSError``; anything wrong inside it raises ``CheckpointError``.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_file({"b": TensorBytes("BOOL", (2,), b"\\x01\\x00")}, path, {"k": "v"})
    >>> load_file(path)
    ({'b': TensorBytes(dtype='BOOL', shape=(2,), data=<2 bytes>)}, {'k': 'v'})
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        n = _header_length(f.read(8), size, path)
        raw = f.read(n)
        if len(raw) != n:
            raise CheckpointError(path, "file shrank while it was being read")
        entries, metadata = _parse_header(raw, size - 8 - n, path)
        if mmap:
            import mmap as _mmap  # lazily: not every platform (e.g. some WASM builds) has it

            data = memoryview(_mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ))[8 + n :]
        else:
            data = memoryview(f.read(size - 8 - n)).toreadonly()
        if len(data) != size - 8 - n:
            raise CheckpointError(path, "file changed size while it was being read")
    return _slice(entries, data), metadata


def _slice(entries: list[tuple[Any, ...]], data: Any) -> dict[str, TensorBytes]:
    return {name: TensorBytes(code, shape, data[begin:end]) for name, code, shape, begin, end in entries}


def _header_length(first8: bytes, size: int, source: str) -> int:
    if len(first8) < 8:
        raise CheckpointError(source, f"file is {size} bytes, too short to hold the 8-byte header length")
    n: int = struct.unpack("<Q", first8)[0]
    if n > size - 8:
        raise CheckpointError(
            source,
            f"header length {n} exceeds the {size - 8} bytes that follow it (truncated, or not a safetensors file)",
        )
    if n > MAX_HEADER_SIZE:
        raise CheckpointError(source, f"header length {n} is over the {MAX_HEADER_SIZE}-byte limit")
    return n


class _DuplicateName(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would silently keep the last of two equal keys; a file with two tensors of
    # one name is ambiguous, so refuse it.
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateName(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return result


def _parse_header(raw: bytes, data_len: int, source: str) -> tuple[list[tuple[Any, ...]], dict[str, str] | None]:
    """Validate a header; return ``([(name, code, shape, begin, end)], metadata)``."""
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as e:
        raise CheckpointError(source, f"header is not UTF-8 ({e.reason} at header byte {e.start})") from None
    except _DuplicateName as e:
        raise CheckpointError(source, f"header names {_short(e.args[0])} twice") from None
    except (ValueError, RecursionError) as e:  # RecursionError: hostile nesting like [[[[...]]]]
        raise CheckpointError(source, f"header is not valid JSON ({_short(str(e), 120)})") from None
    if not isinstance(header, dict):
        raise CheckpointError(source, f"header is a JSON {type(header).__name__}, not an object")

    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise CheckpointError(source, "__metadata__ must map strings to strings")

    entries = [_parse_entry(name, info, data_len, source) for name, info in header.items()]
    # The tensors must tile the data section exactly: no overlap, no gap, nothing left over.
    expected = 0
    for name, _, _, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin != expected:
            what = "overlaps the tensor before it" if begin < expected else "leaves a gap before it"
            raise CheckpointError(
                source, f"tensor {_short(name)} starts at data byte {begin}, expected {expected}: it {what}"
            )
        expected = end
    if expected != data_len:
        raise CheckpointError(
            source,
            f"the tensors cover {expected} bytes but the data section holds "
            f"{data_len}: {data_len - expected} unexplained trailing bytes",
        )
    return entries, metadata


def _parse_entry(name: str, info: Any, data_len: int, source: str) -> tuple[Any, ...]:
    where = f"tensor {_short(name)}"
    if not isinstance(info, dict):
        raise CheckpointError(source, f"{where}: entry is a JSON {type(info).__name__}, not an object")
    code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    d = DTYPES.get(code) if isinstance(code, str) else None
    if d is None:
        raise CheckpointError(source, f"{where}: unknown dtype {_short(code)}; known: {', '.join(DTYPES)}")
    if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
        raise CheckpointError(source, f"{where}: shape {_short(shape)} is not a list of non-negative integers")
    if len(shape) > MAX_NDIM:
        raise CheckpointError(
            source, f"{where}: shape has {len(shape)} dimensions; at most {MAX_NDIM} are supported (NumPy's limit)"
        )
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(o) is int for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise CheckpointError(
            source, f"{where}: data_offsets {_short(offsets)} is not [begin, end] with 0 <= begin <= end"
        )
    begin, end = offsets
    if end > data_len:
        raise CheckpointError(
            source, f"{where}: data_offsets {offsets} run past the {data_len}-byte data section (truncated file?)"
        )
    span = end - begin
    numel = _bounded_numel(shape, 2**64)
    size = None if numel is None else d.nbytes(numel)
    if size is None or size != span:
        needs = "over 2**64" if numel is None else "whole" if size is None else f"{size}"
        raise CheckpointError(
            source, f"{where}: {code} of shape {_short(shape)} needs {needs} bytes but data_offsets span {span}"
        )
    return name, code, tuple(shape), begin, end


def _bounded_numel(shape: list[int], limit: int) -> int | None:
    """The element count, or None once it passes ``limit`` (a hostile shape such as
    [10**4000] * 10**6 would otherwise cost a huge multiplication)."""
    if 0 in shape:
        return 0
    n = 1
    for s in shape:
        n *= s
        if n > limit:
            return None
    return n


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
