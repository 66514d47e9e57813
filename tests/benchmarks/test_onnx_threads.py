"""benchmarks/onnx_threads.py: the thread choices forced and restored, and the script end to end
on a tiny ResNet (no timing is asserted)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import assert_blas_warning

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the repository, not installed

pytest.importorskip("onnx")
pytest.importorskip("ember_numba")

from benchmarks import onnx_threads  # noqa: E402

pytestmark = pytest.mark.onnx


def test_forced_choices_are_what_the_arm_says_and_are_undone():
    from ember_numba import launch

    choice, arm = launch.ThreadChoice(), ["all"]
    undo = onnx_threads.forced(arm)
    try:
        assert [choice.choose("k")[0] for _ in range(20)] == [False] * 20
        arm[0] = "one"
        assert choice.choose("k")[0] is True
    finally:
        undo()
    assert [choice.choose("j")[0] for _ in range(2)] == [True, True]  # measuring again: one thread first


def test_script_runs_a_tiny_resnet():
    args = ["--model", "tiny", "--calls", "3", "--exporter", "ember", "--quiet", "99"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.onnx_threads", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_blas_warning(proc.stderr, "python -m benchmarks.onnx_threads")
    rows = re.findall(r"^\| (one|all) \| (\d+) \| ([\d.]+) ", proc.stdout, re.M)
    # both arms, in all rounds and (every round counts as quiet under 99 cores) in the quiet ones
    assert [(a, int(n)) for a, n, _ in rows] == [("one", 3), ("all", 3)] * 2
    assert all(float(ms) > 0 for _, _, ms in rows)


def test_steps_lists_each_layer_under_both_arms():
    args = ["--model", "tiny", "--calls", "2", "--exporter", "ember", "--steps", "--top", "3", "--quiet", "99"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.onnx_threads", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table, quiet = proc.stdout.split("Per step")[1:]  # all rounds, then (under 99 cores: all) the quiet ones
    assert quiet.startswith(", quiet rounds") and quiet.count("| every step |") == 1
    rows = re.findall(r"^\| (\d+) \| (\w+) \| \(([\d, ]+)\) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", table, re.M)
    assert len(rows) == 3, table  # --top 3: the three steps whose arms differ most, in program order
    assert [int(r[0]) for r in rows] == sorted(int(r[0]) for r in rows)
    total = re.search(r"^\| \| every step \| \| ([\d.]+) \| ([\d.]+) \|", table, re.M)
    assert total and float(total[1]) > 0 and float(total[2]) > 0
    assert sum(float(r[3]) for r in rows) <= float(total[1]) + 1e-3
