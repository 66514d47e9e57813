"""Helper threads that stay awake between the blocks of one call: :func:`blas.on_demand`'s crew.

Why: a helper asleep in a queue is slow to start. On the 2-core development machine (a virtual
machine, quiet), a helper posted eight blocks of 0.11 ms after a 0.5 ms gap took none of them in
57 of 100 calls, and started 46 µs late in the median when it did: the woken thread waits in the
caller's core's queue while the caller runs BLAS, and the second core idles. So the forced
two-thread ResNet-50 call at batch 1 was slower than the one-thread call on almost every layer.

So each helper, after its work, spins without the GIL (a numba loop of atomic loads, yielding
the core to anything else runnable) for AWAKE seconds, watching the job number; a job posted
meanwhile starts at once, on the core the helper holds. Only then does it sleep on its event.
A network's layers come 20-100 µs apart, so the helper stays awake through one call and sleeps
after it. The caller waits for the last block the same way (:func:`wait`), then on an event.

A block that is Python code needs the GIL, and that costs the hand-off again: the helper's spin
sees the job while the caller still holds the GIL (on its way into its own block), so the
helper sleeps on the GIL and is woken only when the caller's BLAS call releases it. On the
development machine (a Firecracker VM whose idle cores halt at once, so every wake-up is an
interrupt through the host) the helper started its block 64-82 µs after the caller, and a
product split in two took 0.70-0.85 of one thread's time where each half alone took 0.51-0.57.
So a product's blocks can also be posted as **native blocks** (:meth:`Crew.run_blocks`): rows
of :data:`BLOCKS` that name a BLAS ``gemm`` call by its operands' addresses, which the helpers'
spin runs itself, without returning to Python (:func:`_take`, claimed one at a time through
:data:`CTRL`, so a helper the machine does not schedule takes none). The same products then
took 0.43-0.54 of one thread's time.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .epilogue import _apply

#: Seconds a helper spins after its last block before it sleeps: longer than the gap between
#: two layers of a network (20-100 µs), short enough that a call's end frees the core.
AWAKE = 1e-3
#: Whether products go as native blocks (:meth:`Crew.run_blocks`) where the BLAS allows (read
#: at each product: ``python -m benchmarks.onnx_ab --flag ember_numba.crew.NATIVE`` compares).
NATIVE = True
#: The job number the helpers watch ([0]) and the number of the last job finished ([1]).
FLAGS = np.zeros(2, np.int64)
#: A native job's blocks, one row each: (kind, m, n, k, a, lda, b, ldb, c, ldc), kind 1 a
#: float32 ``gemm`` and 2 a float64 one, ``a``, ``b``, ``c`` addresses (row-major, no
#: transposition): ``c[:m, :n] = a[:m, :k] @ b[:k, :n]``; then, if column 10 is 1, an
#: epilogue (epilogue.py) on that block, columns 11-20: (y, O, P, o0, o1, p0, p1, bias,
#: residual or 0, relu), ``y`` a sample's (O, P) output. Kind 3: column 1 the address of a C
#: function ``void f(int64 *args, int64 slot)`` called with columns 2 on and the taker's slot
#: (a convolution's band, compiled as a numba cfunc: winograd.py's and conv.py's native blocks).
BLOCKS = np.zeros((64, 32), np.int64)
#: [0] the native job's claim word: its number (low 31 bits) << 32 | block count << 16 | next
#: block to take; [1] its blocks done. One word, so a helper late for a finished job (still
#: holding its number) can never take a block of the next one.
CTRL = np.zeros(2, np.int64)
#: Held while a caller's native blocks are in BLOCKS: a second thread's product at the same
#: time (two inference threads) goes as Python blocks instead of overwriting them.
NATIVE_LOCK = threading.Lock()


def _item(context, builder, sig, args):
    """The address of ``words[i]`` for an intrinsic whose first two arguments are (words, i)."""
    ary = context.make_array(sig.args[0])(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])


@intrinsic
def _load_acquire(typingctx, flags, i):
    """``flags[i]`` as an atomic load, so the loop below reads memory each time round."""

    def codegen(context, builder, sig, args):
        ptr = _item(context, builder, sig, args)
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(flags, i), codegen


@intrinsic
def _store_release(typingctx, words, i, value):
    """``words[i] = value`` as an atomic store: what was written before it is seen first."""

    def codegen(context, builder, sig, args):
        builder.store_atomic(args[2], _item(context, builder, sig, args), "release", 8)
        return context.get_dummy_value()

    return types.none(words, i, value), codegen


@intrinsic
def _compare_swap(typingctx, words, i, old, new):
    """Atomically ``words[i] = new`` if it holds ``old``; returns whether it did."""

    def codegen(context, builder, sig, args):
        ptr = _item(context, builder, sig, args)
        pair = builder.cmpxchg(ptr, args[2], args[3], "acq_rel", "acquire")
        return builder.extract_value(pair, 1)

    return types.boolean(words, i, old, new), codegen


@intrinsic
def _fetch_add(typingctx, words, i, value):
    """Atomically ``words[i] += value``; returns the old value."""

    def codegen(context, builder, sig, args):
        ptr = _item(context, builder, sig, args)
        return builder.atomic_rmw("add", ptr, args[2], "acq_rel")

    return types.int64(words, i, value), codegen


@intrinsic
def _pointer(typingctx, address, like):
    """The address as a pointer to ``like``'s dtype (a 0-d marker array)."""
    ptr = types.CPointer(like.dtype)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(address, like), codegen


