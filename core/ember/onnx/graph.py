"""Stage 2 of loading: an ONNX graph → an ember Module that interprets it.

Each ONNX node becomes a :class:`Node` bound to its handler from the operator table
(``ops.OPS``), checked at load: every unsupported operator, opset or dtype of the model is
reported at once. Float initializers become trainable parameters; other initializers and
``Constant`` nodes are constants, and every node that depends only on constants is run once at
load (constant folding), so ``forward`` runs only the part of the graph that depends on inputs.
"""

from __future__ import annotations

from os import PathLike
from typing import Any

from .. import autodiff, dtypes as D
from ..nn import Module, Parameter
from ..tensor import Tensor, tensor
from .ops import RANDOM, lookup
from .reader import OnnxError, attributes, dtype_of, opsets, read_model, to_numpy

# Attributes that name an element type (Cast's `to`, EyeLike's `dtype`, ...).
DTYPE_ATTRIBUTES = ("to", "dtype", "output_datatype", "output_dtype")


class Node:
    """One ONNX node, bound to its handler: what handlers see of the graph."""

    __slots__ = (
        "attrs",
        "domain",
        "graphs",
        "handler",
        "inputs",
        "memo",
        "name",
        "op_type",
        "opset",
        "outputs",
        "program",
        "scope",
        "version",
    )

    def __init__(self, proto, index, domain_opsets):
        self.op_type, self.domain = proto.op_type, proto.domain if proto.domain != "ai.onnx" else ""
        self.name = proto.name or f"{self.op_type}_{index}"
        self.inputs, self.outputs = list(proto.input), list(proto.output)
        self.opset = domain_opsets.get(self.domain)
        self.attrs = attributes(proto, self.where)
        self.graphs, self.scope, self.program, self.memo = {}, None, None, {}
        self.handler, self.version = lookup(self)
        for key in DTYPE_ATTRIBUTES:  # a target dtype ember lacks fails at load, not mid-run
            if key in self.attrs and isinstance(self.attrs[key], int):
                self.dtype(self.attrs[key])

    @property
    def where(self) -> str:
        """``node 'conv1' (Conv, opset 13)``: how errors name this node."""
        return f"node {self.name!r} ({self.op_type}, opset {self.opset})"

    def attr(self, name, default=None):
        return self.attrs.get(name, default)

    def cached(self, key, build):
        """``build()``'s result, built on the first call and kept with the node: for host tables a
        handler derives from the attributes alone (a forest's node tables), not from its inputs."""
        if key not in self.memo:
            self.memo[key] = build()
        return self.memo[key]

    def error(self, message) -> OnnxError:
        return OnnxError(f"{self.where}: {message}")

    def dtype(self, code):
        """The ember dtype of ONNX element type ``code`` (an error naming this node if none)."""
        return dtype_of(code, self.where)


class Program:
    """A graph's nodes in order plus its constants; runs as an interpreter over a value table."""

    def __init__(self, graph, domain_opsets, body=False):
        self.graph = graph
        # A body graph (If/Loop/Scan, FlexAttention's mods) carries its own initializers as
        # constants; the main graph's become the module's parameters instead.
        self.constants = (
            {i.name: tensor(to_numpy(i, f"initializer {i.name!r}")) for i in graph.initializer} if body else {}
        )
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.nodes, bad = [], []
        for i, proto in enumerate(graph.node):
            try:
                node = Node(proto, i, domain_opsets)
                node.program = self
                for key, value in node.attrs.items():  # If/Loop/Scan bodies
                    if type(value).__name__ == "GraphProto":
                        node.graphs[key] = Program(value, domain_opsets, body=True)
                self.nodes.append(node)
            except OnnxError as e:
                bad.append(str(e))
        if bad:
            raise OnnxError(f"{len(bad)} node(s) of the model cannot run on ember: " + "; ".join(bad))

    def run(self, env: dict) -> list:
        """Run every node on ``env`` (name → Tensor, updated in place); return the outputs."""
        env.update(self.constants)
        for node in self.nodes:
            run_node(node, env)
        return [env[n] for n in self.outputs]

    def run_before(self, stop, env: dict) -> None:
        """Run, on ``env``, the nodes that come before node ``stop`` (Gradient re-runs them)."""
        for node in self.nodes:
            if node is stop:
                break
            run_node(node, env)


def run_node(node, env: dict) -> None:
    """Run one node on the value table ``env``, adding its outputs; errors name the node."""
    try:
        args = [env[n] if n else None for n in node.inputs]
    except KeyError as e:
        raise node.error(f"input {e} is not computed before this node") from None
    if node.graphs or node.op_type == "Gradient":
        node.scope = env  # bodies (and Gradient) see the enclosing graph's values
    try:
        out = node.handler(node, *args)
    except OnnxError:
        raise
    except Exception as e:
        raise node.error(f"{type(e).__name__}: {e}") from e
    out = out if isinstance(out, tuple) else (out,)  # several outputs come as a tuple; a list is a sequence
    if any(getattr(a, "dtype", None) in D.STORAGE for a in args):
        out = _kept_in_storage(node, args, out)
    for name, value in zip(node.outputs, out):
        if name:
            env[name] = value


