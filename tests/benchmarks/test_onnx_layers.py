"""benchmarks/onnx_layers.py end to end on a tiny ResNet: ember's layers and onnxruntime's nodes
paired one to one on both thread counts, summed by kind (no timing is asserted)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import assert_blas_warning

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("ember_numba")

pytestmark = pytest.mark.onnx


def test_layers_of_a_tiny_resnet_pair_with_onnxruntimes_nodes():
    args = ["--model", "tiny", "--threads", "1,2", "--calls", "2", "--exporter", "ember"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.onnx_layers", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_blas_warning(proc.stderr, "python -m benchmarks.onnx_layers")
    out = proc.stdout
    assert "pairs are approximate" not in out  # as many layer steps as onnxruntime's nodes
    pairs = re.findall(r"^\| (\d+) \| (\w+) \| \(([\d, ]+)\) \| (\w+) ", out, re.M)
    # the tiny ResNet: a stem, 4 bottleneck blocks of 3 convolutions and a shortcut, a classifier
    assert len(pairs) == 18 and [int(p[0]) for p in pairs] == list(range(18))
    assert pairs[0][3] == "Conv" and pairs[-1][1] == "matmul" and pairs[-1][3] == "Gemm"
    for row in ("first convolution", "1x1 convolutions", "classifier", "all layers", "other steps / nodes"):
        cells = re.search(rf"^\| {row} \|(.*)\|$", out, re.M).group(1).split("|")
        assert len(cells) == 6 and all(float(c.strip().rstrip("x")) >= 0 for c in cells), row
    assert "Whole calls (median): 2 thread(s)" in out
