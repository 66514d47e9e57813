"""Read the legacy pickled datasets (mnist.pkl.gz, CIFAR-10's python batches) without
running their code.

A pickle can call any importable function; ``pickle.load`` on a file from the internet is
code execution. These files only ever hold numpy arrays, lists, dicts, strings and numbers,
so the unpickler here resolves exactly the three globals that numpy's array pickles
reference, each through a guard that accepts only the arguments numpy writes, and refuses
every other one. We also verify each file's checksum *before* this
runs, so the allow-list is the second line of defence, not the only one.

>>> import io, pickle, numpy as np
>>> load_arrays(pickle.dumps({"x": np.arange(3)}, protocol=4), "demo")["x"].tolist()
[0, 1, 2]
>>> load_arrays(pickle.dumps(print), "evil")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ember.data.errors.DataError: evil: refused to load: the pickle references builtins.print, ...
"""

from __future__ import annotations

import io
import pickle

import numpy as np

from .errors import DataError

try:  # numpy >= 2 moved the implementation; numpy.core still works there but warns
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]  # numpy 1.x's place


class _Refused(Exception):
    """What a guard saw that no genuine dataset pickle holds."""


# The only dtypes a dataset array has: plain numbers (no objects, no records, no strings).
PLAIN_KINDS = "biuf"


class _NDArrayType:
    """Stands for ``numpy.ndarray`` inside the pickle: good as the first argument of
    ``_reconstruct`` and nothing else. (The real class, called directly, would build arrays of
    any size, or zero-stride views of a few bytes as 10**12 elements.)"""

    def __call__(self, *args):
        raise _Refused(
            f"a direct call numpy.ndarray{args!r:.80} (an array of any size, or a view of "
            "a few bytes as billions of elements)"
        )


NDARRAY = _NDArrayType()


def _safe_reconstruct(subtype, shape, dtype_code):
    # numpy's ndarray.__reduce__ always emits _reconstruct(ndarray, (0,), b'b'): an empty array
    # that the following BUILD fills from bytes of the pickle itself (so sized by the file).
    if subtype is not NDARRAY or tuple(shape) != (0,) or dtype_code not in (b"b", "b"):
        raise _Refused(
            f"a call _reconstruct{(subtype, shape, dtype_code)!r:.80}, which is not how numpy pickles an array"
        )
    return _reconstruct(np.ndarray, (0,), b"b")


def _safe_dtype(spec, align=False, copy=True):
    if not isinstance(spec, str) or len(spec) > 4:
        raise _Refused(f"a dtype({spec!r:.40}), not a plain numeric dtype")
    dtype = np.dtype(spec, align=bool(align), copy=bool(copy))
    if dtype.kind not in PLAIN_KINDS or dtype.hasobject or dtype.fields is not None:
        raise _Refused(f"an {'object array' if dtype.hasobject else 'array'} of dtype {dtype}")
    return dtype


# What numpy's ndarray.__reduce__ emits (under both numpy 1.x and 2.x module names), each
# through a guard that accepts only the arguments numpy itself writes. Everything else is refused.
ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy", "ndarray"): NDARRAY,
    ("numpy", "dtype"): _safe_dtype,
}


class ArrayUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild numpy arrays and plain containers, and nothing else."""

    def __init__(self, file, name: str):
        # latin1 is numpy's documented way to read Python 2 array pickles (their bytes were str)
        super().__init__(file, encoding="latin1")
        self.name = name

    def find_class(self, module, name):
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise DataError(
                f"{self.name}: refused to load: the pickle references {module}.{name}, but only "
                f"numpy array reconstruction is allowed. The file is not a genuine dataset file; "
                f"delete it and fetch it again."
            ) from None

    def persistent_load(self, pid):
        raise DataError(f"{self.name}: refused to load: the pickle uses persistent ids, which dataset files never do.")


def load_arrays(data: bytes, name: str, max_bytes: int | None = None):
    """Unpickle ``data`` allowing only numpy arrays of plain numbers and builtin containers.

    Every array is checked after loading: a plain numeric dtype, no zero strides (a view that
    repeats a few bytes), and all arrays together at most ``max_bytes`` (what the dataset
    can hold; default: the size of ``data``, since a genuine array's bytes are in the pickle).
    """
    try:
        obj = ArrayUnpickler(io.BytesIO(data), name).load()
    except DataError:
        raise
    except _Refused as e:
        raise DataError(f"{name}: refused to load: it holds {e}, which dataset files never do.") from None
    except Exception as e:  # a malformed pickle raises almost anything; report it uniformly
        raise DataError(
            f"{name}: not a readable dataset pickle ({type(e).__name__}: {e}). Delete it and fetch it again."
        ) from e
    total = _check_arrays(obj, name)
    limit = len(data) if max_bytes is None else max_bytes
    if total > limit:
        raise DataError(
            f"{name}: refused to load: its arrays hold {total} bytes, more than the {limit} this dataset can have."
        )
    return obj


def _check_arrays(obj, name, depth=0) -> int:
    """Refuse what no dataset file holds; returns the bytes of all arrays in ``obj``."""
    if depth > 8:
        raise DataError(f"{name}: refused to load: containers nested deeper than any dataset file.")
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject or obj.dtype.kind not in PLAIN_KINDS:
            raise DataError(
                f"{name}: refused to load: it contains an array of dtype {obj.dtype} (an object "
                f"array or a record), which dataset files never do."
            )
        if any(stride == 0 and size > 1 for stride, size in zip(obj.strides, obj.shape)):
            raise DataError(
                f"{name}: refused to load: an array of shape {obj.shape} with a zero stride "
                f"(a few bytes repeated), which dataset files never hold."
            )
        return obj.nbytes
    total = 0
    if isinstance(obj, dict):
        for k, v in obj.items():
            total += _check_arrays(k, name, depth + 1) + _check_arrays(v, name, depth + 1)
    elif isinstance(obj, (list, tuple)):
        # long lists of ints (CIFAR labels) need no per-element walk
        for v in obj:
            if isinstance(v, (np.ndarray, dict, list, tuple)):
                total += _check_arrays(v, name, depth + 1)
    return total
