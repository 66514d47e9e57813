"""``python -m ember.wasm build SITE --onnx MODEL``: an ONNX image classifier in the browser.

The classifier (3x16x16 colour input, so the page's input has to adapt) is written with
``ember.onnx.export`` here; onnxruntime runs the same file on the same normalized pixels and
gives the expected logits. The site's model is checked in CPython (no onnx in the runtime path),
in real Pyodide under Node, and (slow) in headless Chromium through the page."""

import base64
import json

import numpy as np
import pytest

from ember.wasm import build, runtime

from .conftest import Served, demo_page, run_node

onnx = pytest.importorskip("onnx", reason="the ONNX site build needs the onnx extra: pip install 'ember[onnx]'")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime gives the expected outputs: pip install 'ember[onnx]'")

MEAN, STD = [0.5, 0.4, 0.3], [0.25, 0.2, 0.3]
N = 6


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    import ember
    import ember.onnx
    from ember import nn

    ember.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 7 * 7, 10)).eval()
    path = tmp_path_factory.mktemp("onnx") / "small.onnx"
    ember.onnx.export(net, ember.randn(1, 3, 16, 16), str(path))
    return path


def expected(model_path, pixels, n):
    """onnxruntime's logits for ``n`` uint8 images, normalized as the page does, one at a time
    (the exported graph has batch 1)."""
    x = np.frombuffer(pixels, np.uint8).reshape(n, 3, 16, 16).astype(np.float32)
    x = (x / np.float32(255) - np.array(MEAN, np.float32).reshape(3, 1, 1)) * (
        np.float32(1) / np.array(STD, np.float32).reshape(3, 1, 1)
    )
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: x[i : i + 1]})[0] for i in range(n)])


def images(n=N):
    return np.random.default_rng(1).integers(0, 256, (n, 3, 16, 16), dtype=np.uint8).tobytes()


@pytest.mark.parametrize("backend", ["python", "numpy"])
def test_the_converted_model_gives_onnxruntime_logits_without_onnx(classifier, tmp_path, backend, monkeypatch):
    spec = build.export_onnx_model(classifier, tmp_path / "model", MEAN, STD)
    assert spec["input_shape"] == [3, 16, 16] and spec["batch"] == 1 and spec["kind"] == "onnx"
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)  # the runtime path must not need it
    c = runtime.Classifier.from_files(tmp_path / "model", backend)
    got = c.predict(images(), N)
    np.testing.assert_allclose(got["logits"], expected(classifier, images(), N), rtol=1e-5, atol=1e-5)
    drawing = bytearray(100 * 100)
    for y in range(20, 80):
        drawing[y * 100 + 45 : y * 100 + 55] = b"\xff" * 10
    out = c.predict_drawing(bytes(drawing), 100, 100)
    assert len(out["input"]) == 784 and len(out["probs"][0]) == 10  # the preview stays 28x28


def test_a_dynamic_batch_runs_in_one_call_and_a_drawing_is_resampled(tmp_path):
    # A hand-written graph with a symbolic batch (as torch.onnx writes with dynamic_axes):
    # Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm on 1x8x8 grey images.
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [w, fc],
    )
    path = tmp_path / "grey.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    spec = build.export_onnx_model(path, tmp_path / "model")
    assert spec["input_shape"] == [1, 8, 8] and spec["batch"] is None
    c = runtime.Classifier.from_files(tmp_path / "model", "python")
    pixels = rng.integers(0, 256, (5, 1, 8, 8), dtype=np.uint8)
    got = c.predict(pixels.tobytes(), 5)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": pixels.astype(np.float32) / np.float32(255)})[0]
    np.testing.assert_allclose(got["logits"], want, rtol=1e-5, atol=1e-6)
    drawing = bytearray(100 * 100)
    for y in range(20, 80):
        drawing[y * 100 + 45 : y * 100 + 55] = b"\xff" * 10
    out = c.predict_drawing(bytes(drawing), 100, 100)
    fed = runtime.resample(runtime.mnist_like(bytes(drawing), 100, 100), 28, 28, 8, 8)
    np.testing.assert_allclose(out["logits"], c.predict(fed, 1)["logits"])  # the model saw the 8x8 resample


def test_models_the_page_cannot_feed_are_refused_at_build(tmp_path):
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
    )
    onnx.save(helper.make_model(g), str(tmp_path / "m.onnx"))
    with pytest.raises(build.BuildError, match=r"images \(N, C, H, W\).*the model takes x float32\[None, 10\]"):
        build.export_onnx_model(tmp_path / "m.onnx", tmp_path / "model")
    with pytest.raises(build.BuildError, match="is not an ONNX model"):
        (tmp_path / "bad.onnx").write_bytes(b"junk")
        build.export_onnx_model(tmp_path / "bad.onnx", tmp_path / "model")


