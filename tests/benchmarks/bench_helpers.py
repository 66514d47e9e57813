"""Checks shared by the benchmark tests."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a folder of the repository

from benchmarks import recording  # noqa: E402


def assert_blas_warning(stderr, prog):
    """One warning line naming the BLAS overrides on ``stderr`` where the environment sets them
    (this machine's does), none where it does not: the tests read the environment, never set it."""
    line = recording.blas_warning(prog)
    warned = [x for x in stderr.splitlines() if x.startswith("warning: OPENBLAS_")]
    assert warned == ([line] if line else []), stderr[-2000:]


def run_module(module, *args, timeout=60):
    """``python -m module *args`` from the repository's root: the finished process."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