_LIBC = ctypes.CDLL(None)
#: sched_yield's address: an argument of the compiled loops that call it, as the native blocks
#: take theirs (native_functions). A ctypes function is a constant of the machine code, and
#: numba caches no function with one: :func:`_spin` was compiled again in every process (0.4-1
#: s, and numba's whole set-up for compiling with it, in the first call of a network).
YIELD_AT = ctypes.cast(_LIBC.sched_yield, ctypes.c_void_p).value
#: The core the calling thread runs on (Linux), or None where it cannot be known or pinned.
_getcpu = getattr(_LIBC, "sched_getcpu", None) if hasattr(os, "sched_setaffinity") else None


@numba.njit(cache=True, nogil=True)
def _spin(flags, i, seen, rounds, yield_at):  # pragma: no cover - compiled
    """Spin while ``flags[i] == seen``, at most ``rounds`` times; returns whether it changed."""
    for _ in range(rounds):
        if _load_acquire(flags, i) != seen:
            return True
        _call_at(yield_at)  # the core to any thread waiting for it (an OpenMP worker, another process)
    return _load_acquire(flags, i) != seen


F32, F64, I64 = (np.zeros((), t) for t in (np.float32, np.float64, np.int64))  # dtype markers for _pointer


@numba.njit(cache=True, nogil=True)
def address(a):  # pragma: no cover - compiled
    """``a``'s data address, for a native block's row (``a.ctypes.data`` costs 2-3 µs from
    Python, this call 0.3)."""
    return a.ctypes.data


@numba.njit(cache=True, nogil=True)
def _epilogue(r, like):  # pragma: no cover - compiled
    """epilogue._apply on the block that row ``r`` of BLOCKS describes (columns 11-20)."""
    size = r[12] * r[13]
    y = numba.carray(_pointer(r[11], like), size)
    bias = numba.carray(_pointer(r[18], like), r[12])
    residual = numba.carray(_pointer(r[19] if r[19] else r[11], like), size if r[19] else 0)
    _apply(y, r[12], r[13], 0, 1, r[14], r[15], r[16], r[17], bias, residual, r[20] != 0)


