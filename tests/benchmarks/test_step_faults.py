"""benchmarks/step_faults.py: a compiled step's faults, system and user time per step, and the
runner steps that fault, read from the program the step runs."""

import re
import subprocess
import sys
from pathlib import Path

from bench_helpers import assert_blas_warning

ROOT = Path(__file__).resolve().parents[2]


def test_reports_every_step_and_the_runner_steps_of_the_program():
    args = ["--workload", "W2-train", "--backend", "numpy+jit", "--batch", "8", "--steps", "3", "--warmup", "3"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_faults", *args, "--nodes", "2", "--top", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert_blas_warning(proc.stderr, "python -m benchmarks.step_faults")
    lines = proc.stdout.strip().splitlines()
    assert re.match(
        r"W2-train on numpy\+jit, batch 8, 3 steps: median \d+ minor faults/step .* peak RSS \d+ MiB", lines[0]
    )
    assert re.match(r"faults per step: \[\d+, \d+, \d+\] system ms: \[\d+, \d+, \d+\]$", lines[1])
    assert lines[2] == "runner steps by faults, summed over 2 steps; outside them (the rest of each call):"
    assert re.match(r" *-?\d+ faults +-?[\d.]+ ms sys +-?[\d.]+ ms user$", lines[3])
    nodes = lines[4:]
    assert len(nodes) == 5
    assert all(re.match(r" *\d+ faults +[\d.]+ ms sys +[\d.]+ ms user  #\d+ +\w+", row) for row in nodes), nodes
