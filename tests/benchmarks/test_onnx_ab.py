"""benchmarks/onnx_ab.py: a switch of the plugin's code off and on, end to end on a tiny ResNet
(no timing is asserted)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import assert_blas_warning

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("onnx")
pytest.importorskip("ember_numba")

pytestmark = pytest.mark.onnx


def _script(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.onnx_ab", "--model", "tiny", "--exporter", "ember", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_script_times_both_arms_and_lists_every_step():
    proc = _script("--flag", "ember_numba.conv.SOLO_BANDS", "--calls", "2", "--every")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_blas_warning(proc.stderr, "python -m benchmarks.onnx_ab")
    head = re.search(r"old ([\d.]+), new ([\d.]+); new / old paired ([\d.]+) .*largest difference (\S+)", proc.stdout)
    assert head and float(head[1]) > 0 and float(head[2]) > 0 and float(head[3]) > 0, proc.stdout
    rows = re.findall(r"^\| (\d+) \| (\w+) \| \(([\d, ]+)\) \| ([\d.]+) \| ([\d.]+) \|", proc.stdout, re.M)
    assert rows and any(name.startswith("conv2d") for _, name, *_ in rows)
    assert [int(r[0]) for r in rows] == sorted(int(r[0]) for r in rows)
    assert re.search(r"^\| \| every step \| \| [\d.]+ \| [\d.]+ \|", proc.stdout, re.M)


def test_a_flag_the_module_lacks_is_refused():
    proc = _script("--flag", "ember_numba.conv.NO_SUCH_SWITCH", "--calls", "1")
    assert proc.returncode != 0 and "has no attribute NO_SUCH_SWITCH" in proc.stderr


def test_all_forces_every_choice_onto_all_threads_and_one_excludes_it():
    proc = _script("--flag", "ember_numba.crew.NATIVE", "--calls", "1", "--threads", "2", "--all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 thread(s), every choice forced onto all; ember_numba.crew.NATIVE: old False, new True" in proc.stdout
    both = _script("--flag", "ember_numba.crew.NATIVE", "--calls", "1", "--one", "--all")
    assert both.returncode == 2 and "--one and --all" in both.stderr


def test_a_value_that_is_no_literal_is_one_line_and_exit_2():
    proc = _script("--flag", "ember_numba.conv.SOLO_BANDS", "--old", "1 << 20", "--calls", "1")
    assert proc.returncode == 2 and "must be a Python literal" in proc.stderr and "Traceback" not in proc.stderr
