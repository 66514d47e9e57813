"""backends/host_memory.py: once a NumPy-array backend exists, a 16 MiB array comes from the
heap (below the program break) instead of a fresh mapping, unless the user opted out or tuned
malloc in the environment. Each case runs in a fresh process: the settings are per process."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

CHILD = """
import ctypes, json, numpy as np, ember
note = ember.get_backend("numpy").capabilities().notes["malloc"]
libc = ctypes.CDLL(None)
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_long]
a = np.empty(16 << 20, np.uint8)
print(json.dumps({"note": note, "heap": a.ctypes.data < libc.sbrk(0)}))
"""


def child(**env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in ("EMBER_MALLOPT",)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_large_arrays_come_from_the_heap_once_the_backend_exists():
    got = child()
    assert got == {"note": "glibc: mmap threshold 32 MiB, trim threshold 256 MiB", "heap": True}


def test_ember_mallopt_0_leaves_malloc_alone():
    assert child(EMBER_MALLOPT="0") == {"note": "unchanged (EMBER_MALLOPT=0)", "heap": False}


def test_the_users_own_malloc_settings_win():
    got = child(MALLOC_TRIM_THRESHOLD_="1048576")
    assert got == {"note": "unchanged (tuned in the environment)", "heap": False}


def test_tune_runs_once_and_reports_the_same():
    from ember.backends.numpy import host_memory

    assert host_memory.tune() == host_memory.tune() == host_memory.STATE["malloc"]
