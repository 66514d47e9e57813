"""Launching kernels: when to compile (:func:`hot`), on how many threads (:func:`run`,
:class:`ThreadChoice`), and elementwise programs on NumPy buffers (:class:`Kernel`).

A :class:`Kernel` is one program (render.Program); for each broadcast pattern it meets it
renders, caches and imports a module (cache.py) and keeps it. :meth:`Kernel.plan` turns the
operand shapes into everything a call needs — the kernel variant and its size and stride
arguments — and remembers it per shapes, so a training loop that calls the same op on the
same shapes pays one dictionary lookup before the kernel runs.
"""

from __future__ import annotations

import math
import os
import time

try:
    import resource
except ImportError:  # not on Windows: every call is timed there
    resource = None  # type: ignore[assignment]

import numpy as np

from . import cache
from .render import MAX_RANK, collapse, element_strides, render

#: Elements of work from which a kernel may run on all threads (``EMBER_NUMBA_PAR_MIN``);
#: below it, always on the calling thread. Every kernel is compiled for ``prange``; run with
#: one thread it costs ~1 µs more than a plain loop, while waking the other threads costs
#: ~8 µs on an idle machine, so smaller loops cannot gain. Above it, ThreadChoice decides by
#: measurement.
PAR_MIN = int(os.environ.get("EMBER_NUMBA_PAR_MIN", 1 << 18))

#: Calls with the same op and shapes before a kernel is compiled (or loaded from the disk
#: cache) for them: ``EMBER_NUMBA_HOT``, default 3; 1 compiles at the first call. Work done
#: once or twice — building a model, one evaluation, the first step of a small network —
#: stays on NumPy and never waits for the compiler; a training loop, which repeats its shapes
#: every step, gets its kernels within its first few steps (tiered compilation, as
#: JIT-compiling interpreters do it).
HOT = int(os.environ.get("EMBER_NUMBA_HOT", 3))
_SEEN: dict = {}

#: Work (elements or flops) from which a call compiles at once: NumPy would take longer than
#: loading or compiling the kernel (a ResNet convolution: 100 ms on NumPy, a kernel once).
HOT_WORK = 1 << 28


def hot(key, work=0) -> bool:
    """Has ``key`` (an op and its shapes) now been seen HOT times, or is its ``work`` at least
    HOT_WORK? Counts this call; a key that got hot stays hot.

    >>> [hot(("doc", 1)) for _ in range(4)] == [False] * (HOT - 1) + [True] * (5 - HOT)
    True
    """
    n = _SEEN.get(key, 0)
    if n >= HOT - 1 or work >= HOT_WORK:
        return True
    if len(_SEEN) > 100_000:  # shapes that never repeat: forget them rather than grow
        _SEEN.clear()
    _SEEN[key] = n + 1
    return False


def threads() -> int:
    """numba's thread count for the calling thread (see :func:`thread_count_calls`)."""
    return (_COUNT[0] if _COUNT else thread_count_calls())[0]()


