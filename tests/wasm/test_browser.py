"""The demo site in headless Chromium, served on 127.0.0.1: a model trained by ``ember train
mnist`` classifies 100 real MNIST test images and digits drawn with the mouse, once on the python
backend (no WebGPU adapter) and once on webgpu (``--enable-unsafe-webgpu``: SwiftShader), and
both agree with CPython's NumPy backend. Slow: a real training run plus two page loads."""

import base64
import json
import math
import shutil

import numpy as np
import pytest

from ember.wasm import runtime

from .conftest import Served, demo_page, mnist_test_images

pytestmark = pytest.mark.slow

# Strokes in canvas pixels (the canvas is 280x280), one list of points per pen-down.
DRAWINGS = {
    "1": [[(150, 50), (140, 235)]],
    "7": [[(80, 60), (205, 60), (120, 235)]],
    "0": [[(140 + 62 * math.sin(t / 10 * math.pi), 140 - 92 * math.cos(t / 10 * math.pi)) for t in range(21)]],
    "3": [[(85, 70), (140, 45), (190, 80), (140, 135), (195, 180), (140, 230), (80, 205)]],
}
RESULTS = {}  # backend -> what the page answered, so the webgpu run can compare with python's


@pytest.fixture(scope="module")
def reference(trained_site):
    pixels, labels = mnist_test_images(100)
    want = runtime.Classifier.from_files(trained_site / "model", "numpy").predict(pixels, 100)
    return pixels, labels, want


def draw(page, strokes):
    page.click("#clear")
    box = page.locator("#canvas").bounding_box()
    for stroke in strokes:
        x, y = stroke[0]
        page.mouse.move(box["x"] + x, box["y"] + y)
        page.mouse.down()
        for x, y in stroke[1:]:
            page.mouse.move(box["x"] + x, box["y"] + y, steps=6)
        page.mouse.up()
    page.evaluate("emberDemo.classifyCanvas()")  # the pointerup handler's promise: wait for it
    return page.inner_text("#digit"), page.evaluate("emberDemo.lastDrawing")


def predict_images(page, pixels, n):
    return page.evaluate(
        "([b64, n]) => emberDemo.predictImages(Uint8Array.from(atob(b64), c => c.charCodeAt(0)), n)",
        [base64.b64encode(pixels).decode(), n],
    )


def near_ties(logits, margin):
    """Images whose two best logits are within ``margin``: float32 rounding may swap them."""
    return {i for i, row in enumerate(logits) if sorted(row)[-1] - sorted(row)[-2] < margin}


def check_page(page, reference, backend, tmp_path):
    pixels, labels, want = reference
    got = predict_images(page, pixels, 100)
    assert got["backend"] == backend and len(got["classes"]) == 100
    timings = page.evaluate("emberDemo.timings")
    per_image = {n: min(predict_images(page, pixels[: 784 * n], n)["ms"] for _ in range(3)) for n in (1, 32)}
    drawn = {digit: draw(page, strokes) for digit, strokes in DRAWINGS.items()}
    page.screenshot(path=str(tmp_path / f"demo-{backend}.png"))
    RESULTS[backend] = {
        "classes": got["classes"],
        "logits": got["logits"],
        "drawn": {d: r["probs"][0] for d, (_, r) in drawn.items()},
    }
    accuracy = np.mean(np.array(got["classes"]) == labels)
    print(
        f"\n{backend}: page load to first prediction {timings['first_prediction_ms'] / 1000:.1f} s "
        f"(Pyodide {timings['pyodide_ms'] / 1000:.1f} s), inference 1 image {per_image[1]:.1f} ms, "
        f"32 images {per_image[32]:.1f} ms, 100 images {got['ms']:.0f} ms; accuracy {accuracy:.2f}"
    )
    assert accuracy > 0.8  # a trained model, not noise
    for digit, (shown, result) in drawn.items():
        assert shown == digit, f"drew {digit}, the page shows {shown} ({result['probs'][0]})"
        assert len(result["input"]) == 784 and max(result["input"]) > 200
    return got


def test_python_backend_in_chromium(chromium, trained_site, reference, tmp_path):
    with Served(trained_site) as server, demo_page(chromium, server.url) as page:
        assert page.evaluate("emberDemo.backend") == "python"
        reasons = page.evaluate("emberDemo.reasons")
        assert "no adapter" in reasons[0] and reasons[1].startswith("numpy: not importable")
        got = check_page(page, reference, "python", tmp_path)
    want = reference[2]
    assert got["classes"] == want["classes"]  # the same predictions as CPython's numpy
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-5, atol=1e-5)


def test_webgpu_backend_in_chromium(chromium, trained_site, reference, tmp_path):
    with Served(trained_site) as server, demo_page(chromium, server.url, webgpu=True) as page:
        if page.evaluate("emberDemo.backend") != "webgpu":
            pytest.skip(f"no WebGPU adapter in this Chromium: {page.evaluate('emberDemo.reasons')}")
        failures = [r for r in page.evaluate("emberDemo.selfcheck()") if not r["ok"]]
        assert not failures, json.dumps(failures, indent=1)
        got = check_page(page, reference, "webgpu", tmp_path)
        stats = page.evaluate(
            "emberDemo.pyodide.runPython(`import ember, json; json.dumps(ember.get_backend('webgpu').stats)`)"
        )
    assert json.loads(stats)["host"] == {}  # the whole forward pass ran in shaders
    want = reference[2]
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-4)
    ties = near_ties(want["logits"], 1e-3)
    assert [c for i, c in enumerate(got["classes"]) if i not in ties] == [
        c for i, c in enumerate(want["classes"]) if i not in ties
    ]
    assert len(ties) <= 2
    if "python" in RESULTS:  # both runs agree on the drawings too (classes: via numpy above)
        for digit, probs in RESULTS["python"]["drawn"].items():
            np.testing.assert_allclose(RESULTS["webgpu"]["drawn"][digit], probs, atol=1e-4)


def test_a_tampered_wheel_is_refused(chromium, trained_site, tmp_path):
    """Integrity checks are on: a wheel whose bytes differ from the lock's sha256 never installs."""
    site = tmp_path / "site"
    shutil.copytree(trained_site, site)
    lock = json.loads((site / "pyodide" / "pyodide-lock.json").read_text())
    wheel = site / "pyodide" / lock["packages"]["ember"]["file_name"]
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    with (
        Served(site) as server,
        pytest.raises(AssertionError, match="(?s)wheel did not install.*'integrity'"),
        demo_page(chromium, server.url, timeout_s=120),
    ):
        pass
