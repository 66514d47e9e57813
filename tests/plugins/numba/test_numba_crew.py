"""ember-numba's helper threads kept awake (crew.py) behind ``blas.on_demand`` inside
``blas.awake()`` (a sample's layers): every block runs once, a helper takes part, errors reach
the caller, the caller's core is kept apart from the helpers' inside a call and its affinity
restored after, and the helpers sleep once the calls stop."""

import json
import os
import subprocess
import sys
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


def _native(blas):
    if blas._crew(1).native is None:
        pytest.skip("NumPy's BLAS is not a bundled OpenBLAS with CBLAS entry points")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(256, 300, 196), (64, 147, 1100), (3, 5, 700), (700, 9, 2)])
def test_native_blocks_carry_the_products_bits(blas, m, k, n, dtype):
    """A product's blocks run by the helpers' spin (crew.Crew.run_blocks, no GIL) are the
    same BLAS calls as np.matmul's on the same blocks: the bits of the Python blocks."""
    _native(blas)
    from ember_numba import crew

    rng = np.random.default_rng(m + n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    with blas.one_thread():
        python = blas.shared_matmul(a, b, 2)  # not awake: Python blocks on the pool
        runs = []
        original = crew.Crew.run_blocks
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(crew.Crew, "run_blocks", lambda self, count, *a: runs.append(count) or original(self, count, *a))
            with blas.awake():
                native = blas.shared_matmul(a, b, 2)
    assert runs, "the native blocks were not taken"
    assert np.array_equal(native, python)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_native_blocks_apply_the_epilogue_as_the_python_blocks_do(blas, residual, relu):
    _native(blas)
    from ember_numba import crew
    from ember_numba.epilogue import Epilogue

    rng = np.random.default_rng(7)
    o, c, p = 96, 64, 600
    w, x = rng.standard_normal((o, c)).astype(np.float32), rng.standard_normal((c, p)).astype(np.float32)
    r = rng.standard_normal((2, o, p, 1)).astype(np.float32) if residual else None
    e = Epilogue(rng.standard_normal(o).astype(np.float32), r, relu)
    ys = {}
    for native in (False, True):
        y = np.full((2, o, p, 1), np.nan, np.float32)
        with pytest.MonkeyPatch.context() as mp, blas.one_thread(), blas.awake():
            mp.setattr(crew, "NATIVE", native)
            blas.shared_matmul(w, x, 2, y[1].reshape(o, p), e.on(y, 1))  # the second sample
        ys[native] = y
    assert np.array_equal(ys[True], ys[False], equal_nan=True)
    assert np.isnan(ys[True][0]).all()  # the other sample untouched
    expected = w @ x + e.bias[:, None] + (r[1, :, :, 0] if residual else 0)
    np.testing.assert_allclose(
        ys[True][1, :, :, 0], np.maximum(expected, 0) if relu else expected, rtol=1e-4, atol=1e-4
    )


def test_native_blocks_leave_operands_blas_cannot_take_to_python(blas):
    """An inner stride BLAS cannot express (a column view with step 2) goes as Python blocks."""
    _native(blas)
    from ember_numba import crew

    a = np.arange(64 * 80, dtype=np.float32).reshape(64, 80) / 1000
    b = (np.arange(80 * 1200, dtype=np.float32).reshape(80, 1200) / 1000)[:, ::2]
    runs = []
    original = crew.Crew.run_blocks
    with pytest.MonkeyPatch.context() as mp, blas.one_thread(), blas.awake():
        mp.setattr(crew.Crew, "run_blocks", lambda self, *a: runs.append(original(self, *a)) or runs[-1])
        out = blas.shared_matmul(a, b, 2)
    assert runs == [False]  # turned down before anything was posted
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)


def test_native_blocks_are_done_by_the_caller_when_the_helper_sleeps(blas):
    """After a pause the helper is asleep: the caller takes every block itself if need be,
    and a helper woken late finds none left (nor a block of a later job)."""
    _native(blas)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((256, 128)).astype(np.float32), rng.standard_normal((128, 800)).astype(np.float32)
    expected = a @ b
    for i in range(20):
        time.sleep(0.003 if i % 2 else 0)  # longer than crew.AWAKE: the helper sleeps
        with blas.one_thread(), blas.awake():
            out = blas.shared_matmul(a, b, 2)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def test_two_threads_products_at_once_each_get_their_own(blas):
    """Two inference threads in one process: while one thread's native blocks are in the
    table, the other's product goes as Python blocks (crew.NATIVE_LOCK), never into it."""
    _native(blas)
    rng = np.random.default_rng(11)
    pairs = [
        (rng.standard_normal((192, 96)).astype(np.float32), rng.standard_normal((96, 700)).astype(np.float32))
        for _ in range(2)
    ]
    expected = [a @ b for a, b in pairs]
    wrong = []

    def run(j):
        a, b = pairs[j]
        for _ in range(60):
            with blas.one_thread(), blas.awake():
                out = blas.shared_matmul(a, b, 2)
            if not np.allclose(out, expected[j], rtol=1e-5, atol=1e-4):
                wrong.append(j)

    threads = [threading.Thread(target=run, args=(j,)) for j in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not wrong


CACHED = """
import json, sys
import numpy as np
import ember
ember.get_backend("numba")
from ember_numba import blas, cache, conv, crew
blas._crew(1)  # times its spin loop (crew._spin)
crew.c_function(conv._native, len(conv.ARGS), np.float32)  # a convolution band's C function
made = [m.c_function for m in cache._MODULES.values() if hasattr(m, "c_function")]
print(json.dumps({"c_function_hits": [f.cache_hits for f in made],
                  "spin_hits": sum(crew._spin.stats.cache_hits.values()),
                  "rules_loaded": "numba.np.linalg" in sys.modules}))
"""


def test_the_spin_and_the_native_blocks_c_functions_load_from_the_disk_cache(tmp_path):
    """A second process compiles neither the crew's spin loop nor a kind-3 block's C function:
    both load from numba's disk cache (light: numba's rules for compiling stay unloaded). Before,
    the C function was a closure over the kernel, which numba keyed by a per-process id, and
    the spin loop called sched_yield through ctypes, which numba cannot cache: both compiled
    again in every process (5-15 s of a ResNet-50's first two calls at batch 1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_NUMBA_", "NUMBA_"))}
    env.update(EMBER_CACHE=str(tmp_path / "ember"), NUMBA_CACHE_DIR=str(tmp_path / "numba"))

    def run():
        out = subprocess.run([sys.executable, "-c", CACHED], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["c_function_hits"] == [0] and first["spin_hits"] == 0, first
    assert second == {"c_function_hits": [1], "spin_hits": 1, "rules_loaded": False}, second
