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