class ThreadChoice:
    """One thread or all, per kind of call, by measurement.

    Work split over threads ends when the slowest thread does. On an idle machine two
    threads nearly halve a large loop; on a shared one, where another process holds the
    other core, the second thread waits for a time slice and the call takes milliseconds
    longer (measured on the 2-core development machine: a 4M-element loop 0.3 ms on two
    threads or 0.6 ms on one when quiet; GEMMs of 1-100 ms on one thread taking 10-3000 ms on
    two when busy). Which is better changes with the machine's load, so each key (a kernel
    and its size, a GEMM shape) keeps a running mean of its time on one thread and on all,
    uses the faster, and tries the other again after EXPLORE calls, then after twice as
    many each time it loses again (and enough more that re-tries cost under ~5% of the time
    in between), up to MAX_PERIOD.

    A try is TRIES calls in a row, judged by their median, and a road's first call is not
    timed at all: it warms up (fresh buffers, a helper thread's first work). One call alone
    decided before, and one stall in it (another process's time slice, onnxruntime's threads
    spinning on after a call) kept a layer on one thread for 32 calls or more, longer than a
    benchmark's run.

    A call that faulted fresh pages in (any minor page fault in the process while it ran) is
    not timed either, up to FAULT_SKIPS calls a key: the first steps of a compiled program
    write buffers the memory planner has not reused yet, and their faults, not the threads,
    set those calls' times (ResNet-18's first training step: 527-1073 faults in calls of
    41-93 ms that take 5-8 ms once the buffers are warm). Timed, a try of all threads that
    met them lost, and a key whose try loses waits 50-60 calls (15-20 ResNet-18 steps) for
    the next one: 4 of 4 processes kept its residual ReLU gradients on one thread, 8.3 ms a
    call against 4.2 on two (0 of 3 with the rule).

    A call may ``watch`` the machine (the layers of a network at batch 1): a key kept on one
    thread tries all threads at once when the machine goes quiet (:class:`Quieted`), not after
    the period that a busy spell grew, up to thousands of calls: the estimate of all threads is
    from the busy spell, and stale in the quiet one.

    A busy machine is busy for every key at once: after STREAK tries in a row (any keys) in
    which all threads stalled (took over STALL times as long as one), a key about to try all
    threads for the first time waits one more period instead of paying for that try at once.

    A watching key on which all threads have won a try by at least WIN keeps them while no other
    process is busy (:meth:`Quieted.quiet`), short of a stall: it neither re-tries one thread
    nor leaves for it when its calls slow down. On a quiet machine only the host slows a call
    (another virtual machine's work, the memory's), and one thread would suffer it too; a try
    there measures that noise. A try of all threads that wins is not noise: noise only slows.
    On a 2-core virtual machine without the rule, the re-tries and the slow spells put 1-14 of
    ResNet-50's layer calls on one thread in every call at batch 1; with it, alternating call by
    call with the rule off, the calls took 0.953-0.957 of the time (three runs of 40-60 rounds).
    """

    EXPLORE, MAX_PERIOD, SMOOTH, STREAK, STALL, TRIES, WIN = 16, 4096, 0.3, 3, 2.5, 3, 1.1
    FAULT_SKIPS = 8
    streak = [0]  # shared by every ThreadChoice: tries in a row that threads lost

    def __init__(self):
        self.stats: dict = {}

    def choose(self, key, watch=False):
        """(use one thread?, is this a try of the road not taken?, the key's record)."""
        st = self.stats.get(key)
        if st is None:
            if len(self.stats) > 10_000:
                self.stats.clear()
            # calls, mean seconds on 1 thread, on all, call of the next try, try period,
            # the current try's times, roads warmed up (bit 1: one thread, bit 2: all),
            # the machine's quiet spell (Quieted.spell) when a try of all threads last lost,
            # whether a try of all threads has won by WIN, the process's minor faults when
            # this call began, calls with faults that may still go untimed
            st = self.stats[key] = [0, None, None, 0, self.EXPLORE, [], 0, None, False, 0, self.FAULT_SKIPS]
        st[0] += 1
        st[9] = _minor_faults() if st[10] else 0  # read only while a faulting call may go untimed
        if st[1] is None:
            return True, False, st
        if st[2] is None:
            if st[0] < st[3]:
                return True, False, st
            if self.streak[0] >= self.STREAK and st[4] == self.EXPLORE and not st[5]:
                st[3], st[4] = st[0] + self.EXPLORE, 2 * self.EXPLORE  # busy: try later, once
                return True, False, st
            return False, True, st
        if watch and st[8] and st[2] <= self.STALL * st[1] and QUIETED.quiet():
            return False, False, st  # all threads won here, and no other process wants a core
        one = st[1] <= st[2]
        if one and watch and st[7] is not None and st[7] != QUIETED.spell():
            st[3], st[7] = st[0], None  # quiet since that verdict: all threads' try is due
        if st[0] >= st[3]:
            return not one, True, st
        return one, False, st

    def record(self, st, one, explore, seconds):
        slot = 1 if one else 2
        if not st[6] & slot:  # the road's first call warms it up: not timed
            st[6] |= slot
            return
        if st[10] > 0 and _minor_faults() > st[9]:  # fresh pages: not timed (a try goes on)
            st[10] -= 1
            return
        if not explore:
            st[slot] = seconds if st[slot] is None else st[slot] + self.SMOOTH * (seconds - st[slot])
            if st[3] == 0:
                st[3] = st[0] + 1  # the first try of all threads: at the next call
            return
        tries = st[5]
        tries.append(seconds)
        if len(tries) < self.TRIES:
            return  # the try goes on at the next call (st[3] is still due)
        seconds = sorted(tries)[len(tries) // 2]
        tries.clear()
        # The try's median replaces the estimate of the road not taken. If it wins it is taken
        # from now on; if it still loses, the next try waits twice as long, and at least long
        # enough that tries cost under ~5% of the calls' time in between. All threads winning
        # waits that long too before one thread is tried again (that try would lose by this
        # one's margin): after EXPLORE calls, a layer of ResNet-50 at batch 1 whose two threads
        # took 0.65 of one's time re-tried one thread for 3 calls in 16, 8% of its time. One
        # thread winning (load came) tries all threads again after EXPLORE calls.
        other = st[2] if one else st[1]
        st[slot] = seconds
        lost = other is not None and seconds > other
        if not one and other is not None and self.WIN * seconds <= other:
            st[8] = True
        if lost or (not one and other is not None):
            loser, winner = (seconds, other) if lost else (other, seconds)
            cost = self.TRIES * 20 * (loser / max(winner, 1e-9) - 1)
            st[4] = min(max(2 * st[4] if lost else self.EXPLORE, int(cost)), self.MAX_PERIOD)
        else:
            st[4] = self.EXPLORE
        st[3] = st[0] + st[4]
        st[7] = QUIETED.spell(now=False) if st[1] <= st[2] else None
        # A stall — all threads several times slower than one — is what a busy core does; a
        # memory-bound loop that merely gains nothing from a second thread is not evidence.
        slow, fast = (seconds, other) if not one else (other, seconds)
        stalled = other is not None and slow is not None and fast is not None and slow > self.STALL * fast
        self.streak[0] = self.streak[0] + 1 if stalled and ((not one and lost) or (one and not lost)) else 0

    def summary(self) -> dict:
        return {k: tuple(v[:3]) for k, v in self.stats.items()}


KERNEL_THREADS = ThreadChoice()


def _minor_faults() -> int:
    """The process's minor page faults so far (all threads; 0 where it cannot be read)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


class Quieted:
    """Counts the machine's turns from busy to quiet: other processes' cores (all cores' busy
    time in /proc/stat less this process's CPU time, over windows of at least WINDOW seconds)
    over BUSY, then under QUIET. Linux; elsewhere the count stays 0.

    Why: on the shared 2-core development machine other engineers' jobs come and go within
    seconds; a busy spell sends a network's layers to one thread and grows the period before
    their next try of all threads, so the quiet minutes after it ran on one thread (ResNet-50 at
    batch 1: every layer on two threads took 0.85-0.88x the chosen roads' time in them)."""

    WINDOW, BUSY, QUIET = 0.2, 0.6, 0.25

    def __init__(self):
        self.count, self.busy, self.at = 0, False, None
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.watching = os.path.exists("/proc/stat")

    def _sample(self):
        """(wall, all cores' busy seconds, this process's CPU seconds)."""
        with open("/proc/stat", "rb") as f:  # opened each time: a forked child shares no offset
            v = [int(a) for a in f.readline().split()[1:8]]
        return time.perf_counter(), (sum(v) - v[3] - v[4]) / self.tick, time.process_time()

    def spell(self, now=True) -> int:
        """The number of quiet spells begun so far; with ``now``, a window due is read first."""
        if now and self.watching:
            t = time.perf_counter()
            if self.at is None or t - self.at[0] >= self.WINDOW:
                at, self.at = self.at, self._sample()
                if at is not None:
                    others = (self.at[1] - at[1] - (self.at[2] - at[2])) / (self.at[0] - at[0])
                    if others > self.BUSY:
                        self.busy = True
                    elif self.busy and others < self.QUIET:
                        self.busy, self.count = False, self.count + 1
        return self.count

    def quiet(self) -> bool:
        """No other process busy now, on a machine that can tell (Linux)? A window due is read first."""
        self.spell()
        return self.watching and not self.busy


QUIETED = Quieted()


_COUNT: list = []


def thread_count_calls():
    """(get, set) of numba's thread count for the calling thread. The public functions check
    their argument and that the pool runs (~2 us a call, paid twice around every kernel
    launch: ~0.14 ms of a 2.4 ms MLP step); once the pool runs, numba's own ctypes entry points
    do the same work without the checks. The public ones where a numba lacks those."""
    if not _COUNT:
        import numba
        from numba.np.ufunc import parallel

        parallel._launch_threads()
        get, set_ = getattr(parallel, "_get_num_threads", None), getattr(parallel, "_set_num_threads", None)
        _COUNT.append(
            (get, set_) if get is not None and set_ is not None else (numba.get_num_threads, numba.set_num_threads)
        )
    return _COUNT[0]


def run(fn, work, *args):
    """``fn(*args)`` on this thread alone if ``work`` (elements) is below PAR_MIN, else on one
    thread or all, whichever KERNEL_THREADS measured faster for this kernel and size."""
    get, set_ = _COUNT[0] if _COUNT else thread_count_calls()
    n = get()
    if n == 1:
        return fn(*args)
    if work >= PAR_MIN:
        one, explore, st = KERNEL_THREADS.choose((fn, work))
    else:
        one, explore, st = True, False, None
    if one:
        set_(1)
    t0 = time.perf_counter()
    try:
        return fn(*args)
    finally:
        if one:
            set_(n)
        if st is not None:
            KERNEL_THREADS.record(st, one, explore, time.perf_counter() - t0)


_TWINS: dict = {}  # parallel kernel -> its one-thread twin


def for_work(kernel, work):
    """``kernel`` (a numba function compiled with ``parallel=True``) where ``work`` may get
    threads (PAR_MIN and up), else its one-thread twin: the same function compiled without
    ``parallel=True``, which numba compiles 2-3x faster (a cold first step is mostly
    compiling) and which runs the same loop body, so it gives the same bits. The twin has a
    name of its own, so numba's disk cache keeps the two apart.

    >>> import numba, numpy as np
    >>> @numba.njit(parallel=True)
    ... def double(x, out):
    ...     for i in numba.prange(x.size):
    ...         out[i] = 2 * x[i]
    >>> for_work(double, PAR_MIN) is double, for_work(double, PAR_MIN - 1).__name__
    (True, 'double_one_thread')
    """
    if work >= PAR_MIN:
        return kernel
    twin = _TWINS.get(kernel)
    if twin is None:
        import types

        import numba
        from numba.core.caching import NullCache

        f = kernel.py_func
        g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_one_thread", f.__defaults__, f.__closure__)
        g.__qualname__, g.__module__, g.__doc__ = f.__qualname__ + "_one_thread", f.__module__, f.__doc__
        options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
        cached = not isinstance(kernel._cache, NullCache)  # cache=True if the kernel has it
        twin = _TWINS[kernel] = numba.njit(cache=cached, **options)(g)
    return twin


class Plan:
    __slots__ = ("fn", "prefix", "out_shape", "size")

    def __init__(self, module, prefix, out_shape):
        self.fn, self.prefix, self.out_shape = module.kernel, prefix, out_shape
        self.size = math.prod(out_shape)


class Kernel:
    """One elementwise program, compiled per broadcast pattern on demand (``parallel=False``:
    without threads, for callers whose work stays below PAR_MIN)."""

    def __init__(self, program, parallel: bool = True):
        self.program, self.parallel = program, parallel
        self.out_dtypes = [np.dtype(program.dtypes[o]) for o in program.outputs]
        self.modules: dict = {}
        self.plans: dict = {}

    def module(self, rank: int, inner: tuple):
        key = (rank, inner)
        m = self.modules.get(key)
        if m is None:
            m = self.modules[key] = cache.load(render(self.program, rank, inner, self.parallel))
        return m

    def plan(self, shapes: tuple, force: bool = False):
        """The plan for array inputs of ``shapes`` (in input order, scalars left out), or None
        when the collapsed rank is above MAX_RANK or the shapes are not hot yet (see HOT)."""
        p = self.plans.get(shapes, False)
        if p is not False:
            return p
        if not force and not hot((id(self), shapes)):
            return None
        out_shape = np.broadcast_shapes(*shapes) if shapes else ()
        strides = [element_strides(s, out_shape) for s in shapes]
        cshape, cstrides = collapse(out_shape, strides)
        if len(cshape) > MAX_RANK:
            p = None
        else:
            inner = tuple(st[-1] == 1 for st in cstrides)
            outer = tuple(st[d] for st in cstrides for d in range(len(cshape) - 1))
            p = Plan(self.module(len(cshape), inner), tuple(cshape) + outer, tuple(out_shape))
        if len(self.plans) > 1000:  # shapes that never repeat: forget rather than grow
            self.plans.clear()
        self.plans[shapes] = p
        return p

    def __call__(self, *args, out=None, force=False):
        """Run on C-contiguous arrays and scalars (in the program's input order); returns the
        output arrays (a list), or None when this shape pattern is not handled. ``out`` may
        give C-contiguous output buffers of the right shape and dtype, inputs of the output's
        shape included: each element is read before it is written, so updating such an input
        in place is safe (the optimizer steps do)."""
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        p = self.plan(tuple(a.shape for a in arrays), force)
        if p is None:
            return None
        outs = out if out is not None else [np.empty(p.out_shape, dt) for dt in self.out_dtypes]
        flat = [a.reshape(-1) if isinstance(a, np.ndarray) else a for a in args]
        run(p.fn, p.size, *p.prefix, *flat, *[o.reshape(-1) for o in outs])
        return outs