@intrinsic
def _gemm_at(typingctx, address, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """Call the CBLAS ``?gemm`` at ``address`` (64-bit integers; ``alpha`` and ``beta`` of
    its precision) row-major, ``ta``/``tb`` CBLAS's transposition codes (111 none, 112
    transposed); ``a``, ``b``, ``c`` addresses. The address is an argument, not a constant
    of the machine code, so the callers are cached."""
    scalar = alpha

    def codegen(context, builder, sig, args):
        i32, i64, fl = ir.IntType(32), ir.IntType(64), context.get_value_type(scalar)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, fl, i64, i64, i64, i64, fl, i64, i64])
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        ta, tb = (builder.trunc(v, i32) for v in args[1:3])
        builder.call(fn, [ir.Constant(i32, 101), ta, tb, *args[3:]])  # 101: row-major
        return context.get_dummy_value()

    i = types.int64
    return types.none(i, i, i, i, i, i, scalar, i, i, i, i, scalar, i, i), codegen


@intrinsic
def _call_row(typingctx, address, row, slot):
    """Call the C function ``void f(int64 *args, int64 slot)`` at ``address`` with ``row``'s
    address and the taker's slot (a native block of kind 3: a band of a convolution, say,
    compiled as a numba cfunc; the slot picks its buffers, one set a thread)."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        fn = builder.inttoptr(args[0], ir.FunctionType(ir.VoidType(), [i64.as_pointer(), i64]).as_pointer())
        builder.call(fn, [builder.inttoptr(args[1], i64.as_pointer()), args[2]])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.int64), codegen


@intrinsic
def _call_at(typingctx, address):
    """Call the C function ``int f(void)`` at ``address`` (sched_yield), ignoring its result."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), [])
        return context.get_dummy_value()

    return types.none(types.int64), codegen


@numba.njit(cache=True, nogil=True)
def _take(ctrl, blocks, number, fns, slot):  # pragma: no cover - compiled
    """Take job ``number``'s native blocks one at a time until none is left (or the job is
    over); ``fns``: the addresses of :func:`native_functions`; ``slot``: the taker's number
    (the caller 0, helper i i + 1), which a kind-3 block's function gets to pick its buffers."""
    while True:
        word = _load_acquire(ctrl, 0)
        count, i = (word >> 16) & 0xFFFF, word & 0xFFFF
        if (word >> 32) != (number & 0x7FFFFFFF) or i >= count:
            return
        if not _compare_swap(ctrl, 0, word, word + 1):
            continue
        r = blocks[i]
        if r[0] == 1:
            _gemm_at(
                fns[0], 111, 111, r[1], r[2], r[3], np.float32(1), r[4], r[5], r[6], r[7], np.float32(0), r[8], r[9]
            )
            if r[10]:
                _epilogue(r, F32)
        elif r[0] == 2:
            _gemm_at(fns[1], 111, 111, r[1], r[2], r[3], 1.0, r[4], r[5], r[6], r[7], 0.0, r[8], r[9])
            if r[10]:
                _epilogue(r, F64)
        else:
            _call_row(r[1], r.ctypes.data + 16, slot)  # kind 3: its function, on the row from column 2
        _fetch_add(ctrl, 1, 1)


@numba.njit(cache=True, nogil=True)
def _serve(flags, ctrl, blocks, seen, rounds, fns, slot):  # pragma: no cover - compiled
    """:func:`_spin` that runs the native jobs posted meanwhile itself and spins on. Returns
    (the last job number seen, whether a Python job is waiting); at most ``rounds`` rounds
    with nothing to do."""
    left = rounds
    while left > 0:
        number = _load_acquire(flags, 0)
        if number != seen:
            if (_load_acquire(ctrl, 0) >> 32) != (number & 0x7FFFFFFF):
                return seen, True
            _take(ctrl, blocks, number, fns, slot)
            seen, left = number, rounds
            continue
        _call_at(fns[2])
        left -= 1
    return seen, False


@numba.njit(cache=True, nogil=True)
def _wait_done(ctrl, count, rounds, fns):  # pragma: no cover - compiled
    """Spin until ``count`` native blocks are done, at most ``rounds`` rounds; whether they are."""
    for _ in range(rounds):
        if _load_acquire(ctrl, 1) >= count:
            return True
        _call_at(fns[2])
    return _load_acquire(ctrl, 1) >= count


