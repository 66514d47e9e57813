"""Read the legacy pickled datasets (mnist.pkl.gz, CIFAR-10's python batches) without
running their code.

A pickle can call any importable function; ``pickle.load`` on a file from the internet is
code execution. These files only ever hold numpy arrays, lists, dicts, strings and numbers,
so the unpickler here resolves exactly the three globals that numpy's array pickles
reference and refuses every other one. We also verify each file's checksum *before* this
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
    from numpy.core.multiarray import _reconstruct

# What numpy's ndarray.__reduce__ emits (under both numpy 1.x and 2.x module names).
# Nothing else is needed for arrays of plain dtypes; everything else is refused.
ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
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


def load_arrays(data: bytes, name: str):
    """Unpickle ``data`` allowing only numpy arrays and builtin containers.

    Object arrays are rejected after loading: they can only hold what the pickle itself
    built, but no dataset has them and downstream code assumes numeric arrays.
    """
    try:
        obj = ArrayUnpickler(io.BytesIO(data), name).load()
    except DataError:
        raise
    except Exception as e:  # a malformed pickle raises almost anything; report it uniformly
        raise DataError(f"{name}: not a readable dataset pickle ({type(e).__name__}: {e}). Delete it and fetch it again.") from e
    _reject_object_arrays(obj, name)
    return obj


def _reject_object_arrays(obj, name, depth=0):
    if depth > 8:
        raise DataError(f"{name}: refused to load: containers nested deeper than any dataset file.")
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise DataError(f"{name}: refused to load: it contains an object array, which dataset files never do.")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _reject_object_arrays(k, name, depth + 1)
            _reject_object_arrays(v, name, depth + 1)
    elif isinstance(obj, (list, tuple)):
        # long lists of ints (CIFAR labels) need no per-element walk
        for v in obj:
            if isinstance(v, (np.ndarray, dict, list, tuple)):
                _reject_object_arrays(v, name, depth + 1)
