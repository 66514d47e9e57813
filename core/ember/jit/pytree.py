"""Container flattening: the tensors inside a function's nested arguments and results.

ember.jit traces a function whose arguments and return value may be nested tuples, lists,
namedtuples and dicts. :func:`flatten` lists their leaves (tensors and Python values alike),
returns a function that rebuilds the same structure from new leaves (the traced stand-ins on
the way in, the computed tensors on the way out), and a hashable description of the structure
that is part of the cache key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def flatten(obj: Any) -> tuple[list[Any], Callable[[list[Any]], Any], Any]:
    """Leaves of nested tuples/lists/dicts, a function that rebuilds the structure from new
    leaves, and a hashable description of the structure (part of the cache key).

    >>> leaves, rebuild, _ = flatten((1, [2, {"a": 3}]))
    >>> leaves, rebuild([4, 5, 6])
    ([1, 2, 3], (4, [5, {'a': 6}]))
    """
    leaves: list[Any] = []
    build, desc = _walk(obj, leaves)  # no closure over `leaves`: nothing keeps them alive
    return leaves, (lambda new: build(iter(new))), desc


def _next(it):
    return next(it)


def _walk(o, leaves):
    if isinstance(o, (list, tuple)):
        kids = [_walk(x, leaves) for x in o]
        kind = type(o)
        builders = [b for b, _ in kids]
        desc = (kind.__name__, tuple(d for _, d in kids))
        if hasattr(o, "_fields"):  # a namedtuple
            return (lambda it: kind(*[b(it) for b in builders])), desc
        return (lambda it: kind([b(it) for b in builders])), desc
    if isinstance(o, dict):
        keys = list(o)
        kids = [_walk(o[k], leaves) for k in keys]
        builders = [b for b, _ in kids]
        return (lambda it: dict(zip(keys, [b(it) for b in builders]))), ("dict", tuple(keys), tuple(d for _, d in kids))
    leaves.append(o)
    return _next, "*"