def test_the_cli_builds_an_onnx_site_and_rejects_two_models(
    classifier, tmp_path, pyodide_dir, wheels_dir, ember_wheel, capsys
):
    from ember.wasm.__main__ import main

    args = [
        "build",
        str(tmp_path / "site"),
        "--onnx",
        str(classifier),
        "--mean",
        "0.5,0.4,0.3",
        "--std",
        "0.25,0.2,0.3",
        "--pyodide",
        str(pyodide_dir),
        "--wheels",
        str(wheels_dir),
        "--ember-wheel",
        str(ember_wheel),
    ]
    assert main(args) == 0
    assert "small.onnx on ONNX" in capsys.readouterr().out
    spec = json.loads((tmp_path / "site" / "model" / "model.json").read_text())
    assert spec["mean"] == MEAN and spec["graph"]["format"] == "ember.onnx-graph"
    with pytest.raises(SystemExit):
        main(["build", str(tmp_path / "x"), "--onnx", str(classifier), "--checkpoint", str(tmp_path)])


@pytest.fixture(scope="module")
def onnx_site(classifier, tmp_path_factory, pyodide_dir, wheels_dir, ember_wheel):
    site = tmp_path_factory.mktemp("site-onnx") / "site"
    build.build_site(
        site,
        onnx=classifier,
        mean=MEAN,
        std=STD,
        pyodide_dir=pyodide_dir,
        wheels_dir=wheels_dir,
        ember_wheel=ember_wheel,
    )
    return site


NODE_SCRIPT = """
import {{ loadPyodide }} from {pyodide_mjs};
import {{ readFileSync }} from "node:fs";
const py = await loadPyodide({{ indexURL: {index}, lockFileURL: {lock}, packages: ["ember"] }});
py.globals.set("pixels", new Uint8Array(readFileSync({pixels})));
py.FS.mkdirTree({model_dir});
for (const name of ["model.json", "model.safetensors"]) {{
  py.FS.writeFile({model_dir} + "/" + name, readFileSync({model_dir} + "/" + name));
}}
const out = await py.runPythonAsync(`
import json, sys
from ember.wasm import runtime
name, reasons = await runtime.choose_backend("auto")
c = runtime.Classifier.from_files({model_dir}, name)
res = c.predict(pixels.to_bytes(), {n})
json.dumps({{"backend": name, "logits": res["logits"], "onnx_imported": "onnx" in sys.modules,
             "numpy_imported": "numpy" in sys.modules}})
`);
console.log(out);
"""


def test_pyodide_runs_the_onnx_site_model_like_onnxruntime(node, onnx_site, classifier, tmp_path):
    (tmp_path / "pixels.bin").write_bytes(images())
    q = json.dumps
    pdir = onnx_site / "pyodide"
    script = NODE_SCRIPT.format(
        pyodide_mjs=q(str(pdir / "pyodide.mjs")),
        index=q(str(pdir) + "/"),
        lock=q(str(pdir / "pyodide-lock.json")),
        pixels=q(str(tmp_path / "pixels.bin")),
        model_dir=q(str(onnx_site / "model")),
        n=N,
    )
    got = run_node(node, script, tmp_path)
    assert got["backend"] == "python" and not got["onnx_imported"] and not got["numpy_imported"]
    np.testing.assert_allclose(got["logits"], expected(classifier, images(), N), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_page_classifies_with_the_onnx_model_in_chromium(chromium, onnx_site, classifier):
    with Served(onnx_site) as server, demo_page(chromium, server.url + "?backend=python") as page:
        predict = "([b64, n]) => emberDemo.predictImages(Uint8Array.from(atob(b64), c => c.charCodeAt(0)), n)"
        got = page.evaluate(predict, [base64.b64encode(images()).decode(), N])
        assert got["backend"] == "python"
        np.testing.assert_allclose(got["logits"], expected(classifier, images(), N), rtol=1e-5, atol=1e-5)
        page.click("#clear")
        box = page.locator("#canvas").bounding_box()
        page.mouse.move(box["x"] + 140, box["y"] + 50)
        page.mouse.down()
        page.mouse.move(box["x"] + 140, box["y"] + 230, steps=6)
        page.mouse.up()
        page.evaluate("emberDemo.classifyCanvas()")
        drawn = page.evaluate("emberDemo.lastDrawing")
        assert len(drawn["input"]) == 784 and len(drawn["probs"][0]) == 10
        assert page.inner_text("#digit") in [str(i) for i in range(10)]
