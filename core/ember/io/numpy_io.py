"""Convert ember tensors and NumPy arrays to and from ``TensorBytes``; numpy is imported only when called.

The rest of ``ember.io`` deals in bytes so that it runs where numpy does not (Pyodide).
"""

from __future__ import annotations

from typing import Any

from .tensorbytes import _BY_EMBER, TensorBytes, dtype_info, packed, unpack


def to_numpy(tensor: TensorBytes) -> Any:
    """A read-only NumPy view of a tensor's bytes (no copy); BF16 as ``ml_dtypes.bfloat16``.

    >>> import struct
    >>> to_numpy(TensorBytes("I32", (2,), struct.pack("<2i", 1, 2))).tolist()
    [1, 2]
    """
    import numpy as np

    d = dtype_info(tensor.dtype)
    name = d.ember
    if name in ML_DTYPES:
        _ml_dtypes()  # registers the names "bfloat16", "float8_e5m2", ... with NumPy
    try:
        dtype = np.dtype(name).newbyteorder("<")  # the file is little-endian on every machine
    except TypeError:
        raise ValueError(
            f"numpy has no dtype {name!r} (file dtype {tensor.dtype}); read its raw bytes from TensorBytes.data instead"
        ) from None
    data = unpack(tensor.data, d.per_byte) if d.per_byte > 1 else tensor.data  # a copy: one value a byte
    return np.frombuffer(data, dtype=dtype).reshape(tensor.shape)


#: the file dtypes NumPy knows through the ml_dtypes package
ML_DTYPES = frozenset(
    {
        "bfloat16",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn",
    }
)


def _ml_dtypes() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        raise ValueError(
            "a bfloat16 (float8, float4) NumPy array needs the ml_dtypes package: pip install ml_dtypes (or "
            "load the file as ember tensors, which store them without it)"
        ) from None
    return ml_dtypes


def from_numpy(array: Any) -> TensorBytes:
    """``TensorBytes`` for a NumPy array (or anything ``numpy.asarray`` accepts).

    Shares memory with ``array`` when it is already contiguous and little-endian.

    >>> import numpy as np
    >>> from_numpy(np.zeros((2, 3), dtype=np.float32))
    TensorBytes(dtype='F32', shape=(2, 3), data=<24 bytes>)
    """
    import numpy as np

    array = np.asarray(array)
    d = _BY_EMBER.get(array.dtype.name)
    if d is None:
        raise ValueError(f"cannot store numpy dtype {array.dtype} in safetensors; supported: {', '.join(_BY_EMBER)}")
    # Not ascontiguousarray: it turns a 0-d array into a 1-d one.
    array = np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")
    data = packed(d, array.reshape(-1).view(np.uint8), array.size, f"an array of shape {array.shape}")
    return TensorBytes(d.code, tuple(int(s) for s in array.shape), np.frombuffer(data, np.uint8).data)


def tensor_bytes(t: Any) -> TensorBytes:
    """An ember tensor as safetensors bytes, through its backend (no numpy needed).

    >>> import ember
    >>> tensor_bytes(ember.tensor([1.0, 2.0]))
    TensorBytes(dtype='F32', shape=(2,), data=<8 bytes>)
    """
    d = dtype_info(t.dtype.name)
    data = packed(d, t.backend.to_bytes(t._data), t.numel(), f"a {t.dtype} tensor of shape {tuple(t.shape)}")
    return TensorBytes(d.code, tuple(t.shape), data)


def tensor_from_bytes(tb: TensorBytes, backend: Any = None) -> Any:
    """The inverse of :func:`tensor_bytes`, on ``backend`` (default: the current one).

    >>> import ember
    >>> tensor_from_bytes(tensor_bytes(ember.tensor([1, 2]))).tolist()
    [1, 2]
    """
    from .. import dispatch, dtypes as D
    from ..registry import get_backend

    backend = get_backend(backend)
    d = dtype_info(tb.dtype)
    dtype = D.get(d.ember)
    D.check_backend(backend, dtype)
    data = unpack(tb.data, d.per_byte) if d.per_byte > 1 else bytes(tb.data)
    return dispatch.wrap(backend.from_bytes(data, tuple(tb.shape), dtype), backend)


def as_tensor_bytes(value: Any) -> TensorBytes:
    """Accept a ``TensorBytes`` as is, an ember tensor through its backend's bytes; convert an
    array-like (NumPy array, or any object with a ``.numpy()`` method) through NumPy.

    >>> as_tensor_bytes(TensorBytes("U8", (1,), b"x")).data
    b'x'
    """
    if isinstance(value, TensorBytes):
        return value
    if hasattr(value, "_backend") and hasattr(value, "_data"):  # an ember Tensor: no numpy needed
        return tensor_bytes(value)
    if hasattr(value, "numpy") and not hasattr(value, "__array_interface__"):
        value = value.numpy()
    return from_numpy(value)
