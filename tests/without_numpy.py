"""Run Python code in a process that cannot import numpy, as in Pyodide offline (the browser
build must work without it and use it when present)."""

import subprocess
import sys

BLOCK_NUMPY = """
import sys


class NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError("numpy is blocked")


sys.meta_path.insert(0, NoNumpy())
"""


def run_without_numpy(code: str, cwd, timeout: float = 120) -> str:
    """``code``'s stdout, run where ``import numpy`` fails; fails the test with its stderr."""
    run = subprocess.run(
        [sys.executable, "-c", BLOCK_NUMPY + code], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout
