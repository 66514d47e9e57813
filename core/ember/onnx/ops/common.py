"""Helpers every operator family uses: host integers from shape tensors, constants on the
inputs' backend, axis normalisation."""

from __future__ import annotations

from typing import Any

from ...creation import full
from ...tensor import Tensor, tensor

LATEST = 28  # the newest default-domain opset of the pinned onnx (1.23.2)


def ints(t: Any) -> list[int] | None:
    """A shape/axes/pads input as Python ints (ONNX computes shapes with tensors; ember on the host)."""
    if t is None:
        return None
    if isinstance(t, Tensor):
        v = t.tolist()
        return [int(i) for i in v] if isinstance(v, list) else [int(v)]
    return [int(i) for i in t]


def scalar(t, default=None):
    """A 0-d or 1-element input as a Python number."""
    if t is None:
        return default
    v = t.tolist() if isinstance(t, Tensor) else t
    while isinstance(v, list):
        v = v[0]
    return v


def const(value, like, dtype=None) -> Tensor:
    """A constant (NumPy array, list or number) on ``like``'s backend (a tensor, or a sequence
    or None: the current backend)."""
    while isinstance(like, list):
        like = like[0] if like else None
    return tensor(value, dtype=dtype, backend=like.backend if like is not None else None)


def filled(shape, value, like: Tensor, dtype=None) -> Tensor:
    return full(tuple(shape), value, dtype=dtype or like.dtype, backend=like.backend)


def body(node, name, values) -> list:
    """Run the node's body graph ``name`` on ``values`` (its inputs, in order), seeing the
    enclosing graph's values as ONNX's lexical scoping says; return its outputs."""
    g = node.graphs[name]
    env = dict(node.scope)
    env.update(zip(g.inputs, values))
    return g.run(env)


def movedim(x: Tensor, src: int, dst: int) -> Tensor:
    """``x`` with axis ``src`` moved to position ``dst`` (ember tensors have no ``movedim``)."""
    order = [d for d in range(x.ndim) if d != src]
    order.insert(dst, src)
    return x.permute(*order)


def axis(a: int, ndim: int) -> int:
    return a + ndim if a < 0 else a


def axes(seq, ndim: int) -> list:
    return [axis(int(a), ndim) for a in seq]
