"""ember.jit: graph capture and compilation.

``ember.jit(fn)`` traces ``fn`` with abstract tensors into a graph of primitives, optimizes it
and runs the compiled result, re-tracing only for a new input signature::

    >>> import ember
    >>> step = ember.jit(lambda a, b, c: (a * b + c).relu().sum())
    >>> a = ember.ones(4, 3)
    >>> step(a, a, a).item()
    24.0
    >>> step.trace_count
    1

The modules follow the pipeline: graph.py (the Graph and its Vars) → trace.py (tracing is an
interpreter; with pytree.py, leaks.py and effects.py for arguments, leaked tensors and side
effects) → passes.py (DCE, CSE, constant folding, simplification, fusion groups) → buffers.py
(buffer plans) → runner.py, or the backend's own
runner from ``Backend.jit_runner()`` (running a graph) → api.py (the cache and the
``Jit`` object). ``EMBER_JIT=0`` turns every jitted function back into the plain function.
"""

import sys as _sys
import types as _types
from typing import Any as _Any

from .api import Compiled, Jit, enabled, jit
from .graph import Graph, Var
from .passes import Group, cse, dce, fold_constants, fusion_groups, optimize, plan_buffers, simplify
from .trace import TraceBackend, TraceError, is_traced, is_tracing

__all__ = [
    "jit",
    "Jit",
    "Compiled",
    "Graph",
    "Var",
    "Group",
    "fusion_groups",
    "TraceError",
    "is_traced",
    "is_tracing",
    "enabled",
    "dce",
    "cse",
    "fold_constants",
    "simplify",
    "optimize",
    "plan_buffers",
    "TraceBackend",
]


class _JitModule(_types.ModuleType):
    """This module is also the ``jit`` function itself, so ``ember.jit(fn)`` works while
    ``ember.jit.fusion_groups`` and friends stay reachable."""

    def __call__(self, fn: _Any = None, **options: _Any) -> _Any:
        return jit(fn, **options)


_sys.modules[__name__].__class__ = _JitModule
