"""benchmarks/onnx_models.py end to end on a tiny ResNet, one timed call per target: the harness
runs, checks outputs against onnxruntime and reports ratios (no timing is asserted: the
numbers mean nothing on a shared machine)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import assert_blas_warning

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the repository, not installed

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("ember_numba")

from benchmarks import onnx_models, recording  # noqa: E402

pytestmark = pytest.mark.onnx


def test_script_runs_a_tiny_resnet_on_every_target(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.onnx_models",
            "--models",
            "tiny",
            "--batches",
            "1,2",
            "--rounds",
            "1",
            "--warmup",
            "2",  # numba+jit compiles in its third call: the timed one then runs compiled
            "--exporter",
            "ember",  # the test command has no torch
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_blas_warning(proc.stderr, "python -m benchmarks.onnx_models")
    (report,) = tmp_path.glob("onnx-models-*.json")
    saved = json.loads(report.read_text())
    rows = saved["rows"]
    assert saved["env"] == {k: os.environ.get(k) for k in recording.BLAS_OVERRIDES}
    assert [(r["batch"], r["target"]) for r in rows] == [(b, t) for b in (1, 2) for t in onnx_models.TARGETS]
    for r in rows:
        assert "error" not in r, r
        assert len(r["seconds"]) == 1 and r["median_ms"] > 0 and r["first_call_s"] > 0
        if r["target"] != "ort":
            assert r["max_rel_err"] < 1e-3 and r["ratio"] > 0
    assert "| tiny | 1 | numba+jit |" in (tmp_path / report.name.replace(".json", ".md")).read_text()
    assert not list(tmp_path.glob("*.onnx"))  # the exported file is removed after its rows


def test_the_model_is_the_standard_resnet50():
    ember = pytest.importorskip("ember")
    model = onnx_models.resnet(ember.nn, *onnx_models.MODELS["resnet50"][:3])
    n = sum(p.numel() for p in model.parameters())
    assert n == 25_557_032  # torchvision's resnet50: 25,557,032 parameters
    assert sum(type(m).__name__ == "Conv2d" for m in model.modules()) == 53


def test_a_wrong_output_is_an_error_row_not_a_timing(tmp_path, monkeypatch):
    path = str(tmp_path / "tiny.onnx")
    onnx_models.export("tiny", "ember", path)
    real = onnx_models.make_runner

    def broken(target, path, threads):
        run, what = real(target, path, threads)
        return ((lambda x: run(x) + 1.0) if target == "numpy+jit" else run), what

    monkeypatch.setattr(onnx_models, "make_runner", broken)
    rows = onnx_models.measure("tiny", 1, ["ort", "numpy+jit"], path, rounds=1, warmup=0, threads=1)
    assert "median_ms" in rows[0]
    assert "differs from onnxruntime" in rows[1]["error"] and rows[1]["seconds"] == []
    assert "differs from onnxruntime" in onnx_models.table(rows)


def test_an_exported_file_goes_with_its_folder_when_the_measurement_fails():
    # a ResNet-50 file is 100 MB: the copies that failed or killed tools left once filled the disk
    paths = []
    with pytest.raises(RuntimeError, match="measurement failed"), onnx_models.exported("tiny", "ember") as path:
        paths.append(path)
        assert os.path.getsize(path) > 0
        raise RuntimeError("measurement failed")
    assert not os.path.exists(os.path.dirname(paths[0]))


def test_exported_docstring_example_runs():
    import doctest

    finder = doctest.DocTestFinder()
    (test,) = finder.find(onnx_models.exported, "exported", globs={"exported": onnx_models.exported, "os": os})
    assert doctest.DocTestRunner().run(test).failed == 0
