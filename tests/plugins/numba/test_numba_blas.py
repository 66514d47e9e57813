"""ember-numba's matrix products (blas.py): both ways of threading them give NumPy's results,
"blas" mode really shortens OpenBLAS's spinning, convolutions get one-thread BLAS, and
``EMBER_NUMBA_BLAS=split`` takes the other way."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
threadpoolctl = pytest.importorskip(
    "threadpoolctl", reason="threadpoolctl is not installed: pip install ./plugins/numba"
)

from numba_helpers import close  # noqa: E402

import ember  # noqa: E402


@pytest.fixture(scope="module")
def blas():
    ember.get_backend("numba")  # loading the plugin configures BLAS
    from ember_numba import blas

    return blas


def blas_threads():
    """Thread counts of the BLAS libraries the plugin configured (a test may load another)."""
    from ember_numba import blas

    mine = blas.STATE["libraries"]
    return [
        p["num_threads"]
        for p in threadpoolctl.threadpool_info()
        if p["user_api"] == "blas" and (not mine or p["filepath"] in mine)
    ]


def needs_blas_mode(blas):
    if blas.STATE["mode"] != "blas" or blas.STATE["threads"] < 2:
        pytest.skip(f"BLAS here: mode {blas.STATE['mode']!r}, {blas.STATE['threads']} thread(s)")


def test_the_mode_and_thread_count_are_reported(blas):
    notes = ember.get_backend("numba").capabilities().notes
    assert blas.STATE["mode"] in ("blas", "split")
    assert notes["blas_threads"].startswith(str(blas.STATE["threads"] if blas.STATE["mode"] == "blas" else 1))


@pytest.mark.parametrize(
    "sa,sb", [((128, 784), (784, 512)), ((300, 70), (70, 2000)), ((4, 96, 200), (200, 160))], ids=str
)
def test_products_above_the_threshold_match_numpy(blas, rng, sa, sb):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    assert 2 * a.size * sb[-1] >= blas.MIN_FLOPS
    for _ in range(3):  # the first calls try one thread, then all
        close(blas.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
    close(
        blas.matmul(b.swapaxes(-1, -2), a.swapaxes(-1, -2)),
        b.swapaxes(-1, -2) @ a.swapaxes(-1, -2),
        rtol=1e-4,
        atol=1e-4,
    )


def test_shared_gemm_matches_numpy(blas, rng):
    a = rng.standard_normal((70, 300)).astype(np.float32)
    b = rng.standard_normal((300, 2000)).astype(np.float32)
    close(blas.shared_matmul(a, b, 3), a @ b, rtol=1e-4, atol=1e-4)
    close(blas.shared_matmul(b.T, a.T, 2), b.T @ a.T, rtol=1e-4, atol=1e-4)  # transposed views


def test_one_thread_sets_blas_to_one_thread_and_back(blas):
    needs_blas_mode(blas)
    before = blas_threads()
    with blas.one_thread():
        assert set(blas_threads()) == {1}
    assert blas_threads() == before == [blas.STATE["threads"]] * len(before)
    with pytest.raises(KeyError), blas.one_thread():
        raise KeyError("an error inside still restores the count")
    assert blas_threads() == before


def test_products_below_the_threshold_run_on_one_blas_thread(blas, rng, monkeypatch):
    """OpenBLAS threads a product by its own rule from ~2.6e5 multiply-adds, far below
    MIN_FLOPS: the plugin holds such products to one thread, as it means to, unless BLAS's
    workers are spinning between the large products of a quiet machine (the next test)."""
    needs_blas_mode(blas)
    monkeypatch.setattr(blas, "_workers_awake", lambda: False)
    seen = []

    class Watching:
        def __getattr__(self, name):
            return getattr(np, name)

        def matmul(self, *args, **kwargs):
            seen.append(blas_threads())
            return np.matmul(*args, **kwargs)

    monkeypatch.setattr(blas, "np", Watching())
    a = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((512, 10)).astype(np.float32)  # W1's last layer: 6.6e5 multiply-adds
    assert 2 * a.size * b.shape[1] < blas.MIN_FLOPS
    close(blas.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert seen and all(set(s) == {1} for s in seen)
    assert blas_threads() == [blas.STATE["threads"]] * len(blas_threads())  # and back after


def test_small_products_keep_blas_threads_while_its_workers_spin_long(blas, rng, monkeypatch):
    """With the long spin on and the products on all threads (an MLP's step on a quiet
    machine), a small product runs by OpenBLAS's own rule: no switch to one thread and back."""
    needs_blas_mode(blas)
    monkeypatch.setitem(blas.STATE, "spin", str(blas.LONG_SPIN))
    monkeypatch.setattr(blas.PRODUCT_THREADS, "one", False)
    assert blas._workers_awake()
    switched = []
    monkeypatch.setattr(blas, "_set", lambda n: switched.append(n))
    a = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((512, 10)).astype(np.float32)
    close(blas.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert switched == []
    monkeypatch.setattr(blas.PRODUCT_THREADS, "one", True)  # a busy machine: one thread again
    blas.matmul(a, b)
    assert switched == [1, blas.STATE["threads"]]


def test_openblas_workers_stop_spinning_soon_after_a_product(blas):
    """OpenBLAS's default: the workers spin ~0.1 s after each product (the process burns
    ~100 ms of CPU while its main thread sleeps). After configure(): ~2**18 cycles."""
    needs_blas_mode(blas)
    if not blas.STATE["spin"].isdigit():
        pytest.skip("OPENBLAS_THREAD_TIMEOUT set by the user")
    a = np.ones((600, 600), np.float32)
    burnt = []
    for _ in range(3):
        a @ a  # on BLAS's threads
        cpu = time.process_time()
        time.sleep(0.25)
        burnt.append(time.process_time() - cpu)
    assert min(burnt) < 0.03, f"CPU seconds burnt while idle after a product: {burnt}"


def test_convolution_chunks_run_with_one_blas_thread(blas, rng, monkeypatch):
    """The chunks make their own one-thread BLAS calls on the plugin's threads: BLAS's threads
    must be off meanwhile (else two threads each start two), and the result is the reference's."""
    from ember.backends.numpy import backend as nb
    from ember_numba import conv

    seen = []
    real = conv.on_demand

    def watching(count, threads, work):
        seen.append(blas_threads())
        return real(count, threads, work)

    monkeypatch.setattr(conv, "on_demand", watching)
    x = rng.standard_normal((16, 8, 20, 20)).astype(np.float32)
    w = rng.standard_normal((12, 8, 3, 3)).astype(np.float32)
    close(
        conv.conv2d_cols(x, w, (1, 1), (1, 1), (1, 1)),
        nb.IMPLS["conv2d"](x, w, (1, 1), (1, 1), (1, 1), 1),
        rtol=1e-4,
        atol=1e-4,
    )
    assert seen and all(set(s) == {1} for s in seen)


SPLIT_CHILD = """
import json, numpy as np, threadpoolctl, ember
ember.use("numba")
from ember_numba import blas
a = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
ok = bool(np.allclose(blas.matmul(a, a.T), a @ a.T, rtol=1e-4, atol=1e-3))
print(json.dumps({"mode": blas.STATE["mode"], "ok": ok,
                  "blas_threads": [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]}))
"""


def test_ember_numba_blas_split_takes_the_other_way():
    env = dict(os.environ, EMBER_NUMBA_BLAS="split", EMBER_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", SPLIT_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"mode": "split", "ok": True, "blas_threads": [1] * len(got["blas_threads"])}


class _Machine:
    """Simulated product times on two cores: ``one`` seconds on one thread; on all threads
    ``all`` seconds, or ``cold`` when the product before ran on one (OpenBLAS's workers were
    asleep), or ``one * busy`` when the other core is taken."""

    def __init__(self, one=0.5, all=0.3, cold=2.0, busy=None):
        self.one, self.all, self.cold, self.busy, self.last_one = one, all, cold, busy, True

    def time(self, one):
        if one:
            t = self.one
        elif self.busy:
            t = self.one * self.busy
        else:
            t = self.cold if self.last_one else self.all
        self.last_one = one
        return t


def _steps(choice, machine, steps, keys=("x W1", "h W2", "dW2", "dx", "dW1")):
    """Runs ``steps`` steps of five products; returns the fraction of calls on one thread."""
    ones = 0
    for _ in range(steps):
        for key in keys:
            one, explore, st = choice.choose(key)
            choice.record(st, one, explore, machine.time(one))
            ones += one
    return ones / (steps * len(keys))


def test_the_products_take_all_threads_together_where_a_lone_one_would_lose(blas):
    """A two-thread product after a one-thread one waits for sleeping workers (2.0 against 0.5
    on one thread), yet all of them on two threads take 0.3: each product's own try of two
    threads loses, the joint choice's window of all of them wins."""
    choice = blas.JointChoice()
    assert _steps(choice, _Machine(), 2000) < 0.02 and not choice.one


def test_the_joint_choice_leaves_a_busy_machine_on_one_thread_and_returns(blas):
    """Two threads 10x slower (the other core busy): one thread within a few steps, and back
    to all threads within MAX_PERIOD rounds once the machine is quiet again. One stalled call
    does not turn the road."""
    choice = blas.JointChoice()
    busy = _Machine(busy=10.0)
    _steps(choice, busy, 200)
    assert choice.one and _steps(choice, busy, 2000) < 1.0  # the windows still try all threads
    assert choice.one
    _steps(choice, _Machine(), blas.JointChoice.MAX_PERIOD + 50)
    assert not choice.one and _steps(choice, _Machine(), 500) < 0.05
    stalled = _Machine()
    stalled.all = 20.0  # one preempted call
    _steps(choice, stalled, 1, keys=("x W1",))
    assert not choice.one


def test_a_burst_of_load_does_not_keep_a_quiet_machine_on_one_thread(blas):
    """Load for a few steps turns the road to one thread; once quiet again, all threads come
    back after EXPLORE rounds, not after the period the lost windows had grown to."""
    choice = blas.JointChoice()
    _steps(choice, _Machine(), 3000)  # long enough for the period to reach MAX_PERIOD
    assert not choice.one and choice.period == blas.JointChoice.MAX_PERIOD
    _steps(choice, _Machine(busy=10.0), 3)
    assert choice.one
    back = blas.JointChoice.EXPLORE + 2 * blas.JointChoice.TRIES
    assert _steps(choice, _Machine(), back) < 0.9 and not choice.one


def test_windows_of_one_thread_are_rare_where_all_threads_win_by_far(blas):
    """All threads 70% faster (W1 on the quiet machine): a window of one thread costs 2.1 rounds'
    time, so after all threads won (by step ~10, within a benchmark's warm-up) the next window
    waits about fifty times that, and a 300-step measurement runs about one window (3 rounds
    and a call) on one thread, not four."""
    choice = blas.JointChoice()
    machine = _Machine(one=0.51, all=0.3)
    _steps(choice, machine, 10)
    assert not choice.one and choice.period >= 100
    assert _steps(choice, machine, 300) < 0.015


def _openblas_spins(blas):
    """What each OpenBLAS the plugin configured read as its workers' spin (2**value cycles)."""
    libs = [
        lib
        for lib in threadpoolctl.ThreadpoolController().lib_controllers
        if lib.user_api == "blas" and lib.filepath in blas.STATE["libraries"]
    ]
    return [blas._symbol(lib.dynlib, "openblas_thread_timeout")() for lib in libs]


def test_the_workers_spin_long_only_while_products_are_the_only_threaded_work(blas, monkeypatch):
    """An MLP's products on all threads: after LONG_AFTER of them the workers restart with
    LONG_SPIN (they bridge the kernels between products). A convolution's one-thread block
    brings back the short SPIN at once; products on the road of one thread do not count."""
    needs_blas_mode(blas)
    if not blas.STATE["respin"]:
        pytest.skip("OPENBLAS_THREAD_TIMEOUT set by the user")

    class Road(blas.JointChoice):
        """The road this test sets: its measurements do not turn it (the choice is tested above)."""

        def record(self, *args):
            pass

    choice = Road()
    choice.one, choice.period = False, 10**9  # the road of all threads, and no window on this test's time
    monkeypatch.setattr(blas, "PRODUCT_THREADS", choice)
    monkeypatch.setitem(blas.STATE, "run", 0)
    a = np.ones((256, 256), np.float32)
    try:
        for _ in range(blas.LONG_AFTER - 1):
            blas.matmul(a, a)
        assert blas.STATE["spin"] == str(blas.SPIN)
        blas.matmul(a, a)
        assert blas.STATE["spin"] == str(blas.LONG_SPIN)
        assert set(_openblas_spins(blas)) == {blas.LONG_SPIN}
        np.testing.assert_array_equal(blas.matmul(a, a), a @ a)
        with blas.one_thread():  # what a convolution's chunks run in
            assert blas.STATE["spin"] == str(blas.SPIN) and set(_openblas_spins(blas)) == {blas.SPIN}
        choice.one = True  # load came: the products go on one thread
        for _ in range(blas.LONG_AFTER):
            blas.matmul(a, a)
        assert blas.STATE["spin"] == str(blas.SPIN) and blas.STATE["run"] == 0
        choice.one = False
        for _ in range(blas.LONG_AFTER):
            blas.matmul(a, a)
        assert blas.STATE["spin"] == str(blas.LONG_SPIN) and set(_openblas_spins(blas)) == {blas.LONG_SPIN}
    finally:
        blas._respin(blas.STATE["restarts"], blas.SPIN)
