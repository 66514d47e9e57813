"""Matrix products on NumPy's BLAS, and who runs BLAS's threads.

There are two ways to put all cores on one product:

1. **BLAS's own threads.** The fastest for a lone product: its workers are awake when the
   product comes (W1's 128x784 @ 784x512 in 263 µs on two threads, against 315 µs the other
   way, on the 2-core development machine). But OpenBLAS's workers then spin for 2^28 cycles
   (~0.1 s) waiting for the next product, and on a machine with few cores they take the cores
   from whatever runs next: numba's kernels, the convolutions' chunk threads (a LeNet training
   step took 22 ms instead of 13.5).
2. **One-thread BLAS calls on blocks** of the product — of columns, of rows, or of a stack of
   matrices — that the calling thread and helper threads take on demand (:func:`on_demand`,
   :func:`shared_matmul`). Nothing spins, but waking a helper and waiting for it costs
   ~50 µs a product.

OpenBLAS reads how long its workers spin (``OPENBLAS_THREAD_TIMEOUT``: 2 to that power of
cycles) when it starts them. Where NumPy's BLAS is an OpenBLAS on pthreads that exports the
entry points to read its environment again and to stop its threads, :func:`configure` does
that once with :data:`SPIN` (the workers restart with the short timeout on the next product)
and takes way 1 ("blas" mode): products of at least :data:`MIN_FLOPS` run on one BLAS thread
or all, whichever :class:`JointChoice` measured faster for all of them together (on a busy
machine a product on all threads waits for the one that is not scheduled). Convolutions run
their chunks on the plugin's threads, so they set BLAS to one thread while they run
(:func:`one_thread`). Anywhere else (MKL, Accelerate, another OpenBLAS) it takes way 2
("split" mode): BLAS is set to one thread for good and products are split as blocks.
``EMBER_NUMBA_BLAS=split`` chooses way 2 everywhere.
Measured with both on the development machine: W1 steps 1.45-1.55 ms ("blas") against
1.85-1.98 ms ("split"), W2 13.2-13.5 against 13.6-13.9 ms, W3 the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

import numpy as np

from ember.backends.numpy import backend as nb

from .launch import ThreadChoice, threads

MIN_FLOPS = 1 << 24  # ~0.1 ms on one core: below it a second thread cannot pay
BLOCK = 128  # rows or columns per block at least (narrower ones starve the GEMM kernel)
#: How long OpenBLAS's idle workers spin before they sleep, as ``OPENBLAS_THREAD_TIMEOUT``
#: (2**SPIN cycles, ~0.1 ms): enough to bridge the kernels between the products of one
#: backward pass, short enough not to take a core from the work that follows.
SPIN = 18
#: The spin while the products are the only threaded work (an MLP's step): 2**20 cycles (~0.4
#: ms) bridge the small kernels between products and the step's end, where the workers of
#: SPIN sleep and each product waits for them to wake. Where convolutions run chunks on the
#: plugin's threads, a worker spinning that long takes a core from them (W2 3.7% slower).
LONG_SPIN = 20
#: Products on all threads in a row, with no convolution's one-thread block (:func:`one_thread`)
#: among them, before the workers restart with LONG_SPIN: about a dozen steps of an MLP.
LONG_AFTER = 64
_POOL: list = []
#: What :func:`configure` chose: the mode, the thread count, and ("blas" mode) the BLAS
#: libraries loaded then (their files, thread-count setters and restart entry points), the spin
#: in force, whether the plugin may change it (not the user's), and the run of products on all
#: threads since the last one-thread block.
STATE = {
    "mode": None,
    "threads": 1,
    "setters": [],
    "restarts": [],
    "libraries": [],
    "spin": None,
    "respin": False,
    "run": 0,
}


class JointChoice:
    """One thread or all for every product on BLAS's threads together, by measurement.

    Not per product, as :class:`~ember_numba.launch.ThreadChoice` decides for kernels: a
    product's time on two threads depends on the others'. OpenBLAS's workers sleep after their
    short spin (SPIN), and a lone two-thread product among one-thread ones waits for a worker
    the scheduler has not run yet. In the numba+jit W1 step on the shared 2-core machine (load
    1.2) the forward product took 1.9 ms that way, 0.49 ms on one thread and 0.30 ms when every
    product ran on two: each product's own try of two threads lost, so all stayed on one.

    So one road (one thread or all) serves every product. Each product's times on the road
    taken keep a running mean, each time clipped at STALL times the mean (one preempted call
    does not turn the road). After 2 * TRIES rounds (a round: a call per product known, at
    most ROUND), then every ``period`` rounds, a window of TRIES rounds runs the other road, the
    window's first call (the wake-up) not counted, and each product's median there is its
    estimate on that road. The road with the smaller sum over the products measured on both
    is taken: after a window, or at the end of any round in which the road taken has become
    the slower (a machine that got busy). All threads left that way are tried again EXPLORE
    rounds later, so a burst of load does not hold a quiet machine on one thread for a long
    period. A window that does not turn the road doubles the period, or more, so that windows
    lost by a wide margin cost ~2% of the time between them (up to MAX_PERIOD); so does one
    that turns it to all threads (the next window, of one thread, would lose by that margin);
    one that turns it to one thread resets it to EXPLORE. A window's second call that stalls (over STALL times the road
    taken) ends it as lost, and the period grows with the stall, so a busy machine pays for
    few tries (one stall alone, which a quiet machine has too, does not: a single one ended
    quiet W1 runs' first windows and kept them on one thread for 240 steps).

    >>> choice = JointChoice()
    >>> for _ in range(2000):  # two products; one thread 2 s and 3 s, all threads half that
    ...     for key, t in (("a", 2.0), ("b", 3.0)):
    ...         one, explore, st = choice.choose(key)
    ...         choice.record(st, one, explore, t if one else t / 2)
    >>> choice.one
    False
    """

    EXPLORE, MAX_PERIOD, TRIES, SMOOTH, STALL, ROUND = 16, 1024, 3, 0.3, 2.5, 64

    def __init__(self):
        self.stats: dict = {}  # product -> [mean on one thread, on all, this window's times]
        self.one = True  # the road taken: one thread first, while the first steps compile
        # the first window after 2 * TRIES rounds: past the steps that compile (their stalls
        # would end it), within a benchmark's ten warm-up steps
        self.calls, self.period, self.next_try, self.window = 0, 2 * self.TRIES, 0, 0
        self.counted = 0  # calls of the road taken since the last comparison
        self.stalls = 0  # calls of this window that stalled

    def choose(self, key):
        """(use one thread?, is this a call of a window?, the product's record)."""
        st = self.stats.get(key)
        if st is None:
            if len(self.stats) > 10_000:
                self.stats.clear()
            st = self.stats[key] = [None, None, []]
            self.next_try = max(self.next_try, self.calls + self.period * self._round())
        self.calls += 1
        if not self.window and self.calls >= self.next_try:
            self.window, self.stalls = self.TRIES * self._round() + 1, 0
        return (not self.one, True, st) if self.window else (self.one, False, st)

    def record(self, st, one, explore, seconds):
        taken = st[1 if one else 0]  # the road taken: where a window is, the other one
        if explore:
            if self.window <= self.TRIES * self._round():  # not the window's first call
                st[2].append(seconds)
                if taken is not None and seconds > self.STALL * taken:
                    # a second stall: on a busy machine the rest of the window would stall too
                    # (one alone happens on a quiet machine too, and the median discards it)
                    self.stalls += 1
                    if self.stalls >= 2:
                        return self._close_window(seconds / taken)
            self.window -= 1
            if not self.window:
                self._close_window()
            return
        mean = st[0 if one else 1]
        st[0 if one else 1] = seconds if mean is None else mean + self.SMOOTH * (min(seconds, self.STALL * mean) - mean)
        self.counted += 1
        if self.counted >= self._round():
            self.counted = 0
            if self._slower(self.one):
                self.one = not self.one
                if self.one:
                    # Load came (all threads wait for a core): all threads are tried again
                    # after EXPLORE rounds, not after the period (up to MAX_PERIOD rounds), so
                    # a burst does not keep a quiet machine on one thread.
                    self.period = self.EXPLORE
                    self.next_try = min(self.next_try, self.calls + self.period * self._round())

    def _close_window(self, stalled=0.0):
        """The window's medians become the other road's estimates; the faster road is taken.
        A window that loses (or stalled ``stalled`` times the road taken) waits longer."""
        other = 1 if self.one else 0
        for st in self.stats.values():
            if st[2] and not stalled:
                st[other] = sorted(st[2])[len(st[2]) // 2]
            st[2] = []
        if not stalled and self._slower(self.one):
            self.one = not self.one
            # One thread may win back soon (the load goes). A window of one thread after all
            # threads won would lose by this window's margin (load only slows, and its coming
            # turns the road at once, see record): it waits as a lost window does.
            self.period = self.EXPLORE if self.one else self._wait(0.0, self.EXPLORE // 2)
        else:
            self.period = self._wait(stalled, self.period)
        self.window, self.counted = 0, 0
        self.next_try = self.calls + self.period * self._round()

    def _wait(self, stalled, period):
        """Rounds to the next window: twice ``period``, or more where a window costs more. A stall
        costs about ``stalled`` calls, a lost window TRIES rounds times its loss: the wait keeps
        that under ~5% (a stall) or ~2% (a window) of the time between windows."""
        lost = self.TRIES * (self._ratio(self.one) - 1)
        wait = max(20 * stalled / self._round(), 50 * lost)
        return min(max(2 * period, int(wait)), self.MAX_PERIOD)

    def _round(self):
        """Calls in a round: one per product known (at most ROUND: shapes that never repeat)."""
        return min(len(self.stats), self.ROUND)

    def _ratio(self, one):
        """The other road's time over the road ``one``'s, summed over the products measured on both."""
        both = [st for st in self.stats.values() if st[0] is not None and st[1] is not None]
        taken, other = (0, 1) if one else (1, 0)
        return sum(st[other] for st in both) / max(sum(st[taken] for st in both), 1e-12) if both else 1.0

    def _slower(self, one):
        """Is the road ``one`` slower, summed over the products measured on both roads?"""
        both = [st for st in self.stats.values() if st[0] is not None and st[1] is not None]
        taken, other = (0, 1) if one else (1, 0)
        return bool(both) and sum(st[taken] for st in both) > sum(st[other] for st in both)

    def summary(self) -> dict:
        return {k: tuple(v[:2]) for k, v in self.stats.items()} | {"one thread": self.one}


PRODUCT_THREADS = JointChoice()
#: One thread or all for a skinny product (skinny.py), by measurement; its bits are the same on either.
SKINNY_THREADS = ThreadChoice()


def _symbol(dynlib, name):
    """``name`` in ``dynlib``, under the names NumPy's wheels give OpenBLAS's API
    (``scipy_..._64_``); the internals keep theirs."""
    for pre in ("", "scipy_"):
        for post in ("", "64_", "_64"):
            found = getattr(dynlib, pre + name + post, None)
            if found is not None:
                return found
    return None


def _openblas_handles():
    """The thread-count setter and the restart entry points of each OpenBLAS (pthreads) loaded
    in this process, or None when one of them lacks them (then "split" mode)."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    found = []
    for lib in threadpoolctl.ThreadpoolController().lib_controllers:
        if lib.user_api != "blas":
            continue
        if lib.internal_api != "openblas" or lib.threading_layer != "pthreads":
            return None
        setter = _symbol(lib.dynlib, "openblas_set_num_threads")
        read_env = getattr(lib.dynlib, "openblas_read_env", None)
        stop = getattr(lib.dynlib, "blas_thread_shutdown_", None)
        if setter is None or read_env is None or stop is None:
            return None
        setter.argtypes, setter.restype = [ctypes.c_int], None
        found.append((setter, read_env, stop, lib.filepath))
    return found or None


def _respin(restarts, spin):
    """Restart each OpenBLAS's workers with a spin of 2**``spin`` cycles: OpenBLAS reads
    ``OPENBLAS_THREAD_TIMEOUT`` only when it starts its workers. The variable is set only while
    OpenBLAS reads it. Called between products, never during one (the jit runner and the
    eager path call products one at a time)."""
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(spin)
    try:
        for read_env, stop in restarts:
            read_env()
            stop()  # what OpenBLAS's own fork handler does; threads restart on demand
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    STATE["spin"] = str(spin)


def _shorten_spin(handles):
    """Restart each OpenBLAS's workers with a spin of 2**SPIN cycles (the user's
    ``OPENBLAS_THREAD_TIMEOUT`` wins, and is never changed). Called once, when the plugin
    loads, before any product of the plugin's runs."""
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return os.environ["OPENBLAS_THREAD_TIMEOUT"] + " (the user's)"
    STATE["respin"] = True
    _respin([(h[1], h[2]) for h in handles], SPIN)
    return str(SPIN)


def configure(n: int) -> str:
    """Give BLAS ``n`` threads the way this BLAS allows (see the module doc); returns what was
    done, for ``capabilities().notes``."""
    handles = _openblas_handles() if os.environ.get("EMBER_NUMBA_BLAS", "") != "split" else None
    STATE["threads"] = n
    if handles:
        if STATE["spin"] is None:
            STATE["spin"] = _shorten_spin(handles)
        STATE["mode"], STATE["setters"], STATE["libraries"] = "blas", [h[0] for h in handles], [h[3] for h in handles]
        STATE["restarts"] = [(h[1], h[2]) for h in handles]
        _set(n)
        return f"{n} (OpenBLAS's threads, spin 2**{STATE['spin']} cycles; one inside convolutions)"
    STATE["mode"] = "split"
    return single_threaded()


def _set(n):
    for setter in STATE["setters"]:
        setter(n)


def one_thread():
    """BLAS on one thread inside the block ("blas" mode; in "split" mode it always is): for
    work that runs its own one-thread BLAS calls on the plugin's threads. Its threads need the
    cores: BLAS's workers go back to the short spin (SPIN) if they had the long one."""
    _short_spin()
    return _blas_on_one()


def _short_spin():
    """The plugin's threads are about to run: BLAS's workers back to the short spin (stopping
    any that spin now: the cores are free at once), and the run of products starts again."""
    STATE["run"] = 0
    if STATE["spin"] == str(LONG_SPIN) and STATE["respin"]:
        _respin(STATE["restarts"], SPIN)


@contextlib.contextmanager
def _blas_on_one():
    """BLAS on one thread inside the block, the spin unchanged (a product of the plugin's own)."""
    if STATE["mode"] != "blas" or STATE["threads"] <= 1:
        yield
        return
    _set(1)
    try:
        yield
    finally:
        _set(STATE["threads"])


def single_threaded() -> str:
    """Set every BLAS library loaded in this process to one thread (threadpoolctl). Returns
    what was done, for ``capabilities().notes``."""
    try:
        import threadpoolctl
    except ImportError:
        return "unchanged (threadpoolctl not installed): BLAS may run its own threads"
    global _LIMIT  # kept alive: the limiter restores the old limits when collected
    _LIMIT = threadpoolctl.threadpool_limits(1, user_api="blas")
    return "1 (products are split across the plugin's threads)"


def _pool(helpers):
    """A pool of ``helpers`` daemon threads, made once (helpers that sleep between jobs)."""
    from concurrent.futures import ThreadPoolExecutor

    if not _POOL or _POOL[0][0] < helpers:
        _POOL[:] = [(helpers, ThreadPoolExecutor(helpers, thread_name_prefix="ember-numba"))]
    return _POOL[0][1]


#: Open :func:`awake` scopes (a sample's layers): on_demand's helpers then stay awake (crew.py).
_AWAKE = [0]
_CREW: list = []


@contextlib.contextmanager
def awake():
    """Inside the block, :func:`on_demand` runs on the crew (crew.py): helpers that stay awake
    between a network's layers and keep off the caller's core. For one sample's layers, whose
    blocks last 0.1-1 ms: a sleeping helper came too late for them. Elsewhere (a batch's
    chunks, of several ms) the helpers sleep as before: a spinning one took the core from
    the BLAS and OpenMP threads that follow (W2 3-4% slower)."""
    _AWAKE[0] += 1
    try:
        yield
    finally:
        _AWAKE[0] -= 1


def _crew(helpers):
    """The plugin's helper threads (crew.py), at least ``helpers`` of them, made once."""
    from .crew import Crew

    if not _CREW or _CREW[0].helpers < helpers:
        _CREW[:] = [Crew(helpers)]
        if STATE["mode"] == "split":
            single_threaded()  # the crew's first compile may load another BLAS (scipy's, via numba)
    return _CREW[0]


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
    team = _crew(threads - 1) if _AWAKE[0] else None
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
                    if team is not None:
                        team.finished()

    if team is None:
        pool = _pool(threads - 1)
        for _ in range(min(threads, count) - 1):
            pool.submit(loop)
        loop()
        finished.wait()
    else:
        with team.pinned():
            team.post(loop, min(threads, count) - 1)
            loop()
            team.wait(finished.is_set)
    if state["error"] is not None:
        raise state["error"]


def _edges(n, threads):
    """Block boundaries over ``n`` rows or columns: a multiple of ``threads`` blocks (so the
    threads finish together), two per thread where each still has BLOCK lines."""
    per = 2 if n >= 2 * threads * BLOCK else 1
    blocks = max(1, min(per * threads, n // BLOCK))
    return [n * i // blocks for i in range(blocks + 1)]


def shared_matmul(a, b, threads, out=None, then=None):
    """``a @ b`` for 2-d ``a``, ``b`` as blocks of columns (or of rows, when ``b`` is narrow)
    taken on demand by ``threads`` threads; into ``out`` when given. ``then(r0, r1, c0, c1)``,
    if given, runs after each block (rows r0 .. r1-1, columns c0 .. c1-1 of ``out``), on the
    thread that made it, while the block is in its cache (a convolution's epilogue).

    >>> a, b = np.ones((3, 4)), np.arange(4.0 * 600).reshape(4, 600)
    >>> bool((shared_matmul(a, b, 2) == a @ b).all())
    True
    """
    m, n = a.shape[0], b.shape[1]
    if out is None:
        out = np.empty((m, n), np.result_type(a, b))
    by_columns = n >= m or n >= threads * BLOCK
    e = _edges(n if by_columns else m, threads)
    if _native_blocks(a, b, out, e, by_columns, threads, then):
        return out

    def block(i):
        lo, hi = e[i], e[i + 1]
        if by_columns:
            np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])
        else:
            np.matmul(a[lo:hi], b, out=out[lo:hi])
        if then is not None:
            then(*((0, m, lo, hi) if by_columns else (lo, hi, 0, n)))

    on_demand(len(e) - 1, threads, block)
    return out


#: The dtypes of native blocks, and the empty arrays that stand for "no epilogue" in them.
_NO_EPILOGUE = {np.dtype(t): np.zeros(0, t) for t in (np.float32, np.float64)}


def _native_blocks(a, b, out, edges, by_columns, threads, then=None) -> bool:
    """``out = a @ b`` as native blocks on the crew (crew.Crew.run_blocks: the helpers take
    them without the GIL), the blocks of columns or rows ``edges``, each with ``then``'s
    epilogue (epilogue.Block.native) after it; False, having done nothing, where that cannot
    be: no crew awake, no native BLAS, an epilogue with no native form, or an operand whose
    rows are not contiguous (BLAS takes a leading dimension, not an inner stride)."""
    none = _NO_EPILOGUE.get(a.dtype)
    if not _AWAKE[0] or none is None or not a.dtype == b.dtype == out.dtype or len(edges) - 1 > 64:
        return False
    after = None if then is None else getattr(then, "native", None)
    if then is not None and after is None:
        return False
    from . import crew

    team = _CREW[0] if _CREW and _CREW[0].helpers >= threads - 1 else _crew(threads - 1)
    if team.native is None or not crew.NATIVE or not crew.NATIVE_LOCK.acquire(blocking=False):
        return False  # the lock: another thread's product holds the one table of blocks
    try:
        return team.run_blocks(len(edges) - 1, by_columns, a, b, out, after or (none, none, none, _OFF))
    finally:
        crew.NATIVE_LOCK.release()


_OFF = (0, 0, 0, 0, 0)


def native_rows(threads, dtype, kernel, width, count, fill) -> bool:
    """Run ``count`` native blocks of kind 3 (crew.py: a C function and its arguments a row)
    on the crew: ``kernel`` (``width`` arguments) as the C function of ``dtype``
    (crew.c_function), ``fill(BLOCKS, fn, gemm, slots)`` writing the rows (``fn`` that
    function's address, ``gemm`` the dtype's BLAS ``gemm``, ``slots`` the threads that may take
    them, each with its own buffers). False, having done nothing, where they cannot run so:
    outside :func:`awake`, a dtype other than float32 or float64, more rows than the table
    holds, no native BLAS, or another thread holding the one table of blocks."""
    from . import crew

    if not _AWAKE[0] or not crew.NATIVE or dtype not in _NO_EPILOGUE or count > len(crew.BLOCKS):
        return False
    team = _CREW[0] if _CREW and _CREW[0].helpers >= threads - 1 else _crew(threads - 1)
    if team.native is None or not crew.NATIVE_LOCK.acquire(blocking=False):
        return False
    try:
        fn, gemm = crew.c_function(kernel, width, dtype), team.native[0 if dtype == np.float32 else 1]
        fill(crew.BLOCKS, fn, gemm, team.helpers + 1)
        team.run_rows(count)
    finally:
        crew.NATIVE_LOCK.release()
    return True


def matmul(a, b, out=None):
    """``np.matmul(a, b)`` (the reference), into ``out`` when given. Products of at least
    :data:`MIN_FLOPS` go on all threads: in "blas" mode on BLAS's own (or on one, where that
    measured faster), in "split" mode as blocks of one-thread BLAS calls (2-d products as
    column or row blocks, stacked ones as blocks of the stack). Smaller ones run on one thread."""
    if a.dtype.kind != "f" or a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return nb.IMPLS["matmul"](a, b) if out is None else np.matmul(a, b, out=out)
    n = STATE["threads"] if STATE["mode"] == "blas" else threads()
    if skinny.takes(a, b):
        return _skinny(a, b, n, out)
    m, k, cols = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = max(a.size // max(m * k, 1), b.size // max(k * cols, 1), 1)
    if n <= 1 or 2 * m * k * cols * batch < MIN_FLOPS:
        if n > 1 and STATE["mode"] == "blas" and not _workers_awake():
            # OpenBLAS would thread it by its own rule (from ~2.6e5 multiply-adds): on a busy
            # machine the caller then waits for a worker that is not scheduled.
            with _blas_on_one():
                return np.matmul(a, b, out=out)
        return nb.IMPLS["matmul"](a, b) if out is None else np.matmul(a, b, out=out)
    if STATE["mode"] == "blas":
        return _on_blas_threads(a, b, out)
    if a.ndim == 2 and b.ndim == 2:
        return shared_matmul(a, b, n, out)
    if out is None:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, cols), a.dtype)
    elif out.ndim != 3:  # its blocks would be copies, not views
        return np.matmul(a, b, out=out)
    a3, b3 = (np.broadcast_to(x, out.shape[:-2] + x.shape[-2:]).reshape((-1,) + x.shape[-2:]) for x in (a, b))
    o3 = out.reshape((-1, m, cols))
    edges = [o3.shape[0] * i // n for i in range(n + 1)]
    on_demand(
        n,
        n,
        lambda i: np.matmul(a3[edges[i] : edges[i + 1]], b3[edges[i] : edges[i + 1]], out=o3[edges[i] : edges[i + 1]]),
    )
    return out


def _on_blas_threads(a, b, out=None):
    """``a @ b`` on BLAS's threads, or on one where PRODUCT_THREADS measured that faster."""
    one, explore, st = PRODUCT_THREADS.choose((a.shape, b.shape, a.strides, b.strides, a.dtype.num))
    _spin_for(PRODUCT_THREADS.one)  # before the clock starts: a restart is not the product's
    t0 = time.perf_counter()
    if one:
        with _blas_on_one():
            out = np.matmul(a, b, out=out)
    else:
        out = np.matmul(a, b, out=out)
    PRODUCT_THREADS.record(st, one, explore, time.perf_counter() - t0)
    return out


def _workers_awake() -> bool:
    """Are BLAS's workers spinning between products, on a machine measured quiet? So while
    the large products take all threads with the long spin (an MLP's step): a small product
    then runs by OpenBLAS's own rule with no wake-up to wait for, and setting BLAS to one
    thread and back around it would cost more than the product (W1's three products with its
    10-wide layer: 17-27 µs each that way, 8-17 µs not)."""
    return STATE["spin"] == str(LONG_SPIN) and not PRODUCT_THREADS.one


def _spin_for(one_road):
    """The long spin (LONG_SPIN) once LONG_AFTER products have come on the road of all threads
    with no convolution's one-thread block among them. The road turning to one thread (a busy
    machine) keeps it: on one thread the workers are not woken, and a restart costs 3-10 ms
    under load (stopping workers that wait for a core, starting new ones)."""
    if one_road or not STATE["respin"]:
        return
    STATE["run"] += 1
    if STATE["run"] >= LONG_AFTER and STATE["spin"] != str(LONG_SPIN):
        _respin(STATE["restarts"], LONG_SPIN)


def _skinny(w, x, n, out=None):
    """``w @ x`` as skinny.matmul (weights read in place, no repacking), for each (K, P) matrix
    of ``x``, on one thread or ``n``, whichever SKINNY_THREADS measured faster."""
    o, p = w.shape[0], x.shape[-1]
    if out is None:
        out = np.empty(x.shape[:-2] + (o, p), np.float32)
    one, explore, st = SKINNY_THREADS.choose((w.shape, x.shape))
    if not one and n > 1:
        _short_spin()  # its blocks run on the plugin's threads
    t0 = time.perf_counter()
    for i in np.ndindex(x.shape[:-2]):
        skinny.matmul(w, x[i], out[i], 1 if one or n <= 1 else n)
    SKINNY_THREADS.record(st, one, explore, time.perf_counter() - t0)
    return out


from . import skinny  # noqa: E402 - last: skinny.py's kernels import this module's names
