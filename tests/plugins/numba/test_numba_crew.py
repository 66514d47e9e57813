"""ember-numba's helper threads kept awake (crew.py) behind ``blas.on_demand`` inside
``blas.awake()`` (a sample's layers): every block runs once, a helper takes part, errors reach
the caller, the caller's core is kept apart from the helpers' inside a call and its affinity
restored after, and the helpers sleep once the calls stop."""

import os
import threading
import time

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

import ember  # noqa: E402


@pytest.fixture(scope="module")
def blas():
    ember.get_backend("numba")
    from ember_numba import blas

    return blas


A = np.ones((128, 128), np.float32)
B = np.ones((128, 384), np.float32)


def test_every_block_runs_once_and_a_helper_takes_some(blas):
    out = np.empty((8, 128, 384), np.float32)
    helped, caller = 0, threading.get_ident()
    for _ in range(50):
        who = []

        def block(i):
            who.append((i, threading.get_ident()))
            np.matmul(A, B, out=out[i])  # releases the GIL, as the convolutions' blocks do

        with blas.awake():
            blas.on_demand(8, 2, block)
        assert sorted(i for i, _ in who) == list(range(8))
        helped += any(t != caller for _, t in who)
        time.sleep(1e-4)
    assert (out == 128).all()
    assert helped > 0, "no helper took a block in 50 calls"


def test_an_error_in_a_block_reaches_the_caller(blas):
    def block(i):
        np.matmul(A, B)
        if i == 5:
            raise ValueError("block 5")

    with blas.awake(), pytest.raises(ValueError, match="block 5"):
        blas.on_demand(8, 2, block)
    done = []
    with blas.awake():
        blas.on_demand(4, 2, done.append)  # and the crew still works
    assert sorted(done) == [0, 1, 2, 3]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_the_caller_keeps_its_core_and_the_helpers_keep_off_it(blas):
    before = os.sched_getaffinity(0)
    seen = {}

    def block(i):
        seen.setdefault(threading.get_ident(), os.sched_getaffinity(0))
        np.matmul(A, B)

    with blas.awake():
        blas.on_demand(16, 2, block)
    mine = seen[threading.get_ident()]
    assert len(mine) == 1
    assert all(not (cores & mine) for t, cores in seen.items() if t != threading.get_ident())
    assert os.sched_getaffinity(0) == before


def test_the_helpers_sleep_after_the_calls(blas):
    """They spin crew.AWAKE (1 ms) after their last block, then sleep: a quiet process burns
    no CPU."""
    for _ in range(3):
        with blas.awake():
            blas.on_demand(8, 2, lambda i: np.matmul(A, B))
    burnt = []
    for _ in range(3):
        cpu = time.process_time()
        time.sleep(0.2)
        burnt.append(time.process_time() - cpu)
    assert min(burnt) < 0.02, f"CPU seconds burnt while idle: {burnt}"


def test_outside_awake_the_helpers_are_the_sleeping_pool(blas):
    """A batch's chunks (no awake scope) run on the pool, whose threads are not the crew's."""
    names = set()

    def block(i):
        names.add(threading.current_thread().name)
        np.matmul(A, B)

    for _ in range(20):
        blas.on_demand(8, 2, block)
    assert names, "no block ran"
    assert not any(n.startswith("ember-numba-") and n[len("ember-numba-") :].isdigit() for n in names)


class _Sample:
    """A sample's layers, in seconds: ``one`` on one thread, ``all`` on the crew; ``busy`` times
    one thread on all threads (the other core taken); each layer's first call compiles (100 s)."""

    def __init__(self, one=0.41, all=0.29, busy=0.0):
        self.one, self.all, self.busy, self.seen = one, all, busy, set()

    def time(self, key, one):
        if key not in self.seen:
            self.seen.add(key)
            return 100.0
        return self.one if one else self.one * self.busy if self.busy else self.all


def _calls(choice, sample, calls, layers=("stem", "a", "b", "a", "c", "pool", "b", "d")):
    """Runs ``calls`` calls of a network's layers (some repeat); returns the fraction on one thread."""
    ones = 0
    for _ in range(calls):
        for key in layers:
            one, explore, st = choice.choose(key)
            choice.record(st, one, explore, sample.time(key, one))
            ones += one
    return ones / (calls * len(layers))


def test_a_samples_layers_share_one_choice():
    """The layers on the crew (convolutions, Winograd bands, 1x1 products, the pool) take one
    road together: a layer alone on two threads among one-thread ones finds the helpers asleep."""
    from ember_numba import conv, crew, rewrites, winograd
    from ember_numba.fused import pooling

    users = (conv.SAMPLE_THREADS, winograd.SAMPLE_THREADS, rewrites.POINTWISE_THREADS, pooling.SAMPLE_THREADS)
    assert all(u is crew.SAMPLE_THREADS for u in users)
    assert winograd.BAND_THREADS is not crew.SAMPLE_THREADS  # several samples' bands: per key


def test_a_quiet_machine_runs_a_sample_on_all_threads_from_the_first_call():
    """All threads faster (ResNet-50 at batch 1 with the crew: 28.7 against 41.5 ms): every call
    but the one-thread window's runs on all threads, the compiling first calls notwithstanding."""
    from ember_numba.crew import SampleChoice

    choice, sample = SampleChoice(), _Sample()
    assert _calls(choice, sample, 3) == 0.0  # the warm-up calls: all threads
    assert _calls(choice, sample, 100) < 0.1 and not choice.one


def test_a_busy_machine_runs_a_sample_on_one_thread_within_a_few_calls():
    """Two threads 3x slower (the other core busy): one thread after the first window, a few
    calls in, and all threads again within MAX_PERIOD rounds once the machine is quiet."""
    from ember_numba.crew import SampleChoice

    choice = SampleChoice()
    busy = _Sample(busy=3.0)
    _calls(choice, busy, 10)
    assert choice.one and _calls(choice, busy, 100) < 1.0  # windows still try all threads
    assert choice.one
    _calls(choice, _Sample(), SampleChoice.MAX_PERIOD)
    assert not choice.one and _calls(choice, _Sample(), 100) < 0.1


def test_a_window_of_one_thread_that_stalls_still_counts():
    """The other core taken in bursts: one thread stalls now and then too, but all threads lose
    more; the first window of one thread, stalls and all, turns the road to one thread."""
    from ember_numba.crew import SampleChoice

    class Bursts(_Sample):
        n = 0

        def time(self, key, one):
            self.n += 1
            t = super().time(key, one)
            return 40 * t if one and self.n % 5 == 0 else t

    choice = SampleChoice()
    _calls(choice, Bursts(busy=6.0), 8)
    assert choice.one
