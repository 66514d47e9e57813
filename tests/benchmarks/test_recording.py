"""benchmarks/recording.py: the BLAS-override warning and record, and commands recorded for the
docs without the machine's paths; end to end through `python -m benchmarks run`."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the repository, not installed

from bench_helpers import assert_blas_warning  # noqa: E402

from benchmarks import recording  # noqa: E402

PROG = "python -m benchmarks"


def test_the_warning_names_what_is_set_and_the_command_without_it():
    assert recording.blas_warning(PROG, {"LANG": "C"}) is None
    line = recording.blas_warning("python -m benchmarks.onnx_ab", {"OPENBLAS_CORETYPE": "Haswell"})
    assert "\n" not in line and "OPENBLAS_CORETYPE=Haswell" in line and "OPENBLAS_L2_SIZE" not in line.split(":")[0]
    assert "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.onnx_ab ...`" in line
    both = {"OPENBLAS_L2_SIZE": "512", "OPENBLAS_CORETYPE": "Haswell"}
    assert recording.blas_overrides(both) == {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512"}
    assert "OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 set" in recording.blas_warning(PROG, both)


def test_a_path_outside_the_repository_is_left_out_of_the_command(tmp_path):
    outside = str(tmp_path / "r.json")
    opts = ("--json", "--docs")
    for argv in (["--json", outside], [f"--json={outside}"], ["--js", outside]):
        assert recording.portable_command(PROG, ["run", *argv, "--smoke"], opts) == f"{PROG} run --smoke"
    inside = ["run", "--docs", str(ROOT / "docs" / "x.md"), "--json=results/a.json"]
    assert (
        recording.portable_command(PROG, inside, opts, cwd=ROOT / "benchmarks")
        == f"{PROG} run --docs docs/x.md --json benchmarks/results/a.json"
    )
    # other options and their values pass as they are, quoted for the shell
    assert recording.portable_command(PROG, ["run", "--workloads", "W1 W2"], opts) == f"{PROG} run --workloads 'W1 W2'"


def test_a_run_records_its_command_without_the_json_path_and_the_blas_variables(tmp_path):
    out = tmp_path / "r.json"
    args = ["run", "--smoke", "--workloads", "W4", "--backends", "numpy", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["command"] == f"{PROG} run --smoke --workloads W4 --backends numpy"
    assert str(tmp_path) not in proc.stdout  # the Markdown table, what goes into the docs
    for name in recording.BLAS_OVERRIDES:
        assert report["machine"]["env"][name] == os.environ.get(name)
        assert f"{name}={os.environ.get(name) or '(unset)'}" in proc.stdout
        assert all(r["env"][name] == os.environ.get(name) for r in report["records"])
    assert_blas_warning(proc.stderr, f"{PROG} run")
