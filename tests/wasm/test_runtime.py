"""ember.wasm.runtime in CPython: backend choice, model loading, input normalization, drawings."""

import asyncio
import json
import tomllib

import numpy as np
import pytest

import ember
from ember.backends import webgpu
from ember.io import TensorBytes, read_checkpoint, save_bytes
from ember.wasm import runtime

from .conftest import ROOT, mnist_test_images, untrained_checkpoint


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """model.json + model.safetensors of an untrained MLP, as the site build exports them."""
    from ember.wasm.build import export_model

    tmp = tmp_path_factory.mktemp("model")
    untrained_checkpoint(tmp / "run")
    export_model(tmp / "run", tmp / "model")
    return tmp / "model"


def test_auto_prefers_numpy_in_cpython_and_says_why_not_webgpu():
    name, reasons = asyncio.run(runtime.choose_backend("auto"))
    assert name == "numpy"
    assert len(reasons) == 1 and reasons[0].startswith("webgpu: no navigator.gpu")
    assert asyncio.run(runtime.choose_backend("python")) == ("python", [])
    with pytest.raises(ValueError, match="unknown backend preference 'cuda'"):
        asyncio.run(runtime.choose_backend("cuda"))


def test_webgpu_is_offered_only_inside_a_browser():
    assert webgpu.ember_backends() == []
    assert "webgpu" not in {row["name"] for row in ember.list_backends()}
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["ember"]
    assert entry_points["webgpu"] == "ember.backends.webgpu"


def test_normalize_is_bit_identical_to_the_training_pipeline(model_dir):
    from ember.train import recipes

    pixels, _ = mnist_test_images(100)
    expected = recipes.transforms("mnist", augment=False)(
        np.frombuffer(pixels, np.uint8).reshape(100, 1, 28, 28).astype(np.float32) / np.float32(255)
    )
    for backend in ("python", "numpy"):
        got = runtime.Classifier.from_files(model_dir, backend).normalize(pixels, 100).numpy()
        assert got.dtype == np.float32 and got.shape == (100, 1, 28, 28)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), backend


def test_python_and_numpy_backends_agree_on_100_mnist_images(model_dir):
    pixels, _ = mnist_test_images(100)
    py = runtime.Classifier.from_files(model_dir, "python").predict(pixels, 100)
    npy = runtime.Classifier.from_files(model_dir, "numpy").predict(pixels, 100)
    assert py["classes"] == npy["classes"]
    np.testing.assert_allclose(py["logits"], npy["logits"], rtol=1e-5, atol=1e-5)
    assert all(abs(sum(p) - 1) < 1e-9 for p in py["probs"])
    assert py["backend"] == "python" and py["ms"] > 0


def test_weights_load_exactly_and_the_model_matches_the_checkpoint(model_dir, tmp_path):
    c = runtime.Classifier.from_files(model_dir, "python")
    tensors, _ = read_checkpoint(model_dir.parent / "run")
    for name, t in c.model.state_dict().items():
        assert t.backend.to_bytes(t._data) == bytes(tensors[f"model/{name}"].data), name
    spec = json.loads((model_dir / "model.json").read_text())
    with pytest.raises(ValueError, match="not an ember browser model"):
        runtime.Classifier({**spec, "format": "other"}, b"")
    short = save_bytes({"0.weight": TensorBytes("F32", (1,), b"\0" * 4)})
    with pytest.raises(Exception, match="missing|unexpected|shape"):
        runtime.Classifier(spec, short)


def test_skipping_init_restores_the_initializers():
    from ember import random as R

    before = R.uniform_, R.normal_
    runtime.build_model({"model": "mlp", "dataset": "mnist"})
    assert (R.uniform_, R.normal_) == before


def _upscaled(image: bytes, factor=10, margin=(13, 37)):
    """An MNIST digit drawn big on a 280x280 canvas, off centre, as a user would."""
    side = 28 * factor
    canvas = bytearray(side * side)
    top, left = margin
    for y in range(28):
        for x in range(28):
            v = image[y * 28 + x]
            if v:
                for dy in range(factor):
                    row = (y * factor + dy + top) % side
                    canvas[
                        row * side + (x * factor + left) % side : row * side + (x * factor + left) % side + factor
                    ] = bytes([v]) * min(factor, side - (x * factor + left) % side)
    return bytes(canvas), side


def test_mnist_like_recovers_digits_drawn_large_and_off_centre():
    pixels, _ = mnist_test_images(20)
    similar = 0
    for k in range(20):
        original = pixels[k * 784 : (k + 1) * 784]
        canvas, side = _upscaled(original, margin=(5 * (k % 3), 7 * (k % 4)))
        got = runtime.mnist_like(canvas, side, side)
        a = np.frombuffer(got, np.uint8).reshape(28, 28).astype(float)
        b = np.frombuffer(original, np.uint8).reshape(28, 28).astype(float)
        ys, xs = np.nonzero(a)
        assert max(ys.max() - ys.min(), xs.max() - xs.min()) + 1 in (20, 21)  # the 20-pixel box
        cy, cx = (np.indices(a.shape) * a).reshape(2, -1).sum(1) / a.sum()
        assert abs(cy - 14) <= 0.5 and abs(cx - 14) <= 0.5  # centre of mass
        similar += (a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()) > 0.99
    assert similar >= 19  # MNIST's own preparation: the original comes back (1 in 100 is off)
    assert runtime.mnist_like(bytes(100), 10, 10) is None
    with pytest.raises(ValueError, match="not a 10x10 image"):
        runtime.mnist_like(bytes(99), 10, 10)


def test_predict_drawing_returns_the_model_input(model_dir):
    pixels, _ = mnist_test_images(1)
    canvas, side = _upscaled(pixels[:784])
    out = runtime.Classifier.from_files(model_dir, "python").predict_drawing(canvas, side, side)
    assert len(out["input"]) == 784 and out["classes"][0] in range(10) and len(out["probs"][0]) == 10


@pytest.mark.parametrize(
    "weights",
    ["../outside.bin", "../" * 30 + "outside.bin", "sub/../../outside.bin", "ABSOLUTE", ".", "link.bin", None, 7],
)
def test_the_model_loader_reads_only_inside_its_folder(model_dir, tmp_path, weights):
    if weights == "ABSOLUTE":
        weights = str(tmp_path / "outside.bin")
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"secret")
    (folder / "link.bin").symlink_to(tmp_path / "outside.bin")
    spec = json.loads((model_dir / "model.json").read_text())
    (folder / "model.json").write_text(json.dumps({**spec, "weights": weights}))
    with pytest.raises(ValueError, match="must name a file inside"):
        runtime.Classifier.from_files(folder, "python")
