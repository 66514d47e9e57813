"""ember-numba as users meet it: found through its entry point, configured before numba loads,
kernels cached on disk for the next process, certified, and training MNIST to the bar.

Each check that depends on a process's start runs in a fresh interpreter. Skipped when numba or
the plugin is not installed (``pip install -e plugins/numba``).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

CLEAN = (
    "NUMBA_THREADING_LAYER",
    "NUMBA_THREADING_LAYER_PRIORITY",
    "NUMBA_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "EMBER_NUM_THREADS",
    "EMBER_NUMBA_MIN_SIZE",
    "EMBER_NUMBA_HOT",
    "EMBER_BACKEND",
    "NUMBA_CACHE_DIR",
)


def run(code, timeout=600, **env):
    environ = {k: v for k, v in os.environ.items() if k not in CLEAN}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=environ
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_entry_point_offers_numba_without_importing_it():
    got = run("""
        import json, sys
        from ember.registry import REGISTRY
        REGISTRY.discover()
        print(json.dumps(["numba" in REGISTRY.infos, REGISTRY.origin.get("numba", ""), "numba" in sys.modules]))
    """)
    assert got[0] and "ember_numba.plugin" in got[1] and got[2] is False


PARALLEL_CALL = """
    import json, os, numba, numpy as np, ember
    from ember_numba import launch, threads
    b = ember.get_backend("numba")
    launch.HOT, launch.PAR_MIN = 1, 0
    x = ember.ones(1024, 1024, backend="numba")
    assert (x + x).sum().item() == 2 * 1024 * 1024      # runs the parallel add kernel
    print(json.dumps([numba.threading_layer(), numba.get_num_threads(), b.capabilities().notes["threads"],
                      threads.STATE["environment"], os.environ.get("OMP_WAIT_POLICY")]))
"""


def test_loading_picks_a_threading_layer_that_does_not_spin():
    layer, threads, noted, used, left = run(PARALLEL_CALL)
    assert layer in ("omp", "workqueue")
    assert used["OMP_WAIT_POLICY"] == "passive"  # idle OpenMP workers sleep instead of spinning
    assert left is None  # ... and child processes do not inherit it
    assert threads == noted >= 1


def test_the_users_thread_settings_win():
    layer, threads, noted, used, left = run(
        PARALLEL_CALL, NUMBA_THREADING_LAYER="workqueue", EMBER_NUM_THREADS="1", OMP_WAIT_POLICY="active"
    )
    assert (layer, threads, noted, used, left) == ("workqueue", 1, 1, {}, "active")


WORK = """
    import json, sys, time
    t0 = time.perf_counter()
    import numba, numpy as np, ember
    from ember import models, optim
    from ember.nn import functional as F
    from ember_numba import cache
    ember.use("numba")
    ember.manual_seed(0)
    model = models.MLP(784, (512, 512), 10)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = ember.randn(128, 784), ember.randint(0, 10, (128,))
    for _ in range(4):              # kernels come in once a shape repeats (launch.HOT)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    f = ember.jit(lambda a, b: ((a * b + 1.0).relu() * a).sum(1))
    f(x, x)
    seconds = time.perf_counter() - t0
    hits = misses = 0
    for name, module in list(sys.modules.items()):
        if name.startswith(("ember_numba", cache.PREFIX)):
            for value in vars(module).values():
                stats = getattr(value, "stats", None)
                if isinstance(value, numba.core.dispatcher.Dispatcher) and stats is not None:
                    hits += sum(stats.cache_hits.values())
                    misses += sum(stats.cache_misses.values())
    print(json.dumps({"files": cache.files(), "hits": hits, "misses": misses, "seconds": seconds}))
"""


def test_a_second_process_reuses_the_compiled_kernels(tmp_path):
    """Not a timing assertion: the warm process must compile nothing and add no files."""
    cold = run(WORK, EMBER_CACHE=str(tmp_path))
    warm = run(WORK, EMBER_CACHE=str(tmp_path))
    assert cold["files"] and any(f.endswith(".nbc") for f in cold["files"])
    assert warm["files"] == cold["files"]
    assert warm["misses"] == 0 and warm["hits"] > 0, warm
    print(f"4 MLP steps + a jit group: cold cache {cold['seconds']:.1f} s, warm {warm['seconds']:.1f} s")


# ----------------------------------------------------------------------------- slow checks
@pytest.mark.slow
def test_certify_numba_passes_every_tier_with_the_kernels_forced(tmp_path):
    """The conformance suite with the size threshold at 0 and kernels compiled at the first
    call, so its small cases run the numba kernels rather than the NumPy fallbacks."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env["EMBER_NUMBA_MIN_SIZE"] = "0"
    env["EMBER_NUMBA_HOT"] = "1"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.cli",
            "certify",
            "numba",
            "--require-available",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert cert["verdict"] == "pass" and not cert["declared_but_failing"]
    assert {t: cert["tiers"][t]["failed"] for t in cert["tiers"]} == dict.fromkeys(cert["tiers"], 0)
    assert all(cert["tiers"][t]["passed"] > 0 for t in ("0", "1", "2", "3", "4", "5")), cert["tiers"]


@pytest.mark.slow
def test_cnn_on_mnist_reaches_the_numpy_bar(tmp_path):
    """``EMBER_BACKEND=numba ember train mnist --model cnn --epochs 2`` >= 98.8% (as on numpy)."""
    try:
        from ember.data.mnist import MNIST

        MNIST(train=False, download=False)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MNIST is not available offline: {exc}")
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env["EMBER_BACKEND"] = "numba"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.cli",
            "train",
            "mnist",
            "--model",
            "cnn",
            "--epochs",
            "2",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=7200,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["epoch"] == 2 and result["eval_accuracy"] >= 0.988, result


COVERAGE = """
    import json, sys
    if {first!r}:
        import coverage
    before = "coverage" in sys.modules  # also where the suite runs under `coverage run` (CI)
    import ember
    (ember.ones(3, backend="numba") * 2).tolist()
    import numba.misc.coverage_support as support
    seen = support.coverage_available
    import coverage  # importable again afterwards
    print(json.dumps({{"before": before, "numba_saw_coverage": seen, "module": coverage.__name__}}))
"""


@pytest.mark.parametrize("first", [False, True], ids=["unused", "imported-first"])
def test_numba_sees_coverage_only_when_a_session_could_be_running(first):
    """plugin.coverage_hidden: an installed coverage that nothing imported is hidden from
    numba's import (~50 ms of it); one imported before ember loads numba is not (a process
    under ``coverage run``, as CI's subprocesses are, has it imported from the start)."""
    import importlib.util

    if importlib.util.find_spec("coverage") is None:
        pytest.skip("coverage is not installed: nothing to hide")
    got = run(COVERAGE.format(first=first))
    assert got["numba_saw_coverage"] == got["before"] and got["module"] == "coverage"
    assert got["before"] or not first
