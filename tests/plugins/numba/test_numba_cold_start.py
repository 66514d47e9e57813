"""ember-numba's first compiled step: how kernels are compiled may make a cold start faster,
never change a bit.

Work that stays below launch.PAR_MIN never gets threads, so its kernels are compiled without
``parallel=True`` (ember.jit's groups: jit.threaded; the cross-entropy row kernels:
launch.for_work's twins): 2-3x quicker to compile, and the same loop bodies as the parallel
kernels. The checks here compare the two kinds of kernel bit for bit, and a training run with
empty caches against one with warm caches.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

import ember  # noqa: E402
from ember_numba import jit, launch  # noqa: E402

R = np.random.default_rng(1)
R_TARGETS = np.random.default_rng(2)


def normal(*shape):
    return R.standard_normal(shape).astype(np.float32)


def bias_grad(g, mask):  # W1's ReLU backward and bias gradient: columns, a pre output
    t = ember.where(mask, g, g * 0)
    return t, t.sum(0)


def logsumexp(x, m):  # rows, a sum under reassociation, a post op
    return (x - m).exp().sum(1, keepdim=True).log() + m


def channel_sum(x, w):  # (N, C, H*W): rows split into chunks
    return (x * w).sum((0, 2, 3))


def total(x):
    return (x * x).sum()


def col_max(x):
    return x.amax(0) * 2 + 1


def chain(a, b):  # elementwise only
    return ((a * b + 1.0).relu() - a / (b.abs() + 1.0)) * 0.5


CASES = [
    (bias_grad, [normal(128, 512), normal(128, 512) > 0]),
    (bias_grad, [normal(1024, 512), normal(1024, 512) > 0]),  # past PAR_MIN: split rows
    (logsumexp, [normal(128, 10), normal(128, 1)]),
    (logsumexp, [normal(64, 5000), normal(64, 1)]),
    (channel_sum, [normal(16, 8, 40, 40), normal(1, 8, 1, 1)]),
    (total, [normal(700, 513)]),
    (col_max, [normal(257, 40)]),
    (chain, [normal(128, 512), normal(512)]),
]


def _groups(f, arrays):
    """The groups of ``f`` that a backend compiling groups is asked to compile."""
    compiled = ember.jit(f).lower(*[ember.tensor(a, backend="numba") for a in arrays])
    return [g for g in compiled.groups if g.fused and len(g.nodes) > 1]


def _random(var):
    if str(var.dtype) == "bool":
        return R.random(var.shape) > 0.5
    return R.standard_normal(var.shape).astype(str(var.dtype))


@pytest.mark.parametrize("f,arrays", CASES, ids=[f"{c[0].__name__}-{c[1][0].shape}" for c in CASES])
def test_serial_and_parallel_kernels_of_a_group_give_the_same_bits(f, arrays, monkeypatch):
    monkeypatch.setattr(jit, "MIN_WORK", 0)
    groups = _groups(f, arrays)
    assert groups
    for group in groups:
        inputs = [_random(a) for a in group.inputs]
        results = []
        for parallel in (True, False):
            monkeypatch.setattr(jit, "threaded", lambda work, key=None, p=parallel: p)
            run = jit.compile_group(group)
            assert run is not None, group
            results.append([np.asarray(o).copy() for o in run(*inputs)])
        for p, s in zip(*results):
            assert p.dtype == s.dtype and p.shape == s.shape
            assert p.tobytes() == s.tobytes(), (f.__name__, group.kind, np.abs(p - s).max())


def test_groups_below_the_threads_threshold_compile_without_threads():
    small, large = launch.PAR_MIN - 1, launch.PAR_MIN
    assert not jit.threaded(small) and jit.threaded(large)
    # a program compiled for threads serves the smaller groups with the same program too
    assert not jit.threaded(small, "a test program") and jit.threaded(large, "a test program")
    assert jit.threaded(small, "a test program")


def test_groups_too_small_to_pay_for_compiling_run_op_by_op():
    x = normal(8, 16)
    (small,) = _groups(total, [x])
    (large,) = _groups(total, [normal(64, jit.MIN_WORK // 64)])
    assert jit.compile_group(small) is None and jit.compile_group(large) is not None
    got = ember.jit(total)(ember.tensor(x, backend="numba")).numpy()
    np.testing.assert_allclose(got, (x * x).sum(), rtol=1e-6)


#: The jitted SGD step of the subprocess scripts below (their ``model``, ``opt``, ``x`` and ``y``).
JIT_STEP = """
    @ember.jit
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
"""

COLD_WARM = (
    """
    import hashlib, json, time
    t0 = time.perf_counter()
    import ember
    from ember import models, optim
    from ember.nn import functional as F
    ember.use("numba")
    ember.manual_seed(0)
    model = models.MLP(784, (512, 512), 10)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = ember.randn(128, 784), ember.randint(0, 10, (128,))
