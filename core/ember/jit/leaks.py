"""Leak detection: traced tensors that outlive their trace in Python state.

A traced function may leave a traced tensor where Python keeps it: an optimizer creating its
state on the first step stores ``zeros_like(p)`` made inside the trace. Such a tensor must be
made concrete when the graph runs (jit/api.py binds it as an output, ``rebind``). The tracer
notes, weakly, every traced tensor it builds (``Tracer.wrap``); when the trace ends,
:func:`leaked` counts which of them something still refers to.
"""

from __future__ import annotations

import gc
import sys


def leaked(made, backend, keep=()) -> list:
    """The tensors of ``backend`` among the weak references ``made`` that are still referenced
    from Python state, other than ``keep`` (the tracer's own).

    The history (``_ctx``) of those alive is cut first, so a tensor counts only if something
    outside the trace holds it, not because it is the ancestor of a held one. Garbage cycles
    are collected before the final count."""
    alive = [t for t in (r() for r in made) if t is not None and t._backend is backend]
    for t in alive:
        t._ctx = None
    t = None
    skip = {id(k) for k in keep}
    alive = [t for t in alive if id(t) not in skip]
    found = held(alive)
    if found:
        del found
        gc.collect()
        found = held(alive)
    return found


def held(objs) -> list:
    """The objects of ``objs`` that something besides ``objs`` (and this scan) refers to.

    >>> x = object()
    >>> held([object(), x]) == [x]
    True
    """
    base = [sys.getrefcount(o) for o in [object()]][0]  # what the list and this scan hold
    counts = [sys.getrefcount(o) for o in objs]
    return [o for o, n in zip(objs, counts) if n > base]
