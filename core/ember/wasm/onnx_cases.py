"""The official ONNX cases from a case bundle, run with the standard library only: the Python
the suite's page runs in the browser (Pyodide has neither ``onnx`` nor numpy).

``ember onnx test --backend webgpu`` (:mod:`ember.wasm.onnx_browser`) converts each case where
``onnx`` is installed into a bundle, one zip file::

    index.json                   {"format", "version", "cases": [{"name", "dir", "rtol", "atol",
                                  "error"}]}  (error: why the case could not be converted)
    cases/DIR/graph.json         the model as ember.onnx.portable writes it, plus "data_sets":
                                  [{"inputs": [SLOT, ...], "outputs": [SLOT, ...]}]
    cases/DIR/weights.safetensors  its parameters and folded constants (portable's blob)
    cases/DIR/data.safetensors   the inputs and ONNX's expected outputs

A SLOT is ``null`` (an empty optional), ``{"tensor": KEY}`` or ``{"list": [KEY, ...]}`` (a
sequence), KEY naming a tensor of ``data.safetensors``. :func:`run` runs a slice of the cases on
one backend and compares with ONNX's outputs exactly as :func:`ember.onnx.suite.run_case` does
(the case's rtol/atol, NaNs where they are expected, the dtype and the shape). On a backend that
counts where its primitives ran (webgpu's ``stats``), each record says which ran on the GPU and
which on the host.

>>> compare([1.0, float("nan")], [1.0005, float("nan")], rtol=1e-3, atol=0.0) is None
True
>>> compare([1.0, 2.0], [1.0, 2.1], rtol=1e-3, atol=0.0)
'1 of 2 elements differ (largest |got - want| 0.1 at index 1: got 2.1, want 2.0)'
"""

from __future__ import annotations

import json
import math
import time
import zipfile

FORMAT = "ember.onnx-cases"
MARK = "ember-onnx-case:"  # printed before each case, so the driver knows which one a crash hit


def compare(want: list, got: list, rtol: float, atol: float) -> str | None:
    """None when the flat float lists agree as ``numpy.testing.assert_allclose`` decides
    (``|got - want| <= atol + rtol * |want|``; NaN equals NaN; infinities match exactly)."""
    bad, worst, at = 0, -1.0, 0
    for i, (w, g) in enumerate(zip(want, got)):
        if w != w or g != g:
            ok = w != w and g != g
            err = math.inf
        elif math.isinf(w) or math.isinf(g):
            ok, err = w == g, math.inf
        else:
            err = abs(g - w)
            ok = err <= atol + rtol * abs(w)
        if not ok:
            bad += 1
            if err > worst:
                worst, at = err, i
    if not bad:
        return None
    return f"{bad} of {len(want)} elements differ (largest |got - want| {worst:.3g} at index {at}: got {got[at]}, want {want[at]})"


def _flat(t) -> list:
    v = t.tolist()
    out: list = []
    stack = [v]
    while stack:  # depth first, left to right: row-major order
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


def compare_output(i: int, want, got, rtol: float, atol: float) -> str | None:
    """Why output ``i`` (an ember tensor) differs from the expected tensor, or None."""
    if got.dtype is not want.dtype:
        return f"output {i}: dtype {got.dtype.name}, expected {want.dtype.name}"
    if tuple(got.shape) != tuple(want.shape):
        return f"output {i}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    g, w = _flat(got), _flat(want)
    if want.dtype.is_floating_point:
        reason = compare(w, g, rtol, atol)
        return f"output {i}: values differ: {reason}" if reason else None
    return None if g == w else f"output {i}: values differ"


class Bundle:
    """An open case bundle: ``cases`` (index.json's records) and each case's files."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path)
        index = json.loads(self.zip.read("index.json"))
        if index.get("format") != FORMAT:
            raise ValueError(f"{path} is not an ONNX case bundle (format {index.get('format')!r})")
        self.cases = index["cases"]

    def files(self, case: dict) -> tuple:
        base = f"cases/{case['dir']}/"
        graph = json.loads(self.zip.read(base + "graph.json"))
        return graph, self.zip.read(base + "weights.safetensors"), self.zip.read(base + "data.safetensors")


def _slot(slot, tensors, backend):
    if slot is None:
        return None
    if "list" in slot:
        return [tensors[k].to(backend) for k in slot["list"]]
    return tensors[slot["tensor"]].to(backend)


def run_case(bundle: Bundle, case: dict, backend) -> str | None:
    """None if the case passes on ``backend``, else a one-line reason."""
    from ..onnx import portable
    from ..onnx.suite import check_outputs

    graph, weights, data = bundle.files(case)
    tensors = portable.load_tensors(data, "python", source=f"<{case['name']} data>")
    module = portable.restore(graph, weights, backend)
    for ds in graph["data_sets"]:
        outs = module(*[_slot(s, tensors, backend) for s in ds["inputs"]])
        backend.synchronize()  # a GPU error belongs to this case, not the next one
        expected = [_slot(s, tensors, "python") for s in ds["outputs"]]
        reason = check_outputs(
            expected, outs, lambda i, w, g: compare_output(i, w, g.to("python"), case["rtol"], case["atol"])
        )
        if reason:
            return reason
    return None


def run(path, backend="python", start=0, stop=None) -> str:
    """Run cases ``start:stop`` of the bundle at ``path`` on ``backend``; a JSON list of
    ``{"name", "reason", "seconds"}``, plus where the backend counts its calls (webgpu's
    ``stats``) ``"gpu"`` (the primitives that ran as shaders), ``"host"`` (those the host ran,
    with their call counts) and ``"declined"`` (which kernels declined which dtypes)."""
    from .. import backend as using, registry

    bundle = Bundle(path)
    backend = registry.get_backend(backend)
    stats = getattr(backend, "stats", None)
    out = []
    for k, case in enumerate(bundle.cases[start:stop], start):
        if case.get("error"):
            continue
        print(MARK, k, case["name"], flush=True)
        if stats is not None:
            backend.stats_reset()
        t = time.perf_counter()
        try:
            with using(backend.name):  # constants a handler makes land on the case's backend
                reason = run_case(bundle, case, backend)
        except Exception as e:  # noqa: BLE001 - any failure of a case is that case's result
            reason = f"{type(e).__name__}: " + " ".join(str(e).split())[:300]
            try:
                backend.synchronize()  # drop what the failed case left pending
            except Exception:  # noqa: BLE001, S110 - already reported as this case's failure
                pass
        record = {"name": case["name"], "reason": reason, "seconds": round(time.perf_counter() - t, 4)}
        if stats is not None:
            record["gpu"] = sorted(stats["gpu"])
            record["host"] = dict(sorted(stats["host"].items()))
            record["declined"] = sorted(stats.get("declined", ()))
        out.append(record)
    return json.dumps(out)
