"""The ``numpy`` backend, the reference: every primitive as its most obvious NumPy expression.

backend.py (the primitives and ``NumpyBackend``) · host_memory.py (glibc malloc tuning for the
arrays a training step allocates again each step) · jit_runner.py (ember.jit's runner for
NumPy-array backends: planned, reused ``out=`` buffers; ``NumpyBackend.jit_runner`` names it).

This module is the ``ember`` entry point: it offers the backend without importing numpy, so
where numpy is absent (Pyodide without its wheel) nothing is offered and nothing warns.

>>> [info.name for info in ember_backends()]
['numpy']
"""

from __future__ import annotations

import importlib.util

from ember.backend import BackendInfo
from ember.hooks import hookimpl


def _load():
    from .backend import NumpyBackend

    return NumpyBackend()


@hookimpl
def ember_backends():
    if importlib.util.find_spec("numpy") is None:
        return []  # the python backend takes over
    return [BackendInfo("numpy", _load, priority=10, description="NumPy reference backend (the executable spec)")]
