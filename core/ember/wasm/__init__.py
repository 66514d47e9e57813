"""``ember.wasm``: trained ember models in the browser, through Pyodide.

A static site (no server beyond static files) loads Pyodide, installs the ember wheel from a
patched lock file (integrity checks on), loads a checkpoint written by ``ember train``, and
classifies digits drawn on a canvas. The modules, in the order a visitor's page meets them:

- ``build``: ``python -m ember.wasm build OUT --checkpoint RUN_DIR`` assembles the site:
  Pyodide's runtime, the wheels it needs (ember, pluggy, micropip), the lock file patched to
  list them with their sha256, the model's weights and JSON, and the page (``site/``).
- ``runtime``: the Python the page runs: pick a backend (webgpu, numpy, python), load the
  model, turn pixels into the training pipeline's inputs, predict.
- ``selfcheck``: runs every WebGPU kernel against the pure-Python backend (browser tests).
- ``onnx_browser`` and ``onnx_cases``: ``ember onnx test --backend webgpu``, the official ONNX
  cases converted here and run by a standard-library runner inside the page;
  ``chromium``: the static server and headless Chromium every browser check drives.

This package is the site builder and the page's runtime only. The backends the page runs on
(``webgpu``, ``python``, and ``numpy`` where its wheel is bundled) live with the other
backends in ``ember.backends`` and reach the registry through the wheel's entry points.

docs/browser.md is the user's guide.

>>> from ember.wasm import runtime
>>> runtime.in_pyodide()
False
"""

from __future__ import annotations

from .build import MICROPIP_VERSION, PYODIDE_VERSION, build_site

__all__ = ["PYODIDE_VERSION", "MICROPIP_VERSION", "build_site"]
