"""Threads: numba's threading layer and thread count, chosen before numba is imported.

Why this matters: numba's OpenMP layer, left to its defaults, keeps its workers spinning
between parallel regions; on a small machine whose other cores are busy (CI, a shared
2-core box) each parallel call then waits for a descheduled spinner, about 8 ms instead of
0.5 ms. Passive waiting (``OMP_WAIT_POLICY=passive``) puts idle workers to sleep instead.
The OpenMP layer is preferred to the ``workqueue`` one because it is safe when two Python
threads launch kernels at once (ember's DataLoader prefetches in a thread); workqueue is the
fallback where numba has no OpenMP. Whatever the user set in the environment wins.

Thread count: ``EMBER_NUM_THREADS`` (else numba's default, the number of cores) for numba's
kernels and for matrix products (blas.py: on BLAS's own threads with their spin shortened, or,
where that cannot be done, BLAS on one thread and products split by the plugin).
:func:`set_num_threads` changes it later.

The variables are set only while numba starts its threads and removed again afterwards
(:data:`STATE` records what was set): a process this one starts — a benchmark's PyTorch, a
user's subprocess — does not inherit them.
"""

from __future__ import annotations

import os
import sys

#: What :func:`configure` did, for ``capabilities().notes`` and the docs.
STATE = {"layer": None, "threads": None, "blas_threads": None, "configured_before_import": None, "environment": {}}


def _env_threads() -> int | None:
    value = os.environ.get("EMBER_NUM_THREADS", "").strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"EMBER_NUM_THREADS must be a positive integer, got {value!r}") from None
    if n < 1:
        raise ValueError(f"EMBER_NUM_THREADS must be a positive integer, got {value!r}")
    return n


def configure() -> dict:
    """Set what numba reads when it starts its threads (layer, wait policy, pool size), start
    them, then put the environment back, so that processes this one starts (a benchmark's
    PyTorch, a user's subprocess) do not inherit our settings. Works before numba is imported,
    and after, as long as no parallel kernel has run yet. Idempotent; returns :data:`STATE`."""
    n = _env_threads()
    imported = "numba" in sys.modules
    STATE["configured_before_import"] = not imported
    wanted = {"OMP_WAIT_POLICY": "passive"}
    if not imported:
        # A priority, not a choice: numba then falls back by itself where OpenMP cannot load.
        wanted["NUMBA_THREADING_LAYER_PRIORITY"] = "omp workqueue tbb"
        if n is not None:
            wanted["NUMBA_NUM_THREADS"] = str(n)
    import numba
    from numba.np.ufunc import parallel

    if imported and parallel._is_initialized:
        wanted = {}  # too late: the threads already run as they were told
    ours = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(ours)
    try:
        if imported and "NUMBA_THREADING_LAYER_PRIORITY" not in os.environ and not parallel._is_initialized:
            numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]
        # numba reads NUMBA_* when imported; setting the count starts the threads, and OpenMP
        # reads OMP_WAIT_POLICY as it loads.
        set_num_threads(n if n is not None else numba.config.NUMBA_NUM_THREADS)
        STATE["layer"] = numba.threading_layer()
    finally:
        for k in ours:
            os.environ.pop(k, None)
    STATE["environment"] = dict(ours)
    return STATE


def set_num_threads(n: int, blas: bool = True) -> int:
    """Use ``n`` threads in numba's kernels (at most the pool's size) and (with ``blas``) in
    matrix products (:func:`ember_numba.blas.configure`). Returns the numba thread count now in force.

    numba keeps the count per calling thread; ember calls its kernels from the thread that
    set it, which is also what a training loop does.
    """
    import numba

    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    STATE["threads"] = n
    if blas:
        from .blas import configure

        STATE["blas_threads"] = configure(n)  # blas.py: BLAS's threads or its own split
    return n


def get_num_threads() -> int:
    import numba

    return numba.get_num_threads()
