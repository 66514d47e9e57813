"""``ember onnx test --backend webgpu``: the official ONNX cases converted into a bundle
(ember.wasm.onnx_browser) and run by the page's standard-library runner (ember.wasm.onnx_cases).

Fast: the bundle route on the python backend in CPython agrees with ``suite.run_case``, case by
case; the runner's comparison is ``numpy.testing.assert_allclose``'s. Slow: a subset of the
official cases in headless Chromium on the webgpu backend (SwiftShader without a GPU), with
where each case's primitives ran."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ember.wasm import onnx_browser, onnx_cases

onnx = pytest.importorskip("onnx", reason="the ONNX cases need the onnx extra: pip install 'ember[onnx]'")
pytestmark = pytest.mark.onnx

from ember.onnx import suite  # noqa: E402

# One case of most families and every kind of value: broadcasting, float64 and int64 (host
# dtypes on webgpu), bool, sequences, optionals, a constant folded at conversion, a body graph
# (If), strings (in the bundle's safetensors metadata, as lists of str), two models of the
# shipped sets.
SUBSET = [
    "test_abs",
    "test_add_bcast",
    "test_relu",
    "test_matmul_2d",
    "test_conv_with_strides_padding",
    "test_softmax_axis_1",
    "test_reduce_sum_keepdims_example",
    "test_argmax_default_axis_example",
    "test_where_example",
    "test_cast_FLOAT_to_DOUBLE",
    "test_gather_0",
    "test_reshape_negative_dim",
    "test_and2d",
    "test_sequence_insert_at_back",
    "test_optional_get_element_tensor",
    "test_constant",
    "test_if",
    "test_ai_onnx_ml_label_encoder_string_int",
    # WGSL lets a compiler fold x != x to false and SwiftShader's log(0) was -88: NaN by its bits
    "test_isnan",
    "test_reduce_log_sum_empty_set_expanded",
]
MODELS = ["test_operator_add_broadcast", "test_Linear_no_bias"]


@pytest.fixture(scope="module")
def cases():
    by_name = {c.name: c for c in suite.node_cases() + suite.model_cases()}
    return [by_name[n] for n in SUBSET + MODELS]


@pytest.fixture(scope="module")
def bundle(cases, tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "cases.zip"
    return path, onnx_browser.write_bundle(cases, path)


def test_the_bundle_route_agrees_with_the_direct_route(cases, bundle):
    path, errors = bundle
    records = {r["name"]: r for r in json.loads(onnx_cases.run(path, "python"))}
    for case in cases:
        direct = suite.run_case(case, "python")
        via = errors.get(case.name) or records[case.name]["reason"]
        assert (via is None) == (direct is None), (case.name, via, direct)
    assert errors == {}
    assert records["test_ai_onnx_ml_label_encoder_string_int"]["reason"] is None  # text travels too
    assert records["test_if"]["reason"] is None  # its two branches travel with the node
    assert all(r.get("gpu") is None for r in records.values())  # the python backend counts nothing


def test_a_wrong_expected_output_fails_naming_the_values(cases, tmp_path):
    abs_case = next(c for c in cases if c.name == "test_abs")
    (inputs, (want,)), *_ = abs_case.data_sets
    want = onnx.numpy_helper.to_array(want) if not isinstance(want, np.ndarray) else want
    wrong = want.copy()
    wrong.flat[3] += 1
    bad = suite.Case("test_abs_wrong", abs_case.model, [(inputs, [wrong])])
    shape = suite.Case("test_abs_shape", abs_case.model, [(inputs, [want[:1]])])
    onnx_browser.write_bundle([bad, shape], tmp_path / "cases.zip")
    got = {r["name"]: r["reason"] for r in json.loads(onnx_cases.run(tmp_path / "cases.zip", "python"))}
    assert got["test_abs_wrong"].startswith("output 0: values differ: 1 of 60 elements differ")
    assert got["test_abs_shape"] == "output 0: shape (3, 4, 5), expected (1, 4, 5)"


@pytest.mark.parametrize(
    ("want", "got", "rtol", "atol"),
    [
        ([1.0, 2.0, 3.0], [1.0005, 2.0, 3.003], 1e-3, 0.0),
        ([1.0, 2.0, 3.0], [1.0015, 2.0, 3.0], 1e-3, 0.0),
        ([0.0, 1e-9], [1e-8, 0.0], 0.0, 1e-7),
        ([0.0, 1e-9], [1e-6, 0.0], 0.0, 1e-7),
        ([float("nan"), 1.0], [float("nan"), 1.0], 1e-3, 1e-7),
        ([float("nan"), 1.0], [1.0, 1.0], 1e-3, 1e-7),
        ([float("inf"), -float("inf")], [float("inf"), -float("inf")], 1e-3, 1e-7),
        ([float("inf"), 1.0], [-float("inf"), 1.0], 1e-3, 1e-7),
        ([float("inf")], [1e308], 1e-3, 1e-7),
    ],
)
def test_compare_decides_as_assert_allclose(want, got, rtol, atol):
    try:
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=rtol, atol=atol)
        numpy_says = None
    except AssertionError:
        numpy_says = "differ"
    assert (onnx_cases.compare(want, got, rtol, atol) is None) == (numpy_says is None)


def test_the_table_splits_the_passes_by_where_they_ran():
    results = {
        "a": ("nn", True, None, 0.1),
        "b": ("nn", True, None, 0.1),
        "c": ("nn", False, "values differ", 0.1),
        "d": ("shape", True, None, 0.1),
    }
    placements = {"a": "gpu", "b": "mixed", "c": "gpu", "d": "none"}
    text = suite.table(results, placements)
    assert "| category | passed | all on GPU | mixed | all on host | none ran | cases |" in text
    assert "| nn | 2 | 1 | 1 | 0 | 0 | 3 |" in text and "| shape | 1 | 0 | 0 | 0 | 1 | 1 |" in text
    assert "| **all** | 3 | 1 | 1 | 0 | 1 | 4 |" in text and "| plain-tensor cases | 3 | 1 | 1 | 0 | 1 | 3 |" in text
    assert onnx_browser.placement({"gpu": ["add"], "host": {"cast": 1}}) == "mixed"
    assert onnx_browser.placement({"gpu": [], "host": {}}) == "none"


def test_webgpu_without_chromium_is_one_line(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no chromium on this PATH
    out = subprocess.run(
        [sys.executable, "-m", "ember.cli", "onnx", "test", "--backend", "webgpu", "--set", "models"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "ember: error: --backend webgpu runs in headless Chromium, which is not installed (apt-get install chromium)"
    ]


def test_webgpu_without_pyodide_is_one_line(chromium, tmp_path, monkeypatch, capsys):
    from ember.cli import main

    monkeypatch.setenv("EMBER_WASM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_PYODIDE_DIR", raising=False)
    args = ["onnx", "test", "--backend", "webgpu", "--set", "node", "--cases", "^test_abs$", "--pyodide", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ember: error: Pyodide 314.0.7 not found; pass --pyodide DIR")


@pytest.mark.slow
def test_the_command_runs_official_cases_on_webgpu_in_chromium(chromium, pyodide_dir, wheels_dir, tmp_path, capsys):
    from ember.cli import main

    args = ["onnx", "test", "--backend", "webgpu", "--cases", "^(" + "|".join(SUBSET + MODELS) + ")$"]
    args += ["--pyodide", str(pyodide_dir), "--wheels", str(wheels_dir), "--out", str(tmp_path / "results.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "webgpu adapter: " in out and "unexpected failure" not in out, out
    assert "| **all** | 20 | " in out and " | 20 |" in out
    rows = {r["name"]: r for r in json.loads((tmp_path / "results.json").read_text())["cases"]}
    assert rows["test_ai_onnx_ml_label_encoder_string_int"]["reason"] is None  # text on the page's host
    for name in ("test_relu", "test_matmul_2d", "test_conv_with_strides_padding", "test_add_bcast"):
        assert onnx_browser.placement(rows[name]) == "gpu", rows[name]
    assert "take" in rows["test_gather_0"]["gpu"]  # the gather runs on the GPU, its int64 indices on the host
    # float64 has no WGSL storage: the cast's result lives on the host
    assert "cast float32->float64" in rows["test_cast_FLOAT_to_DOUBLE"]["declined"]
    assert onnx_browser.placement(rows["test_constant"]) == "none"  # folded at conversion
