"""The whole conformance suite on the plugin's code, without a GPU: ``cupy-host`` is the cupy
backend's primitive table, fused ops and fusion compiler on NumPy arrays with every kernel
built for the host by nvcc. (On a GPU, test_cupy_gpu.py certifies ``cupy`` itself.)"""

import json
import subprocess
import sys

import pytest

from ember_cupy import host as host_module


@pytest.mark.slow
@pytest.mark.skipif(host_module.nvcc() is None, reason="nvcc not found on PATH")
def test_certify_the_host_harness(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.cli",
            "certify",
            "cupy-host",
            "--backend-module",
            "ember_cupy.host",
            "--require-available",
            "--max-examples",
            "10",
            "--out",
            str(tmp_path),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert cert["verdict"] == "pass" and cert["certified_tiers"] == [0, 1, 2, 3, 4, 5, 6]
    assert not cert["declared_but_failing"]
