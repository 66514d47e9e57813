"""NumPy's own OpenBLAS, called directly for what NumPy has no function for.

NumPy's wheels bundle an OpenBLAS (``numpy.libs`` on Linux, ``numpy/.dylibs`` on macOS) whose
CBLAS entry points carry a prefix and, for 64-bit integers, a suffix
(``scipy_cblas_saxpy64_``). Opening the same file again gives the library NumPy already
loaded: the same code and the same threads as its products. Where there is none (another
BLAS, Pyodide) :func:`axpy_for` returns None and callers keep NumPy's functions.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np

#: The bundled library's folders, relative to NumPy's package folder.
FOLDERS = (os.path.join(os.pardir, "numpy.libs"), ".dylibs")
#: (prefix, suffix, C integer type) of the CBLAS names NumPy's wheels export.
NAMES = (("scipy_cblas_", "64_", ctypes.c_int64), ("scipy_cblas_", "", ctypes.c_int32))

_FOUND: dict = {}


def _address(a):
    """The first byte of contiguous ``a``: 0.5 µs for a writable one (``ctypes.c_char.from_buffer``),
    1.6 µs for ``a.ctypes.data``, which a read-only one (a tensor loaded from a file) needs."""
    return ctypes.addressof(ctypes.c_char.from_buffer(a)) if a.flags.writeable else a.ctypes.data


def _library():
    """The bundled OpenBLAS, or None."""
    if "lib" not in _FOUND:
        _FOUND["lib"] = None
        here = os.path.dirname(np.__file__)
        for path in sorted(p for f in FOLDERS for p in glob.glob(os.path.join(here, f, "*openblas*"))):
            try:
                _FOUND["lib"] = ctypes.CDLL(path)
                break
            except OSError:
                continue
    return _FOUND["lib"]


def _cblas(name, dtype, make):
    """``make(entry, scalar, integer)`` for CBLAS routine ``?name`` of the bundled library at
    ``dtype`` (float32 or float64: ``s`` or ``d``), made once; None where there is none."""
    dtype = np.dtype(dtype)
    key = (name, dtype)
    if key not in _FOUND:
        _FOUND[key] = None
        lib, letter = _library(), {"float32": "s", "float64": "d"}.get(dtype.name)
        for prefix, suffix, integer in NAMES if lib is not None and letter else ():
            f = getattr(lib, f"{prefix}{letter}{name}{suffix}", None)
            if f is not None:
                _FOUND[key] = make(f, ctypes.c_float if letter == "s" else ctypes.c_double, integer)
                break
    return _FOUND[key]


def axpy_for(dtype):
    """``f(n, a, x, y)``: ``y[:n] += a * x[:n]`` for contiguous float32/float64 arrays (one pass,
    each element rounded once: a fused multiply-add where the CPU has one), or None."""

    def make(f, scalar, integer):
        f.argtypes = [integer, scalar, ctypes.c_void_p, integer, ctypes.c_void_p, integer]
        f.restype = None
        return lambda n, a, x, y: f(n, a, _address(x), 1, _address(y), 1)

    return _cblas("axpy", dtype, make)


def gemm_address(dtype):
    """The address of the bundled OpenBLAS's CBLAS ``?gemm`` for float32/float64 with 64-bit
    integers (NumPy 2's wheels: ``scipy_cblas_sgemm64_``), for machine code that calls it by
    address without the GIL; or None. ``np.matmul`` of C-ordered float operands makes the same
    call (row-major, no transposition), so blocks of a product computed this way carry its bits."""

    def make(f, scalar, integer):
        return ctypes.cast(f, ctypes.c_void_p).value if integer is ctypes.c_int64 else None

    return _cblas("gemm", dtype, make)


def thread_count():
    """``(get, set)``: read and set the bundled OpenBLAS's thread count (process-wide: every
    thread's products use it), or None where there is no such library."""
    if "threads" not in _FOUND:
        _FOUND["threads"] = None
        lib = _library()
        for name in ("scipy_openblas_{}64_", "scipy_openblas_{}", "openblas_{}") if lib is not None else ():
            get = getattr(lib, name.format("get_num_threads"), None)
            put = getattr(lib, name.format("set_num_threads"), None)
            if get is not None and put is not None:
                get.argtypes, get.restype = [], ctypes.c_int
                put.argtypes, put.restype = [ctypes.c_int], None
                _FOUND["threads"] = (get, put)
                break
    return _FOUND["threads"]


def stop_workers():
    """Stop the bundled OpenBLAS's worker threads (they start again with the next product on
    several threads); False where there is no way to. After each product OpenBLAS's workers
    spin, waiting for the next one, for 2**28 cycles by default (~0.1 s): long enough to take a
    core from threads of our own that run next. What OpenBLAS's own fork handler calls; call it
    between products, never while one runs."""
    lib = _library()
    stop = getattr(lib, "blas_thread_shutdown_", None) if lib is not None else None
    if stop is None:
        return False
    stop()
    return True