def _kept_in_storage(node, args, out) -> tuple:
    """ONNX runs a bfloat16 node in bfloat16; ember computes it in float32 (dtypes.STORAGE). A
    node whose float inputs are all of one storage dtype, and that names no output dtype of its
    own (Cast's ``to``), gets its compute-dtype outputs cast back to that storage dtype."""
    floats = {a.dtype for a in args if isinstance(a, Tensor) and a.dtype.is_floating_point}
    if len(floats) != 1 or any(key in node.attrs for key in DTYPE_ATTRIBUTES):
        return out
    storage = floats.pop()
    if storage not in D.STORAGE:  # a float32 scale beside an int4 input (DequantizeLinear)
        return out
    return tuple(o.to(storage) if isinstance(o, Tensor) and o.dtype is D.STORAGE[storage] else o for o in out)


class OnnxModule(Module):
    """An ONNX model as an ember Module: ``forward`` takes the graph inputs positionally.

    Build one with :func:`ember.onnx.load`. Parameters are named as the model's initializers.
    """

    def __init__(self, model):
        super().__init__()
        g = model.graph
        parameters, constants = {}, {}
        for init in g.initializer:
            t = tensor(to_numpy(init, f"initializer {init.name!r}"))
            (parameters if t.dtype.is_floating_point else constants)[init.name] = t
        known = {i.name for i in g.initializer}
        for vi in list(g.input) + list(g.output):
            if vi.name not in known:
                _check_value_type(vi)
        domain_opsets = opsets(model)
        program = Program(g, domain_opsets)
        program.nodes = _fold(program.nodes, constants)
        self._assemble(parameters, constants, program, domain_opsets, [i.name for i in g.input if i.name not in known])

    def _assemble(self, parameters, constants, program, domain_opsets, input_names):
        """Register the parameters and constants and keep the program: the last step of a load,
        from an ONNX file here or from ember's own files (ember.onnx.portable)."""
        for name, t in parameters.items():
            self._place(name, Parameter(t))
        for name, value in constants.items():
            self.register_buffer(name, value, persistent=False)
        # Set last, past every registration (which would drop an attribute of an initializer's name).
        object.__setattr__(self, "opsets", domain_opsets)
        object.__setattr__(self, "program", program)
        object.__setattr__(self, "input_names", list(input_names))
        object.__setattr__(self, "output_names", program.outputs)

    def _place(self, name, param):
        """Register ``a.b.weight`` as parameter ``weight`` of submodule ``a.b`` (state_dict keys
        stay the ONNX names, as PyTorch's exporter writes them)."""
        *path, leaf = name.split(".")
        if not all(path) or not leaf:
            self.register_parameter(name, param)
            return
        mod = self
        for part in path:
            if part not in mod._modules:
                mod.add_module(part, Module())
            mod = mod._modules[part]
        mod.register_parameter(leaf, param)

    def forward(self, *inputs):
        if len(inputs) != len(self.input_names):
            raise OnnxError(
                f"the model takes {len(self.input_names)} input(s) ({', '.join(self.input_names)}), got {len(inputs)}"
            )
        env = dict(self.named_parameters())
        env.update(self._buffers)
        for name, x in zip(self.input_names, inputs):
            env[name] = [_as_tensor(t) for t in x] if isinstance(x, list) else _as_tensor(x)
        outs = self.program.run(env)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def extra_repr(self):
        return (
            f"inputs={self.input_names}, outputs={self.output_names}, "
            f"nodes={len(self.program.nodes)}, opset={self.opsets.get('')}"
        )


def _as_tensor(x):
    return x if isinstance(x, Tensor) or x is None else tensor(x)


def _fold(nodes, constants: dict) -> list:
    """Run, once, every node whose inputs are all constants (adding its outputs to
    ``constants``); return the nodes left to run at each call."""
    kept = []
    with autodiff.no_grad():
        for node in nodes:
            if all(not n or n in constants for n in node.inputs) and node.op_type not in RANDOM and not node.graphs:
                run_node(node, constants)
                made = [n for n in node.outputs if n]
                if all(isinstance(constants[n], Tensor) for n in made):
                    continue
                for n in made:  # sequences stay computed at each call
                    del constants[n]
            kept.append(node)
    return kept


def _check_value_type(vi):
    t = vi.type
    kind = t.WhichOneof("value")
    if kind == "optional_type":  # the value, or None
        t = t.optional_type.elem_type
        kind = t.WhichOneof("value")
    if kind == "sequence_type" and t.sequence_type.elem_type.WhichOneof("value") == "map_type":
        return  # ZipMap's sequence of maps: a list of dicts
    if kind == "sequence_type" and t.sequence_type.elem_type.WhichOneof("value") == "tensor_type":
        t, kind = t.sequence_type.elem_type, "tensor_type"  # a list of tensors
    if kind != "tensor_type":
        raise OnnxError(
            f"graph value {vi.name!r} is a {kind.replace('_type', '')}; ember runs tensors, "
            "sequences of tensors, optionals of them and ZipMap's sequences of maps only"
        )
    dtype_of(t.tensor_type.elem_type, f"graph value {vi.name!r}")


def load(source: str | PathLike[str] | bytes | Any) -> OnnxModule:
    """Load an ONNX model (a path, bytes or a ModelProto) as an ember Module.

    >>> import ember, ember.onnx
    >>> from onnx import helper, TensorProto
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> m = ember.onnx.load(helper.make_model(g).SerializeToString())
    >>> m(ember.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    return OnnxModule(read_model(source))
