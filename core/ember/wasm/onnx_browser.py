"""The official ONNX cases on the ``webgpu`` backend, in headless Chromium: ``ember onnx test
--backend webgpu``.

Pyodide has neither ``onnx`` nor numpy, so the cases are converted here, in the order the run
meets them:

1. :func:`write_bundle`: each case's model through :func:`ember.onnx.portable.save` (loaded,
   checked and constant-folded by ``ember.onnx.load`` on the current backend), with its inputs
   and ONNX's expected outputs as safetensors, into one zip (layout: :mod:`ember.wasm.onnx_cases`).
   A case that cannot be converted (an operator, dtype or kind of value ember refuses) fails
   here, with its reason: it would fail on every backend.
2. :func:`write_site`: that zip beside Pyodide, ember's wheel and a page that loads them and
   requests the WebGPU device.
3. :func:`run_site`: serves the folder on 127.0.0.1, opens it in headless Chromium with
   ``--enable-unsafe-webgpu`` (SwiftShader's CPU adapter where there is no GPU), and runs the
   cases in chunks inside one page load; a case that crashes the page fails, the page is
   reloaded and the run goes on after it.

Every case record says where its primitives ran (``backend.stats``): all on the GPU, mixed,
all on the host (the pure-Python backend the webgpu backend falls back to for a primitive
without a kernel and for the dtypes WGSL cannot store: float64, float16, int64, uint8), or
none at all (the graph was folded at conversion, or only moves values).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from .onnx_cases import FORMAT, MARK

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>ember: the official ONNX cases</title>
<link rel="icon" href="data:,">
<script type="module">
import { loadPyodide } from "./pyodide/pyodide.mjs";
const suite = (window.emberSuite = { error: null, backend: null });
suite.ready = (async () => {
  try {
    const base = new URL(".", location.href);
    const py = await loadPyodide({
      indexURL: new URL("pyodide/", base).href,
      lockFileURL: new URL("pyodide/pyodide-lock.json", base).href,
      packages: ["ember"],
    });
    if (!py.loadedPackages.ember) throw new Error("ember's wheel did not install (see the console)");
    py.FS.writeFile("/cases.zip", new Uint8Array(await (await fetch("cases.zip")).arrayBuffer()));
    suite.pyodide = py;
    suite.backend = await py.runPythonAsync(
      "import ember\\nfrom ember.registry import prepare\\n" +
      "why = await prepare('webgpu')\\n" +
      "ember.get_backend('webgpu').version if why == '' else 'unavailable: ' + str(why)");
    return true;
  } catch (e) {
    suite.error = String((e && e.stack) || e);
    return false;
  }
})();
suite.run = (start, stop) => suite.pyodide.runPythonAsync(
  `from ember.wasm import onnx_cases\\nonnx_cases.run("/cases.zip", "webgpu", ${start}, ${stop})`);
</script>
<p>ember runs the official ONNX cases (driven by <code>ember onnx test --backend webgpu</code>).</p>
"""


# ----------------------------------------------------------------------------- 1. the bundle
def _slot(value, key, tensors):
    """Store one input or output (an array, a list of arrays or None) in ``tensors``; its SLOT."""
    import numpy as np

    from ..tensor import tensor

    if value is None:
        return None
    if isinstance(value, list):
        keys = [f"{key}/{j}" for j in range(len(value))]
        for k, v in zip(keys, value):
            tensors[k] = tensor(np.asarray(v))
        return {"list": keys}
    tensors[key] = tensor(np.asarray(value))
    return {"tensor": key}


def convert(case) -> tuple:
    """``(graph JSON, weights, data)`` of one case (see ember.wasm.onnx_cases), or an exception."""
    import numpy as np

    from ..onnx import portable, suite

    graph, weights = portable.save(case.model)
    tensors: dict = {}
    graph["data_sets"] = []
    with np.errstate(all="ignore"):
        for d, (inputs, outputs) in enumerate(case.data_sets):
            inputs, outputs = suite._arrays(inputs), suite._arrays(outputs)
            if not all(suite._plain(a) for a in list(inputs) + list(outputs)):
                raise ValueError("inputs or outputs are not tensors or lists of tensors")
            graph["data_sets"].append(
                {
                    "inputs": [_slot(a, f"input/{d}/{i}", tensors) for i, a in enumerate(inputs)],
                    "outputs": [_slot(a, f"output/{d}/{i}", tensors) for i, a in enumerate(outputs)],
                }
            )
    return json.dumps(graph), weights, portable.dump_tensors(tensors)


def write_bundle(cases, path) -> dict:
    """Convert ``cases`` (ember.onnx.suite.Case) into the zip at ``path``; return
    ``{name: why it could not be converted}`` for the cases that fail already here."""
    errors, index = {}, []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for k, case in enumerate(cases):
            record = {"name": case.name, "dir": str(k), "rtol": case.rtol, "atol": case.atol, "error": None}
            try:
                graph, weights, data = convert(case)
            except Exception as e:  # noqa: BLE001 - any failure of a case is that case's result
                record["error"] = errors[case.name] = (
                    "not converted: " + f"{type(e).__name__}: " + " ".join(str(e).split())[:300]
                )
            else:
                z.writestr(f"cases/{k}/graph.json", graph)
                z.writestr(f"cases/{k}/weights.safetensors", weights)
                z.writestr(f"cases/{k}/data.safetensors", data)
            index.append(record)
        z.writestr("index.json", json.dumps({"format": FORMAT, "version": 1, "cases": index}))
    return errors


