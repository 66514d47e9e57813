"""A convolution's blocks of the batch on all of BLAS's threads at once, each block's
products on one thread.

Why. OpenBLAS cuts every product across its threads. For a convolution's narrow products
(64 or 128 output channels: the columns of a block of images times a (9C, O) weight) one
two-thread product a block runs well below two one-thread products side by side, and the
NumPy copies between the products (each block's columns, col2im) run on the calling
thread while BLAS's other threads wait. Giving each thread whole blocks, with BLAS on one
thread meanwhile, runs the copies on every core too (measured on 2 cores, batch 128, alone:
ResNet-18's 64-channel 3x3 convolution 68.8 -> 49.6 ms, its weight gradient 64.7 -> 46.6 ms;
128 channels 41.7 -> 36.0 and 41.9 -> 35.9 ms; at 512 channels the weight gradient took
1.07x the time and the W3 step gained nothing from the others, so the callers split only
narrow layers; docs/performance.md).

Each block is computed as on one thread: the same calls on the same block, whose products
OpenBLAS gives the same bits on one thread or several. A sum over blocks (a weight
gradient) is taken in PARTS fixed runs of blocks, added in order, whatever the thread count.

OpenBLAS's thread count is process-wide: while a split runs, products that other Python
threads start run on one thread too. And OpenBLAS's workers spin for a while after each
product (2**28 cycles by default, ~0.1 s), taking a core from the split's threads (measured:
1.1-1.9x the time), so a split stops them first (``openblas.stop_workers``, as OpenBLAS's
fork handler does); a product another Python thread is running at that moment would not
survive it. A program that runs NumPy products on threads of its own while it trains (a data
loader's transform with a matrix product, say) should set ``EMBER_NUMPY_SPLIT=0``, which
turns splitting off. A shorter spin for the whole process instead (what the numba plugin
sets) cost W1-train on numpy+jit 6.5%. Where NumPy's BLAS is not its bundled OpenBLAS (no
:func:`~ember.backends.numpy.openblas.thread_count`), or runs on one thread, the runs go one
after the other on the calling thread.

>>> each(sum, list(range(10)))
[3, 12, 13, 17]
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from . import openblas

#: Runs of blocks a split makes: fixed, so that a sum over the runs does not depend on the
#: number of threads; more runs than threads also even out runs of unequal cost.
PARTS = 4

_POOL: dict = {}
_LOCK = threading.Lock()
_HELD = {"splits": 0, "threads": 1}  # splits running now; BLAS's thread count before the first


def _forget_in_child():
    # a forked child (a data loader's worker) has none of the parent's threads: a pool it
    # inherited would take work that no thread runs
    global _LOCK
    _POOL.clear()
    _LOCK = threading.Lock()
    _HELD["splits"] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def threads() -> int:
    """BLAS's thread count now: how many threads a split would use (1: none; always 1 with
    ``EMBER_NUMPY_SPLIT=0``)."""
    control = openblas.thread_count()
    if control is None or os.environ.get("EMBER_NUMPY_SPLIT", "").strip() == "0":
        return 1
    return max(1, control[0]())


def runs(items, parts=PARTS):
    """``items`` cut into at most ``parts`` contiguous runs whose lengths differ by at most one.

    >>> runs(list(range(5)), 2)
    [[0, 1, 2], [3, 4]]
    """
    k = max(1, min(parts, len(items)))
    q, r = divmod(len(items), k)
    bounds = list(itertools.accumulate([q + 1] * r + [q] * (k - r), initial=0))
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


def each(fn, items, parts=PARTS):
    """``[fn(run) for run in runs(items, parts)]``: the runs on up to :func:`threads` threads
    (the calling one among them), BLAS on one thread while they run; results in the runs'
    order. ``parts=1``: ``[fn(items)]`` on the calling thread, BLAS untouched (work too small
    to split)."""
    parts = runs(items, parts)
    n = min(threads(), len(parts)) if len(parts) > 1 else 1
    if n <= 1:
        return [fn(p) for p in parts]
    results = [None] * len(parts)
    ticket = itertools.count()  # next() on it is atomic: each run is taken once

    def work():
        while (i := next(ticket)) < len(parts):
            results[i] = fn(parts[i])

    with _blas_on_one_thread():
        helpers = [_pool(n - 1).submit(work) for _ in range(n - 1)]
        try:
            work()
        finally:
            for h in helpers:
                h.result()  # waits for every run, and re-raises a helper's error
    return results


def _pool(n):
    with _LOCK:
        if _POOL.get("size", 0) < n:
            if "pool" in _POOL:
                _POOL["pool"].shutdown(wait=False)
            _POOL["pool"], _POOL["size"] = ThreadPoolExecutor(n, thread_name_prefix="ember-numpy"), n
        return _POOL["pool"]


@contextlib.contextmanager
def _blas_on_one_thread():
    get, put = openblas.thread_count()
    with _LOCK:
        if _HELD["splits"] == 0:
            _HELD["threads"] = get()
            put(1)
            openblas.stop_workers()  # a worker spinning after the last product would take a core
        _HELD["splits"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _HELD["splits"] -= 1
            if _HELD["splits"] == 0:
                put(_HELD["threads"])
