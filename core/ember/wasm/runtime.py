"""What the browser page runs in Pyodide (and the tests run in CPython): pick a backend, load a
trained model, turn pixels into the inputs the model was trained on, classify.

The page calls, in order: :func:`choose_backend`, :meth:`Classifier.from_bytes` with the site's
``model/model.json`` and ``model/model.safetensors``, then :meth:`Classifier.predict` with
28x28 grayscale images (a drawing goes through :func:`mnist_like` first). Nothing here imports
numpy: the input normalization runs on the pure-Python backend, bit for bit as the training
pipeline's NumPy ``Normalize``.

>>> digits = Classifier.from_files(RUN_DIR_OR_SITE_MODEL_DIR)      # doctest: +SKIP
>>> digits.predict(bytes(784), 1)["classes"]                       # doctest: +SKIP
[1]
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import sys
import time
from array import array

import ember
from ember import dtypes as D
from ember.io import TensorBytes, load_bytes
from ember.io.save import tensor_from_bytes
from ember.registry import prepare

#: The order ``choose_backend("auto")`` tries; the first that can run here wins.
PREFERENCE = ("webgpu", "numpy", "python")
SPEC_FORMAT = "ember.browser-model"


def in_pyodide() -> bool:
    return sys.platform == "emscripten"


def numpy_available() -> bool:
    """Whether numpy can be imported here (in Pyodide: only after ``loadPackage("numpy")``)."""
    return importlib.util.find_spec("numpy") is not None


async def choose_backend(preference: str = "auto") -> tuple:
    """``(name, reasons)``: the backend to run on, and why each better one was passed over.

    ``auto`` tries webgpu (inside Pyodide with a WebGPU adapter), then numpy (when it can be
    imported), then python (always). Asking for one by name falls back the same way.

    >>> import asyncio
    >>> asyncio.run(choose_backend("python"))
    ('python', [])
    """
    if preference not in ("auto",) + PREFERENCE:
        raise ValueError(f"unknown backend preference {preference!r}; use auto, {', '.join(PREFERENCE)}")
    order = PREFERENCE if preference == "auto" else PREFERENCE[PREFERENCE.index(preference) :]
    reasons: list = []
    for name in order:
        if name == "webgpu":
            # ember.backends.webgpu offers itself only where navigator.gpu exists, and its
            # device must be awaited (BackendInfo.setup) before the first use.
            why = await prepare("webgpu")
            if why == "":
                try:
                    ember.get_backend("webgpu")
                    return name, reasons
                except ember.BackendError as exc:
                    reasons.append(f"webgpu: {exc}")
                    continue
            reasons.append(f"webgpu: {why or 'no navigator.gpu here (not a browser with WebGPU)'}")
        elif name == "numpy":
            if numpy_available():
                return name, reasons
            reasons.append("numpy: not importable here (in Pyodide, add numpy's wheel to the site)")
        else:
            return name, reasons
    raise AssertionError("python is always available")


# ----------------------------------------------------------------------------- the model
@contextlib.contextmanager
def _skipping_init():
    """Build a model without drawing its random initial weights: the checkpoint is about to
    replace every one of them (``load_state_dict`` is strict), and drawing 670k Philox numbers
    in pure Python costs seconds in the browser. All of ember.nn.init fills through these two."""
    from ember import random as R

    saved = R.uniform_, R.normal_
    R.uniform_ = R.normal_ = lambda t, *args, **kwargs: t
    try:
        yield
    finally:
        R.uniform_, R.normal_ = saved


def build_model(spec: dict, weights: bytes | None = None):
    """The model ``spec`` describes, on the python backend: the zoo model built exactly as
    ``ember train`` built it (its weights loaded by the caller), or, for ``"kind": "onnx"``, the
    imported graph with its ``weights`` (ember.onnx.portable: no ``onnx`` package needed)."""
    if spec.get("kind") == "onnx":
        from ember.onnx import portable

        return portable.restore(spec["graph"], weights, "python")
    from ember.train import recipes

    with _skipping_init(), ember.backend("python"):
        return recipes.build_model(spec["model"], spec["dataset"])


class Classifier:
    """A trained model ready to classify images: weights loaded, moved to ``backend``, in eval mode."""

    def __init__(self, spec: dict, weights: bytes, backend: str = "python"):
        if spec.get("format") != SPEC_FORMAT:
            raise ValueError(f"not an ember browser model (format {spec.get('format')!r}, expected {SPEC_FORMAT!r})")
        self.spec = spec
        self.backend = backend
        self.timings = {}
        t0 = time.perf_counter()
        model = build_model(spec, weights)
        if spec.get("kind") != "onnx":
            tensors, _ = load_bytes(weights, source=spec.get("weights", "<weights>"))
            python = ember.get_backend("python")
            model.load_state_dict({name: tensor_from_bytes(tb, python) for name, tb in tensors.items()})
        self.timings["build_ms"] = 1000 * (time.perf_counter() - t0)
        t0 = time.perf_counter()
        if backend != "python":
            model.to(backend)  # the one upload of the weights
        model.eval()
        self.model = model
        self.timings["move_ms"] = 1000 * (time.perf_counter() - t0)
        c, h, w = spec["input_shape"]
        self.input_shape = (c, h, w)
        self.batch = spec.get("batch")  # a fixed batch size (an ONNX export's), or None
        mean = ember.tensor(spec["mean"], dtype=D.float32, backend="python").reshape(-1, 1, 1)
        scale = 1 / ember.tensor(spec["std"], dtype=D.float32, backend="python").reshape(-1, 1, 1)
        self._mean, self._scale = mean.to(backend), scale.to(backend)  # as the pipeline's Normalize

    @classmethod
    def from_text(cls, spec_text: str, weights, backend: str = "python"):
        """From ``model.json``'s text and the weights' bytes (a JS Uint8Array works too)."""
        return cls(json.loads(spec_text), as_bytes(weights), backend)

    @classmethod
    def from_files(cls, directory, backend: str = "python"):
        """Load ``model.json`` and its weights from a directory (a built site's ``model/``)."""
        with open(os.path.join(directory, "model.json"), encoding="utf-8") as f:
            spec = json.load(f)
        name = spec.get("weights") if isinstance(spec, dict) else None
        # The spec names a file of this folder, never one elsewhere ("../../etc/..." or a link out).
        root = os.path.realpath(directory)
        path = os.path.realpath(os.path.join(root, name)) if isinstance(name, str) else None
        if path is None or os.path.commonpath([root, path]) != root or path == root:
            raise ValueError(f'model.json: "weights" must name a file inside {directory}, got {name!r}')
        with open(path, "rb") as f:
            return cls(spec, f.read(), backend)

    def normalize(self, pixels, n: int):
        """``n`` uint8 images (row-major bytes) as the float32 inputs training saw,
        ``(x / 255 - mean) * (1 / std)``, on the model's backend (bit for bit the NumPy
        pipeline's on python and numpy; within float32 rounding on webgpu)."""
        c, h, w = self.input_shape
        pixels = as_bytes(pixels)
        if len(pixels) != n * c * h * w:
            raise ValueError(f"{len(pixels)} bytes are not {n} images of {c}x{h}x{w}")
        values = array("f", array("B", pixels))  # 0..255, exact in float32
        if sys.byteorder != "little":
            values.byteswap()
        x = tensor_from_bytes(TensorBytes("F32", (n, c, h, w), values.tobytes()), ember.get_backend(self.backend))
        return (x / 255 - self._mean) * self._scale

    def logits(self, pixels, n: int) -> list:
        """The model's outputs for ``n`` images, as nested Python lists (one read-back, or one
        per image for a model exported with a fixed batch of 1)."""
        x = self.normalize(pixels, n)
        with ember.no_grad():
            if self.batch not in (None, n):
                return [row for i in range(n) for row in self.model(x[i : i + 1]).tolist()]
            return self.model(x).tolist()

    def predict(self, pixels, n: int = 1) -> dict:
        """Classify ``n`` images: ``classes`` (argmax), ``probs`` (softmax, for the bar chart),
        ``logits``, ``ms`` (wall time of this call) and ``backend``."""
        t0 = time.perf_counter()
        logits = self.logits(pixels, n)
        ms = 1000 * (time.perf_counter() - t0)
        classes = [row.index(max(row)) for row in logits]
        return {
            "classes": classes,
            "probs": [softmax(row) for row in logits],
            "logits": logits,
            "ms": ms,
            "backend": self.backend,
            "labels": self.spec.get("classes"),
        }

    def predict_drawing(self, gray, width: int, height: int):
        """Classify a drawing (see :func:`mnist_like`); the result also holds ``input``, the
        28x28 image the model saw. None for a blank drawing."""
        pixels = mnist_like(gray, width, height)
        if pixels is None:
            return None
        c, h, w = self.input_shape
        # a model of another input size sees the 28x28 digit resampled, in every channel
        fed = pixels if (h, w) == (28, 28) else resample(pixels, 28, 28, h, w)
        return {**self.predict(bytes(fed) * c, 1), "input": list(pixels)}


def as_bytes(data) -> bytes:
    """bytes from bytes-like data or a JavaScript typed array (a Pyodide JsProxy)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return data.to_bytes()


def softmax(row) -> list:
    top = max(row)
    e = [math.exp(v - top) for v in row]
    s = sum(e)
    return [v / s for v in e]


# ----------------------------------------------------------------------------- drawings
def mnist_like(gray, width: int, height: int, box: int = 20, side: int = 28):
    """A drawing (``width*height`` bytes, ink bright on dark) prepared the way MNIST's digits
    were: cropped to the ink, scaled (area average) so the longer side is ``box`` pixels, and
    placed in a ``side x side`` image with its centre of mass in the middle. None if blank.

    >>> img = bytearray(100 * 100)
    >>> for y in range(20, 80):
    ...     img[y * 100 + 48:y * 100 + 52] = b"\\xff" * 4
    >>> out = mnist_like(bytes(img), 100, 100)
    >>> len(out), out[14 * 28 + 14] > 0, out[0]
    (784, True, 0)
    """
    gray = as_bytes(gray)
    if len(gray) != width * height:
        raise ValueError(f"{len(gray)} bytes are not a {width}x{height} image")
    rows = [gray[y * width : (y + 1) * width] for y in range(height)]
    ink_rows = [y for y, r in enumerate(rows) if any(r)]
    if not ink_rows:
        return None
    ink_cols = [x for x in range(width) if any(r[x] for r in rows[ink_rows[0] : ink_rows[-1] + 1])]
    y0, y1, x0, x1 = ink_rows[0], ink_rows[-1] + 1, ink_cols[0], ink_cols[-1] + 1
    scale = box / max(y1 - y0, x1 - x0)
    th, tw = max(1, round((y1 - y0) * scale)), max(1, round((x1 - x0) * scale))
    small = _area_resample([rows[y][x0:x1] for y in range(y0, y1)], th, tw)
    mass = sum(map(sum, small)) or 1.0
    cy = sum(y * v for y, r in enumerate(small) for v in r) / mass
    cx = sum(x * v for r in small for x, v in enumerate(r)) / mass
    oy = min(max(round(side / 2 - cy), 0), side - th)
    ox = min(max(round(side / 2 - cx), 0), side - tw)
    out = bytearray(side * side)
    for y, r in enumerate(small):
        for x, v in enumerate(r):
            out[(oy + y) * side + ox + x] = min(255, max(0, round(v)))
    return bytes(out)


def resample(pixels, h: int, w: int, th: int, tw: int) -> bytes:
    """An ``h x w`` image (bytes) resampled to ``th x tw`` by area averaging.

    >>> list(resample(bytes([0, 255, 255, 0]), 2, 2, 1, 1))
    [128]
    """
    small = _area_resample([pixels[y * w : (y + 1) * w] for y in range(h)], th, tw)
    return bytes(min(255, max(0, round(v))) for r in small for v in r)


def _area_resample(rows, th: int, tw: int) -> list:
    """Rows of pixel values resampled to ``th x tw`` by area averaging (float rows)."""
    wx, wy = _area_weights(len(rows[0]), tw), _area_weights(len(rows), th)
    half = [[sum(r[i] * f for i, f in ws) for ws in wx] for r in rows]  # (h, tw)
    return [[sum(half[i][x] * f for i, f in ws) for x in range(tw)] for ws in wy]  # (th, tw)


def _area_weights(n: int, m: int) -> list:
    """For each of ``m`` output cells, the (input index, weight) pairs of an area-average
    resampling of ``n`` inputs (weights of a cell sum to 1)."""
    step = n / m
    out = []
    for j in range(m):
        a, b = j * step, (j + 1) * step
        cell = []
        for i in range(int(a), min(n, math.ceil(b))):
            overlap = min(b, i + 1) - max(a, i)
            if overlap > 0:
                cell.append((i, overlap / step))
        out.append(cell)
    return out
