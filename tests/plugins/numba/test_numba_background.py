"""ember_numba.background: kernels handed to a forked worker are compiled there into numba's
disk cache and loaded here, give the same results as kernels compiled here, and a kernel the
worker cannot compile is compiled here, with the error it has.

Each check runs in a fresh process with empty caches: the worker is forked once per process,
and what it compiles must not already be on disk."""

import doctest
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from ember_numba import background  # noqa: E402

needs_fork = pytest.mark.skipif(not background.available(), reason="needs Linux (os.fork) and more than one CPU")

KERNELS = """
import numba
import numpy as np

@numba.njit(cache=True)
def scale(x, a, out):
    for i in range(x.size):
        out[i] = x[i] * a

@numba.njit(cache=True)
def total(x):
    s = 0.0
    for i in range(x.size):
        s += x[i] * x[i]
    return s

@numba.njit(cache=True)
def broken(x):
    return x.no_such_attribute
"""

SCRIPT = """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {folder!r})
    import kernels
    from ember_numba import background

    x = np.arange(1000, dtype=np.float32)
    out = np.empty_like(x)
    handed = [background.soon(kernels.total, x), background.soon(kernels.scale, x, 2.0, out)]
    kernels.scale(x, 2.0, out)             # compiled here; the worker takes `total` meanwhile
    result = {{"accepted": handed, "total": kernels.total(x), "scaled": out.tolist()[:3]}}
    if {broken}:
        background.soon(kernels.broken, x)
        kernels.scale(x, 3.0, out)         # (already compiled: does not wait for anything)
        time.sleep(0.5)                   # let the worker try
        try:
            kernels.broken(x)
        except Exception as exc:
            result["error"] = type(exc).__name__
    result.update(background.STATS)
    print(json.dumps(result))
"""


def _run(tmp_path, broken=False, **env):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "kernels.py").write_text(KERNELS)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_NUMBA_", "NUMBA_"))}
    environ.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), EMBER_CACHE=str(tmp_path / "ember"))
    environ.update({"EMBER_NUMBA_BACKGROUND": "1", **env})  # "1": whatever the machine's load
    code = textwrap.dedent(SCRIPT.format(folder=str(tmp_path), broken=broken))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environ)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_fork
def test_a_kernel_handed_over_is_compiled_by_the_worker_and_loaded_here(tmp_path):
    got = _run(tmp_path)
    assert got["accepted"] == [True, True] and got["handed"] == 2
    assert got["compiled_there"] == 1  # `total`: `scale` was claimed here, by the call
    assert got["total"] == float(sum(float(i) * i for i in range(1000)))
    assert got["scaled"] == [0.0, 2.0, 4.0]


@needs_fork
def test_the_same_results_with_the_worker_off(tmp_path):
    on = _run(tmp_path / "on")
    off = _run(tmp_path / "off", EMBER_NUMBA_BACKGROUND="0")
    assert off["accepted"] == [False, False] and off["compiled_there"] == 0
    assert (on["total"], on["scaled"]) == (off["total"], off["scaled"])


@needs_fork
def test_a_kernel_the_worker_cannot_compile_fails_here_with_its_own_error(tmp_path):
    got = _run(tmp_path, broken=True)
    assert got["error"] == "TypingError"


@needs_fork
def test_a_warm_cache_hands_nothing_over(tmp_path):
    _run(tmp_path)
    again = _run(tmp_path)
    assert again["accepted"] == [False, False] and again["compiled_there"] == 0


def test_docstring_examples():
    result = doctest.testmod(background, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_auto_starts_the_worker_only_while_a_cpu_looks_idle(monkeypatch):
    monkeypatch.setattr(background, "_cpus", lambda: 2)
    monkeypatch.setattr(background, "MODE", "auto")
    for load, idle in ((0.3, True), (1.5, True), (1.6, False), (3.0, False)):
        monkeypatch.setattr(background.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert background.idle() is idle, load
    monkeypatch.setattr(background, "MODE", "1")
    assert background.idle()