# ----------------------------------------------------------------------------- 2. the site
def write_site(site, cases, pyodide_dir=None, wheels_dir=None, ember_wheel=None, fetch=False) -> dict:
    """The runner's static folder: Pyodide + wheels (``build.write_pyodide``), ``cases.zip`` and
    the page; returns the build failures of :func:`write_bundle`."""
    from .build import write_pyodide

    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    write_pyodide(site / "pyodide", pyodide_dir, wheels_dir, ember_wheel, fetch=fetch)
    (site / "index.html").write_text(PAGE)
    return write_bundle(cases, site / "cases.zip")


# ----------------------------------------------------------------------------- 3. the run
def _open(browser, url, timeout_s):
    """The suite's page, loaded. A page whose renderer crashes while it loads (before any case
    has run, so no case is the cause) is opened once more."""
    try:
        return _load(browser, url, timeout_s)
    except Exception as e:  # noqa: BLE001 - Playwright's Error, "Target crashed"
        if "crash" not in str(e).lower():
            raise
        return _load(browser, url, timeout_s)


def _load(browser, url, timeout_s):
    from .chromium import new_page

    page = new_page(browser, timeout_s)
    page.goto(url)
    if not page.evaluate("window.emberSuite.ready"):
        raise RuntimeError(
            f"the suite's page failed: {page.evaluate('window.emberSuite.error')}\n" + "\n".join(page.ember_log[-20:])
        )
    return page


def run_site(site, chunk=40, timeout_s=900, progress=None, chromium=None) -> tuple:
    """Run every case of the site's bundle in headless Chromium; ``(records, adapter)``:
    records as :func:`ember.wasm.onnx_cases.run` returns them, and the WebGPU adapter (or why
    there was none)."""
    from .chromium import Served, browser

    names = [c["name"] for c in json.loads(zipfile.ZipFile(Path(site) / "cases.zip").read("index.json"))["cases"]]
    records: list = []
    with Served(site) as server, browser(chromium, webgpu=True) as chrome:
        page = _open(chrome, server.url, timeout_s)
        adapter = page.evaluate("window.emberSuite.backend")
        if adapter.startswith("unavailable"):
            raise RuntimeError(f"webgpu is {adapter}")
        run = "([a, b]) => window.emberSuite.run(a, b)"
        todo = [(a, min(a + chunk, len(names))) for a in range(0, len(names), chunk)]
        while todo:
            a, b = todo.pop(0)
            if a >= b:
                continue
            seen = len(page.ember_log)
            try:
                got = json.loads(page.evaluate(run, [a, b]))
            except Exception as e:  # noqa: BLE001 - a crash: that case fails, the run goes on after it
                marks = [int(m.split(MARK, 1)[1].split()[0]) for m in page.ember_log[seen:] if MARK in m]
                why = " ".join(str(e).split())[:300]
                if not marks:  # no case had started: the runner itself failed
                    raise RuntimeError(f"the suite's page failed: {why}") from e
                culprit = marks[-1]
                records.append({"name": names[culprit], "reason": f"the page crashed: {why}", "seconds": None})
                try:
                    page.close()
                except Exception:  # noqa: BLE001, S110 - a crashed page may refuse; a new one follows
                    pass
                page = _open(chrome, server.url, timeout_s)
                todo[:0] = [(a, culprit), (culprit + 1, b)]  # the cases before it ran in the lost page
                continue
            records += got
            if progress:
                progress(b, len(names), records)
    return records, adapter


def placement(record) -> str | None:
    """Where a case's primitives ran: gpu (all), mixed, host (all) or none; None unknown."""
    if record.get("gpu") is None:
        return None
    gpu, host = bool(record["gpu"]), bool(record["host"])
    return {(True, False): "gpu", (True, True): "mixed", (False, True): "host", (False, False): "none"}[gpu, host]


def run_suite(cases, site, progress=None, **inputs) -> tuple:
    """``(results, placements, records, adapter)`` of ``cases`` on webgpu in Chromium: results as
    :func:`ember.onnx.suite.run_suite` gives them (name → category, plain, reason, seconds),
    placements name → :func:`placement`, and the page's raw records."""
    errors = write_site(site, cases, **inputs)
    records, adapter = run_site(site, progress=progress)
    by_name = {r["name"]: r for r in records}
    results, placements = {}, {}
    for case in cases:
        r = by_name.get(case.name)
        reason = errors.get(case.name) or (r["reason"] if r else "not run")
        results[case.name] = (case.category, case.plain, reason, (r or {}).get("seconds") or 0.0)
        placements[case.name] = placement(r) if r else None
    return results, placements, records, adapter


HOST_DTYPES = ("float64", "float16", "int64", "uint8")  # the ember dtypes WGSL has no storage for


def summary(records) -> str:
    """What sent work to the host, by number of cases: the primitives without a WGSL kernel,
    and for the primitives with one, the dtypes it declined (``"(host)"``: GPU dtypes whose
    data a host primitive had made, so a view of them stayed on the host)."""
    missing: dict = {}
    dtypes: dict = {}
    for r in records:
        with_kernel = {key.split()[0] for key in r.get("declined") or ()}  # a host call of these was a decline
        for name in r.get("host") or ():
            if name not in with_kernel:
                missing[name] = missing.get(name, 0) + 1
        why = set()
        for key in r.get("declined") or ():
            why |= {d for d in HOST_DTYPES if d in key} | ({"(host)"} if key.endswith("(host)") else set())
        for d in why:
            dtypes[d] = dtypes.get(d, 0) + 1

    def line(counts):
        return ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    return (
        f"primitives without a WGSL kernel (cases that ran them on the host): {line(missing) or 'none'}\n"
        f"cases where a kernel declined its operands, by dtype: {line(dtypes) or 'none'}"
    )


__all__ = ["convert", "write_bundle", "write_site", "run_site", "run_suite", "placement", "summary"]
