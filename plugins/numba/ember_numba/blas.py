"""Matrix products on NumPy's BLAS, each run the way that measured faster for its shape.

* **one thread**: BLAS on the calling thread;
* **all threads**, below :data:`SHARE_FLOPS` (about a millisecond of work): OpenBLAS's own
  threads, which win when the other cores are idle;
* **all threads**, above it (2-d products): :func:`shared_matmul`, column blocks that the
  calling thread and helper threads take one at a time, each one single-threaded BLAS call.

Which of one thread and all is faster depends on the machine's load and is measured per
shape (launch.ThreadChoice). OpenBLAS's threads split a product into equal fixed parts and
wait for the last one: when another process holds a core, that part waits for a time slice,
and the product with it (on the 2-core development machine, GEMMs of 1-100 ms on one thread
took 2-30 times longer on OpenBLAS's two when the machine was busy). Blocks taken on demand
let the running thread do the work of one that is not running, and the caller waits only for
blocks already started, never for a helper that has not been scheduled yet.

Products below :data:`MIN_FLOPS` always run on one thread. "All threads" is the count BLAS is
set to (its environment variables, threadpoolctl, ``EMBER_NUM_THREADS``): this never uses
more. BLAS's count is process-wide, so it is lowered for a call and restored right after
(~1 µs each through threadpoolctl's handle on the library).
"""
from __future__ import annotations

import threading
import time

import numpy as np

from ember.backends import numpy_backend as nb

from .launch import ThreadChoice

MIN_FLOPS = 1 << 24          # ~0.15 ms on one core: below it a second thread cannot pay
SHARE_FLOPS = 1 << 27        # ~1 ms: from here on, blocks taken on demand beat OpenBLAS's split
BLOCK = 256                  # columns per block at least (narrower blocks starve the GEMM kernel)
CHOICE = ThreadChoice()
_LIBS: list = []
_POOL: list = []


def _libs():
    """threadpoolctl's controllers of the loaded BLAS libraries (None when unavailable)."""
    if not _LIBS:
        try:
            import threadpoolctl
            _LIBS.append([c for c in threadpoolctl.ThreadpoolController().lib_controllers if c.user_api == "blas"])
        except Exception:  # noqa: BLE001 - no threadpoolctl, or a BLAS it cannot drive: plain NumPy
            _LIBS.append(None)
    return _LIBS[0]


def _set(libs, n):
    for lib in libs:
        lib.set_num_threads(n)


def _pool(helpers):
    """A pool of ``helpers`` daemon threads, made once."""
    from concurrent.futures import ThreadPoolExecutor
    if not _POOL or _POOL[0][0] < helpers:
        _POOL[:] = [(helpers, ThreadPoolExecutor(helpers, thread_name_prefix="ember-numba-gemm"))]
    return _POOL[0][1]


def on_demand(count, threads, work):
    """Call ``work(i)`` for i in range(count) on ``threads`` threads (the caller and helpers)
    that each take the next i when free; returns when all are done, re-raising the first error.

    A thread that is not scheduled (the machine is busy) takes nothing, and the others do its
    share: the caller never waits for a helper that has not started.

    >>> done = []
    >>> on_demand(5, 2, done.append)
    >>> sorted(done)
    [0, 1, 2, 3, 4]
    """
    if count <= 0:
        return
    if threads <= 1 or count == 1:
        for i in range(count):
            work(i)
        return
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "error": None}
    finished = threading.Event()

    def loop():
        while True:
            with lock:
                i = state["next"]
                if i >= count or state["error"] is not None:
                    return
                state["next"] = i + 1
            try:
                work(i)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                state["error"] = exc
            with lock:
                state["done"] += 1
                if state["done"] == count or state["error"] is not None:
                    finished.set()

    pool = _pool(threads - 1)
    for _ in range(min(threads, count) - 1):
        pool.submit(loop)
    loop()
    finished.wait()
    if state["error"] is not None:
        raise state["error"]


class one_thread_blas:
    """Context manager: BLAS on one thread inside (for work split across threads by the
    caller), its previous count restored after. Returns the previous count."""

    def __enter__(self):
        self.libs = _libs()
        self.n = self.libs[0].get_num_threads() if self.libs else 1
        if self.libs and self.n > 1:
            _set(self.libs, 1)
        return self.n

    def __exit__(self, *exc):
        if self.libs and self.n > 1:
            _set(self.libs, self.n)


def shared_matmul(a, b, threads):
    """``a @ b`` for 2-d ``a``, ``b`` as column blocks taken on demand by ``threads`` threads.

    >>> a, b = np.ones((3, 4)), np.arange(4.0 * 600).reshape(4, 600)
    >>> bool((shared_matmul(a, b, 2) == a @ b).all())
    True
    """
    m, n = a.shape[0], b.shape[1]
    out = np.empty((m, n), np.result_type(a, b))
    blocks = max(1, min(4 * threads, n // BLOCK))
    edges = [n * i // blocks for i in range(blocks + 1)]

    def block(i):
        j0, j1 = edges[i], edges[i + 1]
        np.matmul(a, b[:, j0:j1], out=out[:, j0:j1])

    on_demand(blocks, threads, block)
    return out


def matmul(a, b):
    """``np.matmul(a, b)`` (the reference), run the way that measured faster for its shape:
    on one thread, or on all — OpenBLAS's own threads for mid-sized products, shared column
    blocks (:func:`shared_matmul`) for large 2-d ones."""
    if a.dtype.kind != "f" or a.ndim < 2 or b.ndim < 2:
        return nb.IMPLS["matmul"](a, b)
    batch = max(a.size // max(a.shape[-2] * a.shape[-1], 1), 1)
    flops = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * batch
    libs = _libs()
    n = libs[0].get_num_threads() if libs else 1
    if n <= 1:
        return nb.IMPLS["matmul"](a, b)
    shared = flops >= SHARE_FLOPS and a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype \
        and b.shape[1] >= 2 * BLOCK
    if flops >= MIN_FLOPS:
        one, explore, st = CHOICE.choose((a.shape, b.shape, a.dtype.char, a.strides, b.strides))
    else:
        one, explore, st = True, False, None
    if one or shared:
        _set(libs, 1)
    t0 = time.perf_counter()
    try:
        if one or not shared:
            out = nb.IMPLS["matmul"](a, b)
        else:
            out = shared_matmul(a, b, n)
    finally:
        if one or shared:
            _set(libs, n)
    if st is not None:
        CHOICE.record(st, one, explore, time.perf_counter() - t0)
    return out


def choices() -> dict:
    """For each product shape seen: (calls, mean seconds on 1 thread, shared). For reports."""
    return {k[:2]: v for k, v in CHOICE.summary().items()}