@numba.njit(inline="always", nogil=True)
def _blas_rows(x, size):  # pragma: no cover - compiled
    """Can BLAS take 2-d ``x`` by a leading dimension: its rows contiguous and apart?"""
    return x.strides[1] == size and x.strides[0] % size == 0 and x.strides[0] >= x.shape[1] * size


@numba.njit(cache=True, nogil=True)
def _product(
    flags, ctrl, blocks, fns, number, rounds, count, by_columns, a, b, c, y, bias, residual, e
):  # pragma: no cover - compiled
    """Post and run job ``number``: ``c = a @ b`` (2-d arrays of one float dtype) as ``count``
    native blocks, of columns (``by_columns``) or rows, cut at ``total * i // count``; with an
    epilogue where ``e[0]``: ``e`` = (on, the sample's offset in ``y``, O, P, relu), ``y`` the
    whole output, flat, ``bias`` (O,), ``residual`` ``y``'s or empty. Fills the rows, posts the
    job, takes the caller's share and waits for the rest, in one call: the same steps from
    Python cost 40-60 µs a product. Returns 1 once all blocks are done, 0 if some are not yet,
    -1 (an empty job posted) where BLAS cannot take an operand: its rows not contiguous."""
    size = a.itemsize
    if not (_blas_rows(a, size) and _blas_rows(b, size) and _blas_rows(c, size)):
        _post(flags, ctrl, blocks, fns, number, rounds, 0)  # an empty job: the numbers stay in step
        return -1
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    lda, ldb, ldc = a.strides[0] // size, b.strides[0] // size, c.strides[0] // size
    pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
    total = n if by_columns else m
    on, offset, O, P, relu = e
    at = y.ctypes.data + offset * size
    for i in range(count):
        lo, hi = total * i // count, total * (i + 1) // count
        r = blocks[i]
        r[0], r[3], r[5], r[7], r[9], r[10] = 1 if size == 4 else 2, k, lda, ldb, ldc, on
        if by_columns:
            r[1], r[2], r[4], r[6], r[8] = m, hi - lo, pa, pb + lo * size, pc + lo * size
            r[14], r[15], r[16], r[17] = 0, m, lo, hi
        else:
            r[1], r[2], r[4], r[6], r[8] = hi - lo, n, pa + lo * lda * size, pb, pc + lo * ldc * size
            r[14], r[15], r[16], r[17] = lo, hi, 0, n
        r[11], r[12], r[13], r[18], r[20] = at, O, P, bias.ctypes.data, relu
        r[19] = residual.ctypes.data + offset * size if residual.size else 0
    return _post(flags, ctrl, blocks, fns, number, rounds, count)


@numba.njit(cache=True, nogil=True)
def _post(flags, ctrl, blocks, fns, number, rounds, count):  # pragma: no cover - compiled
    """Post job ``number`` of ``count`` rows filled in BLOCKS, take the caller's share and wait
    for the rest: 1 once all are done, 0 if some are not yet."""
    ctrl[1] = 0
    ctrl[0] = ((number & 0x7FFFFFFF) << 32) | (count << 16)
    _store_release(flags, 0, number)  # the rows and the claim word first
    _take(ctrl, blocks, number, fns, 0)
    return 1 if _wait_done(ctrl, count, rounds, fns) else 0


_C_FUNCTIONS: dict = {}  # (kernel, width, dtype) -> the C function's address

#: The module a kind-3 block's C function is made in: written to the kernel cache (cache.py)
#: and imported, so numba's disk cache can find the compiled function again. The C function is
#: not a closure over the kernel: numba keys a cached closure by its pickled cells, and a
#: dispatcher pickles with an id new in every process, so each process missed the cache,
#: compiled again (1-2.5 s a function) and added one more entry to the cache's index.
_C_SOURCE = """\
\"\"\"{module}.{name} as a native block's C function, for {dtype} (ember_numba.crew.c_function).\"\"\"
# The plugin's source: {digest}. numba's cache does not notice a change in a function this one
# calls from another file, so a change anywhere in the plugin makes a new module.
import numba
import numpy as np
from numba import types

from ember_numba.crew import {like} as LIKE
from {module} import {name} as kernel


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), cache=True, nogil=True)
def c_function(args, slot):
    kernel(numba.carray(args, {width}), slot, LIKE, np.{dtype}(1), np.{dtype}(0))
"""


