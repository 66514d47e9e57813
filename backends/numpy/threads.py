"""Threads for the NumPy backend's large memory-bound passes.

BLAS runs a matrix product on all its threads, but a NumPy copy or ufunc runs on the thread
that calls it, so on a two-core machine every pass around the products (im2col's column
copies, col2im's adds, pooling, ReLU, batch norm) uses half the machine. NumPy releases the
GIL inside the loops of large copies and ufuncs, so two threads working on two halves of an
array do run at once. :func:`split` calls a function on contiguous parts of a range, one part
per thread; each part writes only its own slice of the result and does the same arithmetic
in the same order as one call over the whole range, so the results are the same bits.

``EMBER_NUMPY_THREADS`` sets the number of threads. The default is 1 (the pool off): on
this project's 2-core development machine, loaded by other work, two threads were not faster
in the measurements taken so far (docs/performance.md, 2026-12-02 03:35-04:50), so the
pool is opt-in until a quiet machine shows it pays. Where threads cannot start (Pyodide)
everything runs on the calling thread.

>>> import numpy as np
>>> out = np.empty(6)
>>> split(lambda s: np.multiply(np.arange(6.0)[s], 2, out=out[s]), 6, nbytes=MIN_BYTES)
>>> out.tolist()
[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

#: The most threads EMBER_NUMPY_THREADS may ask for: the passes are bound by memory bandwidth.
MAX_THREADS = 4

#: Work below this many bytes runs on the calling thread: handing a part to another thread
#: costs tens of microseconds, a pass over 1 MiB about a hundred.
MIN_BYTES = 1 << 20


def _threads() -> int:
    if sys.platform == "emscripten":
        return 1
    wanted = os.environ.get("EMBER_NUMPY_THREADS", "1")
    try:
        return max(1, min(MAX_THREADS, int(wanted)))
    except ValueError:
        raise ValueError(f"EMBER_NUMPY_THREADS={wanted!r}: expected a whole number of threads, such as 2") from None


THREADS = _threads()

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_inside = threading.local()  # set on a thread while it runs a part: a nested split runs inline


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():  # a forked child has no pool threads
        _pool = ThreadPoolExecutor(THREADS - 1, thread_name_prefix="ember-numpy")
        _pool_pid = os.getpid()
    return _pool


def _run(fn, part):
    _inside.busy = True
    try:
        fn(part)
    finally:
        _inside.busy = False


def parts(n: int, k: int) -> list[slice]:
    """``range(n)`` cut into at most ``k`` contiguous, non-empty slices of near-equal length.

    >>> parts(5, 2)
    [slice(0, 3, None), slice(3, 5, None)]
    """
    cuts = [(n * i + k - 1) // k for i in range(k + 1)]
    return [slice(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def split(fn: Callable[[slice], object], n: int, nbytes: int) -> None:
    """``fn(part)`` for contiguous parts of ``range(n)`` that together cover it, on
    :data:`THREADS` threads when the work touches at least :data:`MIN_BYTES` (``nbytes``),
    else ``fn(slice(0, n))`` on this thread. Returns when every part is done; an error in
    any part is raised here."""
    k = THREADS if nbytes >= MIN_BYTES and n > 1 and not getattr(_inside, "busy", False) else 1
    if k == 1:
        fn(slice(0, n))
        return
    first, *rest = parts(n, k)
    futures = [_executor().submit(_run, fn, part) for part in rest]
    try:
        _run(fn, first)
    finally:
        for f in futures:  # wait for all before raising: the parts write into shared buffers
            f.exception()
    for f in futures:
        f.result()
