"""Matrix products on NumPy's BLAS, always called single-threaded, split across the plugin's
threads by the plugin itself.

Why never BLAS's own threads: OpenBLAS's workers spin for a while after each product,
waiting for the next one. On a machine with few cores they then take the cores from
everything that runs next — numba's kernels, the convolution's chunk threads: a 0.2 ms matrix
product before a 2.6 ms convolution made the pair take 3.9-5.1 ms (the 2-core development
machine, idle otherwise). And on a busy machine OpenBLAS splits a product into equal parts
and waits for the slowest, whose thread may not be scheduled at all (GEMMs of 1-100 ms took
2-30 times longer on two threads than on one).

So the plugin sets BLAS to one thread when it loads (:func:`single_threaded`) and runs each
product of at least :data:`MIN_FLOPS` as blocks — of columns, of rows, or of a stack of
matrices — that the calling thread and helper threads take on demand (:func:`on_demand`),
each block one single-threaded BLAS call. A thread the machine does not schedule takes no
block; the caller waits only for blocks already started.
"""
from __future__ import annotations

import threading

import numpy as np

from ember.backends import numpy_backend as nb

from .launch import threads

MIN_FLOPS = 1 << 24          # ~0.1 ms on one core: below it a second thread cannot pay
BLOCK = 128                  # rows or columns per block at least (narrower ones starve the GEMM kernel)
_POOL: list = []


def single_threaded() -> str:
    """Set every BLAS library loaded in this process to one thread (threadpoolctl). Returns
    what was done, for ``capabilities().notes``."""
    try:
        import threadpoolctl
    except ImportError:
        return "unchanged (threadpoolctl not installed): BLAS may run its own threads"
    global _LIMIT        # kept alive: the limiter restores the old limits when collected
    _LIMIT = threadpoolctl.threadpool_limits(1, user_api="blas")
    return "1 (products are split across the plugin's threads)"


def _pool(helpers):
    """A pool of ``helpers`` daemon threads, made once."""
    from concurrent.futures import ThreadPoolExecutor
    if not _POOL or _POOL[0][0] < helpers:
        _POOL[:] = [(helpers, ThreadPoolExecutor(helpers, thread_name_prefix="ember-numba"))]
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


def _edges(n, threads):
    """Block boundaries over ``n`` rows or columns: a multiple of ``threads`` blocks (so the
    threads finish together), two per thread where each still has BLOCK lines."""
    per = 2 if n >= 2 * threads * BLOCK else 1
    blocks = max(1, min(per * threads, n // BLOCK))
    return [n * i // blocks for i in range(blocks + 1)]


def shared_matmul(a, b, threads):
    """``a @ b`` for 2-d ``a``, ``b`` as blocks of columns (or of rows, when ``b`` is narrow)
    taken on demand by ``threads`` threads.

    >>> a, b = np.ones((3, 4)), np.arange(4.0 * 600).reshape(4, 600)
    >>> bool((shared_matmul(a, b, 2) == a @ b).all())
    True
    """
    m, n = a.shape[0], b.shape[1]
    out = np.empty((m, n), np.result_type(a, b))
    if n >= m or n >= threads * BLOCK:
        e = _edges(n, threads)
        on_demand(len(e) - 1, threads, lambda i: np.matmul(a, b[:, e[i]:e[i + 1]], out=out[:, e[i]:e[i + 1]]))
    else:
        e = _edges(m, threads)
        on_demand(len(e) - 1, threads, lambda i: np.matmul(a[e[i]:e[i + 1]], b, out=out[e[i]:e[i + 1]]))
    return out


def matmul(a, b):
    """``np.matmul(a, b)`` (the reference), on all of the plugin's threads for products of at
    least :data:`MIN_FLOPS`: 2-d ones as column (or row) blocks, stacked ones as blocks of the
    stack, each block one single-threaded BLAS call (see the module doc for why never
    BLAS's own threads)."""
    if a.dtype.kind != "f" or a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return nb.IMPLS["matmul"](a, b)
    n = threads()
    m, k, cols = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = max(a.size // max(m * k, 1), b.size // max(k * cols, 1), 1)
    if n <= 1 or 2 * m * k * cols * batch < MIN_FLOPS:
        return nb.IMPLS["matmul"](a, b)
    if a.ndim == 2 and b.ndim == 2:
        return shared_matmul(a, b, n)
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, cols), a.dtype)
    a3, b3 = (np.broadcast_to(x, out.shape[:-2] + x.shape[-2:]).reshape((-1,) + x.shape[-2:]) for x in (a, b))
    o3 = out.reshape((-1, m, cols))
    edges = [o3.shape[0] * i // n for i in range(n + 1)]
    on_demand(n, n, lambda i: np.matmul(a3[edges[i]:edges[i + 1]], b3[edges[i]:edges[i + 1]],
                                        out=o3[edges[i]:edges[i + 1]]))
    return out