"""
    + JIT_STEP
    + """
    losses = [step(x, y).item() for _ in range(6)]
    digest = hashlib.sha256(b"".join(p.numpy().tobytes() for p in model.parameters())).hexdigest()
    import sys
    from ember_numba import background, cache
    print(json.dumps({"losses": [v.hex() for v in losses], "params": digest, "background": background.STATS,
                      "seconds": time.perf_counter() - t0, "compiled": step.lower(x, y).program.compiled,
                      "loads": cache.STATS, "rules_loaded": "numba.np.linalg" in sys.modules}))
"""
)


def _run(code, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_NUMBA_", "NUMBA_"))}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600, env=environ
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_cold_cache_and_a_warm_one_train_to_the_same_bits(tmp_path):
    """Six jitted MLP steps (W1's shapes) with empty caches, then again with the caches the
    first run filled (loaded light, and loaded the way numba loads: cache.install_light_loads),
    and with empty caches and no background compiles (its worker compiles some of the cold
    run's kernels, background.py): every loss and every parameter the same to the bit.

    Matrix products run as one-thread BLAS blocks (``EMBER_NUMBA_BLAS=split``): in the default
    "blas" mode a product's thread count is chosen by timing it (``blas.PRODUCT_THREADS``), and
    OpenBLAS's one- and two-thread sgemm differ in the last bits for W1's 128x784 @ 784x512, so
    two processes on a busy machine may differ there whatever their caches hold."""
    caches = {
        "EMBER_CACHE": str(tmp_path / "ember"),
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
        "EMBER_NUMBA_BLAS": "split",
        "EMBER_NUMBA_BACKGROUND": "1",  # the compile worker whatever the machine's load
    }
    cold = _run(COLD_WARM, **caches)
    warm = _run(COLD_WARM, **caches)
    heavy = _run(COLD_WARM, **caches, EMBER_NUMBA_LIGHT_LOAD="0")
    alone = {**caches, "EMBER_CACHE": str(tmp_path / "e2"), "NUMBA_CACHE_DIR": str(tmp_path / "n2")}
    alone = _run(COLD_WARM, **{**alone, "EMBER_NUMBA_BACKGROUND": "0"})
    assert cold["compiled"] > 0
    runs = (cold, warm, heavy, alone)
    assert len({(tuple(r["losses"]), r["params"]) for r in runs}) == 1, runs
    # warm: every kernel loaded light, and numba never loaded its typing and lowering rules
    assert warm["loads"]["light"] >= 5 and warm["loads"]["full"] == 0 and not warm["rules_loaded"], warm
    assert heavy["loads"]["light"] == 0 and heavy["rules_loaded"], heavy
    from ember_numba import background

    if background.available():
        assert cold["background"]["compiled_there"] > 0, cold["background"]
    assert warm["background"]["handed"] == 0 and alone["background"]["handed"] == 0
    print(f"6 jitted MLP steps: cold caches {cold['seconds']:.2f} s, warm {warm['seconds']:.2f} s")


CNN_WARM = (
    """
    import json, sys, time
    t0 = time.perf_counter()
    import ember
    from ember import models, optim
    from ember.nn import functional as F
    import os
    from ember_numba import launch, threads
    ember.use("numba")
    threads.set_num_threads(2)  # the batch-1 layers' native blocks run on the crew only with threads
    if os.environ.get("ROAD"):  # every thread choice takes this road: "one" thread or "all"
        one = os.environ["ROAD"] == "one"
        launch.ThreadChoice.choose = lambda self, key, watch=False: (one, False, [0] * 11)
        launch.ThreadChoice.record = lambda self, *args: None
    ember.manual_seed(0)
    model = models.resnet18(num_classes=10)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = ember.randn(8, 3, 32, 32), ember.randint(0, 10, (8,))
"""
    + JIT_STEP
    + """
    losses = [step(x, y).item() for _ in range(3)]
    model.eval()
    serve = ember.jit(lambda x: model(x))
    with ember.no_grad():
        outs = [serve(x[:1]).numpy() for _ in range(4)]
        eager = model(x[:1]).numpy()
    from ember_numba import cache
    error = float(abs(outs[-1] - eager).max() / (abs(eager).max() + 1e-6))
    print(json.dumps({"losses": losses, "error": error, "seconds": time.perf_counter() - t0,
                      "loads": cache.STATS, "rules_loaded": "numba.np.linalg" in sys.modules}))
"""
)


@pytest.mark.slow
def test_a_warm_process_trains_and_serves_a_cnn_without_compiling(tmp_path):
    """ResNet-18 (CIFAR shapes): three jitted training steps at batch 8, then four jitted
    batch-1 calls in eval mode (checked against the eager call), in a process with empty caches
    and again in one with the caches it filled. The second must load every kernel and compile none: numba's typing rules, which
    any compile loads, stay unloaded. A kernel numba cannot cache (a closure over a dispatcher,
    a ctypes call) compiles again in every process; two such once cost a ResNet-50 process 11-15 s
    of its first calls (the crew's spin loop and the native blocks' C functions, crew.c_function).

    A thread choice (launch.ThreadChoice) runs one thread's kernels or all threads' by timing
    them, and each road compiles its own kernels the first time a process takes it: a cold
    process that stayed on one thread (a busy machine, or calls whose page faults left them
    untimed) leaves the other road's kernels uncompiled, and a quiet warm process then compiled
    them (17 s; a CI dry run failed so). So the cold processes take each road in turn, every
    choice forced, and the warm one chooses as it likes: whichever roads it takes, it compiles
    nothing."""
    caches = {"EMBER_CACHE": str(tmp_path / "ember"), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    cold = _run(CNN_WARM, **caches, ROAD="one")
    cold_all = _run(CNN_WARM, **caches, ROAD="all")
    warm = _run(CNN_WARM, **caches)
    assert cold["rules_loaded"]  # the check can fail: an empty cache compiles
    assert warm["loads"]["full"] == 0 and not warm["rules_loaded"], warm
    # Across processes the thread choice (launch.ThreadChoice, blas.PRODUCT_THREADS) times its
    # roads, so two processes may sum a product in another order: float32's last bits, grown by
    # two SGD steps with momentum. 1e-4 once failed by 1.35e-4 at the third loss (CI dry run).
    np.testing.assert_allclose(warm["losses"], cold["losses"], rtol=2e-3)
    np.testing.assert_allclose(cold_all["losses"], cold["losses"], rtol=2e-3)
    errors = [r["error"] for r in (cold, cold_all, warm)]
    assert max(errors) < 1e-4, errors  # jit against eager
    print(f"ResNet-18, 3 steps and 4 batch-1 calls: cold caches {cold['seconds']:.1f} s, warm {warm['seconds']:.1f} s")


@pytest.mark.parametrize("R,C", [(128, 10), (7, 1000), (1, 3)])
def test_the_cross_entropy_rows_one_thread_twins_give_the_parallel_kernels_bits(R, C):
    """W1's loss: small logits run the twins compiled without threads, large ones the parallel
    kernels; both must agree to the bit (ignored rows and a NaN row included)."""
    from ember_numba.fused import rows

    x = normal(R, C).reshape(-1)
    x[:C] = x[:C] * 30.0  # a row with a large spread: exp under- and overflow paths
    if R > 2:
        x[2 * C] = np.nan
    t = R_TARGETS.integers(0, C, R)
    t[R // 2] = -100
    scale = (0.25,)  # the backward kernel's gradient scale
    for kernel, extra, out_shape in (
        (rows.cross_entropy_rows, (), (R, np.float64)),
        (rows.cross_entropy_backward_rows, scale, (R * C, np.float32)),
    ):
        results = []
        for f in (kernel, launch.for_work(kernel, 0)):
            out = np.empty(*out_shape)
            f(x, t, R, C, -100, *extra, out)
            results.append(out)
        assert launch.for_work(kernel, 0) is not kernel and launch.for_work(kernel, launch.PAR_MIN) is kernel
        assert results[0].tobytes() == results[1].tobytes(), kernel.__name__


LIGHT = """
    import json, sys
    import ember
    ember.use("numba")
    import numpy as np
    from numba.core import caching
    from ember_numba import cache

    module = cache.load(
        "import numba\\n\\n@numba.njit(cache=True)\\ndef twice(x, out):\\n"
        "    for i in range(x.size):\\n        out[i] = 2 * x[i]\\n"
    )
    if {fail!r}:  # the light load's first try breaks: numba's own load must take over
        real, tries = caching.Cache._load_overload, []

        def flaky(self, sig, target_context):
            tries.append(sig)
            if len(tries) == 1:
                raise RuntimeError("a light load that fails")
            return real(self, sig, target_context)

        caching.Cache._load_overload = flaky
    out = np.empty(3)
    module.twice(np.arange(3.0), out)
    print(json.dumps({{"out": out.tolist(), "loads": cache.STATS, "hits": sum(module.twice.stats.cache_hits.values()),
                       "rules_loaded": "numba.np.linalg" in sys.modules}}))
"""


def test_a_light_load_that_fails_falls_back_to_numbas_load(tmp_path):
    """cache.install_light_loads: a kernel in the disk cache loads without numba's rules; a
    light load that raises is retried as numba loads (after its full set-up), still from the
    cache, with the same result."""
    caches = {"EMBER_CACHE": str(tmp_path / "ember"), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    first = _run(LIGHT.format(fail=False), **caches)  # compiles and fills the cache
    light = _run(LIGHT.format(fail=False), **caches)
    fallback = _run(LIGHT.format(fail=True), **caches)
    assert first["out"] == light["out"] == fallback["out"] == [0.0, 2.0, 4.0]
    assert first["hits"] == 0 and light["hits"] == fallback["hits"] == 1
    assert light["loads"] == {"light": 1, "full": 0} and not light["rules_loaded"]
    assert fallback["loads"] == {"light": 0, "full": 1} and fallback["rules_loaded"]
