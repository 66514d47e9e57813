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
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

#: Seconds a helper spins after its last block before it sleeps: longer than the gap between
#: two layers of a network (20-100 µs), short enough that a call's end frees the core.
AWAKE = 1e-3
#: The job number the helpers watch ([0]) and the number of the last job finished ([1]).
FLAGS = np.zeros(2, np.int64)


@intrinsic
def _load_acquire(typingctx, flags, i):
    """``flags[i]`` as an atomic load, so the loop below reads memory each time round."""

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(flags, i), codegen


_LIBC = ctypes.CDLL(None)
_yield = _LIBC.sched_yield
_yield.argtypes, _yield.restype = [], ctypes.c_int
#: The core the calling thread runs on (Linux), or None where it cannot be known or pinned.
_getcpu = getattr(_LIBC, "sched_getcpu", None) if hasattr(os, "sched_setaffinity") else None


@numba.njit(nogil=True)
def _spin(flags, i, seen, rounds):  # pragma: no cover - compiled
    """Spin while ``flags[i] == seen``, at most ``rounds`` times; returns whether it changed."""
    for _ in range(rounds):
        if _load_acquire(flags, i) != seen:
            return True
        _yield()  # the core to any thread waiting for it (an OpenMP worker, another process)
    return _load_acquire(flags, i) != seen


def _rounds_per_second():
    """Rounds of :func:`_spin` a second on this machine (compiles it, once)."""
    _spin(FLAGS, 0, FLAGS[0], 10)
    t0 = time.perf_counter()
    _spin(FLAGS, 0, FLAGS[0], 20_000)
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
        self.job = (int(FLAGS[0]), None, 0)
        self.events = [threading.Event() for _ in range(helpers)]
        self.asleep = [True] * helpers
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
            if not _spin(FLAGS, 1, seen, self.rounds):
                time.sleep(1e-4)  # a helper preempted in its block: stop burning the core
            seen = int(FLAGS[1])

    def _main(self, i):
        seen = self.job[0]
        while True:
            number, job, helpers = self.job
            if number != seen:
                seen = number
                if i < helpers:
                    job()
                continue
            if _spin(FLAGS, 0, seen, self.rounds):
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
