"""benchmarks/cupy_gpu.py, the GPU benchmark script, run end to end on the host harness (its
numbers mean nothing here; the point is that gpu_check.sh's last step works before a GPU
machine is at hand)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the repository, not installed

from benchmarks import cupy_gpu as bench  # noqa: E402

host_module = pytest.importorskip("ember_cupy.host")


@pytest.mark.slow
@pytest.mark.skipif(host_module.nvcc() is None, reason="nvcc not found on PATH")
def test_bench_script_runs_on_the_host_harness(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.cupy_gpu",
            "--out",
            str(tmp_path),
            "--workloads",
            "mlp",
            "--targets",
            "ember-cupy,ember-cupy-multi,ember-cupy-jit",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--backend",
            "cupy-host",
            "--timeout",
            "600",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert [r["target"] for r in rows] == ["ember-cupy", "ember-cupy-multi", "ember-cupy-jit"]
    assert all("error" not in r and r["samples_per_s"] > 0 for r in rows), rows
    # eager, multi-tensor and jitted steps train identically
    assert rows[0]["losses"] == pytest.approx(rows[1]["losses"], rel=1e-5)
    assert rows[0]["losses"] == pytest.approx(rows[2]["losses"], rel=1e-5)
    assert rows[2]["transfers"]["to_host"] == 2  # the jitted steps read back only the two losses it reports


def test_table_reports_ratios_and_failures():
    rows = [
        {
            "workload": "mlp",
            "target": "torch-cuda",
            "samples_per_s": 1000.0,
            "ms_per_step": 128.0,
            "first_step_s": 1.0,
            "losses": [2.3, 2.2],
        },
        {
            "workload": "mlp",
            "target": "ember-cupy",
            "samples_per_s": 500.0,
            "ms_per_step": 256.0,
            "first_step_s": 3.0,
            "losses": [2.3, 2.2],
        },
        {"workload": "resnet18", "target": "ember-cupy-jit", "error": "timed out after 45 s"},
    ]
    text = bench.table(rows)
    assert "| mlp | ember-cupy | 500 | 256.00 | 0.50x |" in text
    assert "failed: timed out after 45 s" in text
