"""The official ONNX cases through the cupy plugin's code without a GPU: ``cupy-host`` is the
plugin's primitive table on NumPy arrays with its own kernels built for the CPU by nvcc (the
host harness ``ember certify`` uses). Not a GPU result: CuPy's kernels never run here."""

import subprocess
import sys

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("ember_cupy", reason="ember-cupy is not installed: pip install -e plugins/cupy")
pytestmark = pytest.mark.onnx

from ember_cupy import host  # noqa: E402

needs_nvcc = pytest.mark.skipif(host.nvcc() is None, reason="nvcc not found: the host harness builds kernels with it")


def onnx_test(*args, timeout=1200):
    cmd = [sys.executable, "-m", "ember.cli", "onnx", "test", "--backend", "cupy-host"]
    cmd += ["--backend-module", "ember_cupy.host", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@needs_nvcc
def test_node_cases_of_several_families_pass_on_the_host_harness():
    out = onnx_test(
        "--set", "node", "--cases", r"^test_(relu|matmul_2d|conv_with_strides_padding|erf|gather_0|softmax_axis_1)$"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ONNX node cases on cupy-host" in out.stdout
    assert "| **all** | 6 | 6 |" in out.stdout and "unexpected failure" not in out.stdout


def test_a_module_that_cannot_import_is_one_line():
    cmd = [sys.executable, "-m", "ember.cli", "onnx", "test", "--backend", "x", "--backend-module", "no_such_mod"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 2 and out.stdout == ""
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ember: error: --backend-module no_such_mod: importing it raised")


@pytest.mark.slow
@needs_nvcc
def test_all_official_cases_through_the_host_harness():
    out = onnx_test(timeout=3600)  # docs/onnx.md's command, as written
    assert out.returncode == 0, out.stderr[-2000:]
    assert "unexpected failure" not in out.stdout, out.stdout[-3000:]
