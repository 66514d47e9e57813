"""The built site's Python side in real Pyodide, under Node (no browser): the patched lock
installs ember, the wheel's entry points reach ember's registry, and the pure-Python backend
gives the numbers CPython's NumPy backend gives. (Node reads wheels from disk without checking
their sha256; the browser test checks integrity.)"""

import json

import numpy as np

from ember.wasm import runtime

from .conftest import mnist_test_images, run_node

SCRIPT = """
import {{ loadPyodide }} from {pyodide_mjs};
import {{ readFileSync }} from "node:fs";
const t0 = performance.now();
const py = await loadPyodide({{ indexURL: {index}, lockFileURL: {lock}, packages: {packages} }});
const loaded = performance.now() - t0;
py.globals.set("pixels", new Uint8Array(readFileSync({pixels})));
py.globals.set("model_dir", {model_dir});
py.FS.mkdirTree({model_dir});
for (const name of ["model.json", "model.safetensors"]) {{
  py.FS.writeFile({model_dir} + "/" + name, readFileSync({model_dir} + "/" + name));
}}
const out = await py.runPythonAsync(`
import json, sys, time, importlib.metadata as md
import ember
from ember.registry import REGISTRY
from ember.wasm import runtime
name, reasons = await runtime.choose_backend("auto")
c = runtime.Classifier.from_files(model_dir, name)
t = time.perf_counter()
res = c.predict(pixels.to_bytes(), 40)
ms = 1000 * (time.perf_counter() - t)
one = min(c.predict(pixels.to_bytes()[:784], 1)["ms"] for _ in range(5))
json.dumps({{
  "platform": sys.platform, "entry_points": sorted([e.name, e.value] for e in md.entry_points(group="ember")),
  "plugins": [n for n, _ in REGISTRY.pm.list_name_plugin()], "backends": [r["name"] for r in ember.list_backends()],
  "problems": REGISTRY.problems, "default": ember.get_backend().name, "chosen": name, "reasons": reasons,
  "numpy_imported": "numpy" in sys.modules, "micropip": __import__("micropip").__version__,
  "classes": res["classes"], "logits": res["logits"], "ms_batch": ms, "ms_1": one,
}})
`);
console.log(JSON.stringify({{ ...JSON.parse(out), load_ms: loaded }}));
"""


def _script(site, tmp_path, pixels, packages=("ember", "micropip"), lock=None):
    (tmp_path / "pixels.bin").write_bytes(pixels)
    q = json.dumps
    pdir = site / "pyodide"
    return SCRIPT.format(
        pyodide_mjs=q(str(pdir / "pyodide.mjs")),
        index=q(str(pdir) + "/"),
        lock=q(str(lock or pdir / "pyodide-lock.json")),
        packages=q(list(packages)),
        pixels=q(str(tmp_path / "pixels.bin")),
        model_dir=q(str(site / "model")),
    )


def test_pyodide_installs_ember_from_the_lock_and_matches_cpython(node, untrained_site, tmp_path):
    pixels, _ = mnist_test_images(40)
    got = run_node(node, _script(untrained_site, tmp_path, pixels), tmp_path)
    assert got["platform"] == "emscripten" and got["micropip"] == "0.11.1"
    # the wheel's entry points reach the registry: the webgpu plugin is registered through pluggy
    assert ["webgpu", "ember.backends.webgpu"] in got["entry_points"]
    assert "webgpu (ember.backends.webgpu)" in got["plugins"] and "python (ember.backends.python)" in got["plugins"]
    assert got["backends"] == ["python"] and got["problems"] == {}  # no numpy, no warning about it
    assert got["default"] == "python" and not got["numpy_imported"]
    assert got["chosen"] == "python" and got["reasons"][0].startswith("webgpu: no navigator.gpu")
    want = runtime.Classifier.from_files(untrained_site / "model", "numpy").predict(pixels, 40)
    assert got["classes"] == want["classes"]
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-5, atol=1e-5)
    print(
        f"\nPyodide under Node: load {got['load_ms']:.0f} ms, python backend 40 images "
        f"{got['ms_batch']:.0f} ms, 1 image {got['ms_1']:.1f} ms"
    )
