"""The graph ember.jit builds: SSA values with shapes and dtypes, in program order.

A :class:`Var` is one node and the one value it defines (every primitive has one output). Its
``args`` are other Vars or Python scalars, its ``params`` the primitive's keyword parameters,
and ``where`` the user's source line that created it, for error messages. Besides the
primitives there are three kinds of leaves:

* ``input``   — the i-th tensor argument of the traced function (``params["index"]``);
* ``capture`` — a tensor the function read from Python state (a model parameter, optimizer
  state), read by reference at every call (``params["slot"]`` indexes ``Graph.captures``);
* ``const``   — a buffer fixed at compile time (``Var.value``), made by constant folding.

One more kind of node is not a primitive: ``fused``, one of ember.fused's ops that the
backend declares (``params`` ``{"name", "params"}``), recorded whole instead of its
decomposition. One returning several tensors has ``dtype`` None (a tuple), and each result is
picked by a ``fused_output`` node (``params["index"]``).

A :class:`Graph` is the list of Vars in a valid execution order plus the Vars the caller
needs (``outputs``). Passes (passes.py) are functions Graph -> Graph.
"""

from __future__ import annotations

import math
import os

from ..primitives import GROUPS

LEAVES = ("input", "capture", "const")
ELEMENTWISE = frozenset(
    GROUPS["unary"] + GROUPS["binary"] + GROUPS["compare"] + GROUPS["logical"] + GROUPS["select"] + GROUPS["cast"]
)
REDUCE = frozenset(("sum", "max", "min"))
#: Movement ops that a strided backend does by changing metadata only (no kernel, no copy).
VIEWS = frozenset(("reshape", "permute", "expand", "slice", "flip"))
#: Ops whose result is not a function of their arguments alone.
STATEFUL = frozenset(("random_bits",))
#: A backend's fused op (ember.fused) recorded as one node, and the pick of one of its results
#: when it returns several (see trace.Tracer.fused): opaque to every pass.
FUSED = frozenset(("fused", "fused_output"))


class Var:
    """One SSA value: ``%id = op(args, params) : dtype[shape]``."""

    __slots__ = ("id", "op", "args", "params", "shape", "dtype", "where", "value", "__weakref__")

    def __init__(self, id, op, args, params, shape, dtype, where=None, value=None):
        self.id, self.op, self.args, self.params = id, op, tuple(args), dict(params)
        self.shape, self.dtype, self.where, self.value = tuple(shape), dtype, where, value

    @property
    def inputs(self):
        """The Vars among ``args`` (scalars left out)."""
        return [a for a in self.args if isinstance(a, Var)]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def aval(self):
        return self.shape, self.dtype

    def type_str(self) -> str:
        if self.dtype is None:  # a fused op's several results (see trace.Tracer.fused)
            return "tuple"
        return f"{_short(self.dtype)}[{','.join(map(str, self.shape))}]"

    def origin(self) -> str:
        """``model.py:12: h = x @ w`` — where the user's code created this value."""
        if self.where is None:
            return "an unknown line"
        filename, lineno, line = self.where
        if line is None:
            import linecache

            line = linecache.getline(filename, lineno).strip()
        return f"{os.path.basename(filename)}:{lineno}" + (f": {line}" if line else "")

    def __repr__(self):
        return f"%{self.id}"


_SHORT = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint32": "u32",
    "bool": "bool",
}


def _short(dtype) -> str:
    return _SHORT.get(str(dtype), str(dtype))


class Graph:
    """Vars in execution order, the outputs the caller needs, and the captured sources.

    ``captures[slot]`` describes where a capture Var reads its buffer at each call (see
    trace.Source). ``donate`` maps an output position to the capture Var whose buffer the
    output overwrites at the end of a call (an in-place update of a parameter or of
    optimizer state): the runner may compute the output directly into that buffer.
    """

    def __init__(self, nodes, outputs, captures=(), donate=None, name="f"):
        self.nodes = list(nodes)
        self.outputs = list(outputs)
        self.captures = list(captures)
        self.donate = dict(donate or {})
        self.name = name

    def replace(self, nodes, outputs, donate=None) -> Graph:
        return Graph(nodes, outputs, self.captures, self.donate if donate is None else donate, self.name)

    @property
    def primitives(self) -> list:
        """The nodes that compute something (no inputs, captures or constants)."""
        return [v for v in self.nodes if v.op not in LEAVES]

    def consumers(self) -> dict:
        """id(var) -> list of Vars that read it."""
        users: dict = {}
        for v in self.nodes:
            for a in v.inputs:
                users.setdefault(a.id, []).append(v)
        return users

    def format(self, groups=None) -> str:
        """A text dump: one line per node (with its fusion group) and the outputs."""
        gid = {}
        for i, g in enumerate(groups or ()):
            for v in g.nodes:
                gid[v.id] = i
        head = f"graph {self.name}: {len(self.primitives)} nodes"
        if groups is not None:
            head += f", {len(groups)} groups, {sum(g.kind != 'view' for g in groups)} kernels"
        lines = [head]
        for v in self.nodes:
            group = f" g{gid[v.id]}" if v.id in gid else ""
            lines.append(f"  {_node_str(v):<64} {v.type_str():<18}{group}".rstrip())
        lines.append(
            "  return "
            + ", ".join(
                f"{o!r}" + (f" -> {self.donate[i]!r}" if i in self.donate else "") for i, o in enumerate(self.outputs)
            )
        )
        if groups:
            lines.append("groups:")
            for i, g in enumerate(groups):
                lines.append(f"  g{i} {g}")
        return "\n".join(lines)

    __str__ = format


def _node_str(v: Var) -> str:
    if v.op == "input":
        return f"{v!r} = input[{v.params['index']}]"
    if v.op == "capture":
        return f"{v!r} = capture[{v.params['slot']}] {v.params.get('label', '')}".rstrip()
    if v.op == "const":
        return f"{v!r} = const" + (f" {v.params['repr']}" if "repr" in v.params else "")
    op, params = v.op, v.params
    if op == "fused":
        op, params = f"fused.{params['name']}", params["params"]
    args = ", ".join([repr(a) for a in v.args] + [f"{k}={p}" for k, p in params.items()])
    return f"{v!r} = {op}({args})"