def c_function(kernel, width, dtype):
    """The address of ``kernel(args, slot, like, one, zero)`` as a C function ``void f(int64
    *args, int64 slot)`` for ``dtype``, float32 or float64 (``args`` a native block's row from
    column 2, ``width`` values; ``like`` a 0-d array of the dtype; ``one``, ``zero`` its 1 and
    0): a kind-3 block's function. Made at the first call, from numba's disk cache where an
    earlier process compiled it, not when the kernel's module loads."""
    dtype = np.dtype(dtype)
    key = (kernel, width, dtype)
    found = _C_FUNCTIONS.get(key)
    if found is None:
        from . import cache

        source = _C_SOURCE.format(
            module=kernel.py_func.__module__,
            name=kernel.py_func.__name__,
            dtype=dtype.name,
            like={np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}[dtype],
            width=int(width),
            digest=cache.package_digest(),
        )
        found = _C_FUNCTIONS[key] = cache.load(source).c_function.address
    return found


def native_functions():
    """The addresses the native blocks call, (sgemm, dgemm, sched_yield): the bundled
    OpenBLAS's 64-bit-integer CBLAS entries; None where NumPy has no such library."""
    from ember.backends.numpy import openblas

    found = [openblas.gemm_address(np.float32), openblas.gemm_address(np.float64)]
    if None in found:
        return None
    return np.array([*found, YIELD_AT], np.int64)


def _rounds_per_second():
    """Rounds of :func:`_spin` a second on this machine (compiles or loads it, once)."""
    _spin(FLAGS, 0, FLAGS[0], 10, YIELD_AT)
    t0 = time.perf_counter()
    _spin(FLAGS, 0, FLAGS[0], 20_000, YIELD_AT)
    return 20_000 / max(time.perf_counter() - t0, 1e-6)


