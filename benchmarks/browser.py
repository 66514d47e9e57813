"""Inference speed of ember in the browser: ``python -m benchmarks.browser SITE`` (a built site).

Serves SITE on 127.0.0.1, opens it in headless Chromium with WebGPU (SwiftShader without a GPU),
and times, inside the page's Pyodide, the issue's workload: an MNIST MLP 784-128-10 with random
weights, batch 1 and batch 32, on the python backend and on webgpu (input upload and read-back
included, as a page pays them). Prints one JSON line; docs/browser.md records the numbers.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH = """
import copy, json, time
import ember
from ember import models

def best(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - t))
    return min(times)

ember.manual_seed(0)
with ember.backend("python"):
    net = models.get("mlp", hidden=(128,))
net.eval()
x1 = ember.randn(1, 1, 28, 28, backend="python")
x32 = ember.randn(32, 1, 28, 28, backend="python")
out = {}
with ember.no_grad():
    out["python_b1_ms"] = best(lambda: net(x1).tolist(), 30)
    out["python_b32_ms"] = best(lambda: net(x32).tolist(), 10)
    if "webgpu" in {r["name"] for r in ember.list_backends()}:
        gnet = copy.deepcopy(net).to("webgpu")
        out["webgpu_b1_ms"] = best(lambda: gnet(x1.to("webgpu")).tolist(), 30)
        out["webgpu_b32_ms"] = best(lambda: gnet(x32.to("webgpu")).tolist(), 30)
        out["webgpu_b32_speedup"] = out["python_b32_ms"] / out["webgpu_b32_ms"]
        out["adapter"] = ember.get_backend("webgpu").version
json.dumps(out)
"""


def main(site) -> dict:
    from tests.wasm.conftest import Served, demo_page

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with Served(site) as server, demo_page(chromium, server.url, webgpu=True) as page:
        result = json.loads(page.evaluate("(code) => emberDemo.pyodide.runPythonAsync(code)", BENCH))
        result["page_load_to_first_prediction_ms"] = page.evaluate("emberDemo.timings.first_prediction_ms")
        result["page_backend"] = page.evaluate("emberDemo.backend")
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
