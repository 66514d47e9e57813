"""The ``python`` backend: every primitive in pure Python, standard library only, so ember runs
where numpy cannot (Pyodide without numpy's wheel).

backend.py (the primitive table and ``PythonBackend``) · buffer.py (``PyBuffer``: a flat list,
a shape, a dtype; dtype rounding and byte conversion) · layout.py (movement, indexing,
reductions over strided views) · linalg.py (matmul and convolution).

>>> [info.name for info in ember_backends()]
['python']
"""

from __future__ import annotations

from ember.backend import BackendInfo
from ember.hooks import hookimpl


def _load():
    from .backend import PythonBackend

    return PythonBackend()


@hookimpl
def ember_backends():
    return [
        BackendInfo(
            "python",
            _load,
            priority=0,
            description="pure Python, standard library only (runs without NumPy, e.g. in Pyodide)",
        )
    ]
