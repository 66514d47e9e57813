"""What loading ember-numba's backend imports: the kernel modules a program never calls
(convolutions, sorting) only at their first call (backend.LAZY), so that a first step does
not wait for them."""

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from ember_numba import backend  # noqa: E402

PROBE = """
    import json, sys
    import ember
    ember.use("numba")
    seen = {}
    seen["loaded"] = sorted(m for m in ("ember_numba.conv", "ember_numba.winograd", "ember_numba.sorting")
                            if m in sys.modules)
    x = ember.randn(1, 1, 5, 5)
    ember.nn.functional.conv2d(x, ember.randn(1, 1, 3, 3))
    seen["after_conv"] = sorted(m for m in ("ember_numba.conv", "ember_numba.winograd", "ember_numba.sorting")
                                if m in sys.modules)
    print(json.dumps(seen))
"""


def test_the_lazy_tables_list_each_module_s_primitives():
    """A primitive LAZY missed would run on the NumPy reference without a word."""
    for module, ops in backend.LAZY.items():
        assert set(ops) == set(importlib.import_module(f"ember_numba.{module}").IMPLS), module


def test_loading_the_backend_leaves_convolutions_and_sorting_unimported_until_called():
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == []
    assert seen["after_conv"] == ["ember_numba.conv", "ember_numba.winograd"]


def test_a_lazy_entry_gives_the_module_s_kernel_its_result():
    import numpy as np

    x = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    sorting = importlib.import_module("ember_numba.sorting")
    np.testing.assert_array_equal(backend.IMPLS["cumsum"](x, axis=0), sorting.IMPLS["cumsum"](x, axis=0))
