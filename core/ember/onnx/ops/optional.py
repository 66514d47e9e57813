"""Optional values: an optional is its value (a tensor or a sequence) or None when empty."""

from __future__ import annotations

from ... import dtypes as D
from ...tensor import tensor


def optional(node, x=None):
    return x


def has_element(node, x=None):
    return tensor(x is not None, dtype=D.bool_, backend=_backend(x))


def get_element(node, x):
    if x is None:
        raise node.error("the optional is empty")
    return x


def _backend(x):
    while isinstance(x, list):
        x = x[0] if x else None
    return x.backend if x is not None else None


OPS = {"Optional": (optional, 15), "OptionalHasElement": (has_element, 15), "OptionalGetElement": (get_element, 15)}
