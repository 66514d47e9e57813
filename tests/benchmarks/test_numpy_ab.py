"""benchmarks/numpy_ab.py end to end on small workloads: a training step and an inference
forward call (whose output is a (batch, 10) array, not a loss) both time, base against the
working tree; a workload without steps is a one-line error (no timing is asserted: the
numbers mean nothing on a shared machine)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import assert_blas_warning, run_module

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the repository, not installed

from benchmarks import numpy_ab  # noqa: E402

HAS_GIT = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode == 0
needs_git = pytest.mark.skipif(not HAS_GIT, reason="numpy_ab copies its base version out of git")


def rounds(text):
    """(batch, base ms, working tree ms) of each round line."""
    found = re.findall(r"round \d+: \S+ \S+ batch (\d+): ([\d.e+-]+) -> ([\d.e+-]+) ms/step", text)
    return [(int(b), float(x), float(y)) for b, x, y in found]


@needs_git
@pytest.mark.parametrize("workload", ["W1-train", "W1-infer"])
def test_a_training_step_and_an_inference_call_both_time(workload, capsys):
    numpy_ab.main(["--base", "HEAD", "--workload", workload, "--backend", "numpy", "--batch", "4"]
                  + ["--rounds", "2", "--warmup", "1", "--steps", "2"])  # fmt: skip
    out, err = capsys.readouterr()
    assert_blas_warning(err, "python -m benchmarks.numpy_ab")
    measured = rounds(out)
    assert len(measured) == 2 and all(b == 4 and x > 0 and y > 0 for b, x, y in measured), out
    assert "step time, working tree / HEAD: median" in out


@needs_git
def test_batch_1_inference_runs_at_its_own_batch_under_jit(capsys):
    numpy_ab.main(["--base", "HEAD", "--workload", "W3-infer-b1", "--backend", "numpy+jit"]
                  + ["--rounds", "1", "--warmup", "3", "--steps", "1"])  # fmt: skip
    measured = rounds(capsys.readouterr().out)
    assert [b for b, _, _ in measured] == [1]  # W3-infer-b1's batch, not the default 128


def test_a_workload_without_steps_is_a_one_line_error():
    proc = run_module("benchmarks.numpy_ab", "--workload", "W4-overhead")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "W4-overhead" in proc.stderr and "W1-infer" in proc.stderr


def test_timing_processes_run_without_coverages_subprocess_hook():
    """Under `coverage run` (CI) the hook would trace the timing processes and record the
    temporary copies of ember they import, gone before `coverage report` reads them."""
    env = {"COVERAGE_PROCESS_CONFIG": "{}", "COVERAGE_PROCESS_START": "pyproject.toml", "EMBER_BACKEND": "numpy"}
    assert numpy_ab.untraced(env) == {"EMBER_BACKEND": "numpy"}