class Crew:
    """``helpers`` daemon threads that run :meth:`post`'s job (a function of no arguments that
    takes blocks until none are left) and stay awake AWAKE seconds after it.

    >>> crew, done = Crew(1), []
    >>> crew.post(lambda: done.append(1), 1)
    >>> crew.wait(lambda: bool(done))
    >>> done
    [1]
    """

    def __init__(self, helpers):
        self.helpers = helpers
        self.rounds = max(1, int(AWAKE * _rounds_per_second()))
        #: The addresses the native blocks call (:func:`native_functions`), or None: no native blocks
        self.native = native_functions()
        if self.native is not None:  # compiled (or loaded) here, not by a helper racing the first job
            _serve(FLAGS, CTRL, BLOCKS, 0, 0, self.native, 0)  # no rounds: it returns at once
        self.job = (int(FLAGS[0]), None, 0)
        self.events = [threading.Event() for _ in range(helpers)]
        self.asleep = [False] * helpers  # each starts in its spin (and says so before it sleeps)
        self.cores = os.sched_getaffinity(0) if _getcpu is not None else set()
        self.core = -1  # the core the helpers keep off (the caller's), -1: none yet
        self.ids = []
        for i in range(helpers):
            t = threading.Thread(target=self._main, args=(i,), name=f"ember-numba-{i}", daemon=True)
            t.start()
            self.ids.append(t.native_id)

    @contextlib.contextmanager
    def pinned(self):
        """The caller stays on its core inside the block and the helpers keep off it.

        Without this, the scheduler woke a helper onto the caller's core, where it waited
        for the caller's BLAS call to end while the other core idled: in 95 of 100 calls of
        eight 0.11 ms blocks the helper took none (the development machine, quiet)."""
        cpu = _getcpu() if _getcpu is not None and len(self.cores) > 1 else -1
        if cpu < 0 or cpu not in self.cores or threading.get_native_id() in self.ids:  # a helper's own blocks
            yield
            return
        if cpu != self.core:
            for tid in self.ids:
                os.sched_setaffinity(tid, self.cores - {cpu})
            self.core = cpu
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        try:
            yield
        finally:
            os.sched_setaffinity(0, mine)

    def post(self, job, helpers):
        """Run ``job`` on the first ``helpers`` helpers: at once where awake, else once woken."""
        number = int(FLAGS[0]) + 1
        self.job = (number, job, helpers)
        FLAGS[0] = number
        for i in range(helpers):
            if self.asleep[i]:
                self.events[i].set()

    def finished(self):
        """Called by whoever finishes a job's last block: ends :meth:`wait`'s spin."""
        FLAGS[1] = self.job[0]

    def wait(self, done):
        """Return once ``done()`` holds: spinning without the GIL while the job's last block may
        be moments away, then checking every 0.1 ms."""
        seen = int(FLAGS[1])
        while not done():
            if not _spin(FLAGS, 1, seen, self.rounds, YIELD_AT):
                time.sleep(1e-4)  # a helper preempted in its block: stop burning the core
            seen = int(FLAGS[1])

    def run_blocks(self, count, by_columns, a, b, c, epilogue):
        """Run ``c = a @ b`` as ``count`` native blocks (:func:`_product`; ``epilogue`` its
        (y, bias, residual, e)) on the caller and the awake helpers, each block taken once by
        whoever is free; returns once all are done, or False (nothing run) where BLAS cannot
        take an operand."""
        number = self._number()
        with self.pinned():
            done = _product(
                FLAGS, CTRL, BLOCKS, self.native, number, self.rounds, count, by_columns, a, b, c, *epilogue
            )
            if done < 0:
                return False
            while not done and not _wait_done(CTRL, count, self.rounds, self.native):
                time.sleep(1e-4)  # a helper preempted in its block: stop burning the core
        return True

    def run_rows(self, count):
        """Run native blocks ``BLOCKS[:count]``, filled by the caller (kind 3: a C function and
        its arguments, :func:`_call_row`), on the caller (slot 0) and the awake helpers (slots
        1 .. helpers); returns once all are done. The caller holds NATIVE_LOCK."""
        number = self._number()
        with self.pinned():
            if not _post(FLAGS, CTRL, BLOCKS, self.native, number, self.rounds, count):
                while not _wait_done(CTRL, count, self.rounds, self.native):
                    time.sleep(1e-4)  # a helper preempted in its block: stop burning the core

    def _number(self):
        """The next native job's number, announced to the helpers (sleeping ones woken)."""
        number = int(FLAGS[0]) + 1
        self.job = (number, None, self.helpers)
        for i in range(self.helpers):
            if self.asleep[i]:  # woken before the post, it takes what is left when it runs
                self.events[i].set()
        return number

    def _main(self, i):
        seen = self.job[0]
        while True:
            number, job, helpers = self.job
            if number != seen:
                seen = number
                if job is None:  # native blocks, posted while this helper slept
                    _take(CTRL, BLOCKS, number, self.native, i + 1)
                elif i < helpers:
                    job()
                continue
            if self.native is not None:
                seen, python = _serve(FLAGS, CTRL, BLOCKS, seen, self.rounds, self.native, i + 1)
                if python or self.job[0] != seen:
                    continue
            elif _spin(FLAGS, 0, seen, self.rounds, YIELD_AT):
                continue
            # sleep: the call is over (or the machine busy); the next post sets the event
            self.asleep[i] = True
            if self.job[0] == seen:  # posted after the spin, before asleep was set: not asleep
                self.events[i].wait()
            self.events[i].clear()
            self.asleep[i] = False


def _forget():
    """A forked child has none of the parent's threads: the next call makes its own crew."""
    from . import blas

    blas._CREW.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
