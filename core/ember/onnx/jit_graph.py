"""The one place ember.onnx reads ember.jit: trace a model into a neutral list of nodes.

Only jit's public objects are used (``ember.jit(fn).lower(...)`` → ``Compiled.graph``, a
``Graph`` of ``Var``s), so a change inside jit touches this module alone. The export sees
plain records: inputs, parameters (by their names in the model), constants, primitive nodes
and outputs.
"""

from __future__ import annotations

from .. import autodiff, fused
from .reader import OnnxError


class Ref(int):
    """A node argument that is another value (its id), not a Python scalar."""


class Traced:
    """A traced model: ``nodes`` are ``(id, op, args, params, shape, dtype)`` with args as
    :class:`Ref` ids or Python scalars; leaves are in ``inputs``, ``params`` and ``consts``."""

    def __init__(self):
        self.inputs = []  # (id, shape, dtype)
        self.params = []  # (id, name, tensor)
        self.consts = []  # (id, numpy array)
        self.nodes = []
        self.outputs = []  # ids


def trace(model, example_inputs) -> Traced:
    """Trace ``model(*example_inputs)`` with ember.jit (no gradients) into a :class:`Traced`."""
    from .. import jit

    names = {id(t): n for n, t in list(model.named_parameters()) + list(model.named_buffers())}
    fn = jit.jit(lambda *xs: model(*xs))
    # ONNX gets primitives: a backend's fused kernels (max_pool2d on numpy) trace as their decompositions
    backends = {x._backend for x in example_inputs if hasattr(x, "_backend")}
    with fused.decomposed(backends), autodiff.no_grad():
        compiled = fn.lower(*example_inputs)
    graph, backend = compiled.graph, compiled.backend
    out = Traced()
    for v in graph.nodes:
        if v.op == "input":
            out.inputs.append((v.id, v.shape, v.dtype))
        elif v.op == "capture":
            src = graph.captures[v.params["slot"]]
            if src.kind != "tensor":
                raise OnnxError(f"export: the model reads {src!r}, which is not a tensor")
            out.params.append((v.id, names.get(id(src.obj), f"tensor_{v.id}"), src.obj))
        elif v.op == "const":
            out.consts.append((v.id, backend.to_numpy(v.value)))
        else:
            args = [Ref(a.id) if isinstance(a, jit.Var) else a for a in v.args]
            out.nodes.append((v.id, v.op, args, dict(v.params), v.shape, v.dtype, v.origin()))
    out.outputs = [v.id for v in graph.outputs]
    return out
