"""``ember.onnx.export``: an ember model → an ONNX file, through its ember.jit graph.

The model is traced once (``jit_graph.trace``); each primitive node becomes one or a few ONNX
nodes by the table ``EMIT`` (one small function per primitive family). Parameters become
initializers named as in ``state_dict``; Python scalars and shape arguments become constant
initializers. Shapes are the example inputs' (static). NumPy and ``onnx`` are imported only
while exporting, so ``import ember.onnx`` works where neither is (Pyodide, ember.onnx.portable).
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike
from typing import TYPE_CHECKING, Any

from .. import dtypes as D
from .jit_graph import Ref, trace
from .reader import ONNX_TYPES, OnnxError, onnx_module

if TYPE_CHECKING:
    from ..tensor import Tensor

MIN_OPSET, DEFAULT_OPSET = 13, 17


class Builder:
    """Collects ONNX nodes and initializers while the graph's nodes are emitted."""

    def __init__(self, opset):
        self.opset, self.nodes, self.inits, self.dtypes = opset, [], [], {}
        self._n = 0

    def name(self, vid) -> str:
        return f"v{vid}"

    def const(self, value, dtype) -> str:
        """A Constant node holding ``value`` (a scalar or array) of ember ``dtype``: not an
        initializer, so that a re-import keeps it a constant, not a trainable parameter."""
        import numpy as np
        from onnx import numpy_helper

        self._n += 1
        name = f"c{self._n}"
        tensor = numpy_helper.from_array(np.asarray(value, dtype=str(dtype)), name)
        return self.node("Constant", [], name, value=tensor)

    def ints(self, values) -> str:
        return self.const([int(v) for v in values], D.int64)

    def node(self, op, inputs, output, **attrs):
        from onnx import helper

        self._n += 1
        self.nodes.append(helper.make_node(op, inputs, [output], name=f"{op}_{self._n}", **attrs))
        return output

    def tmp(self) -> str:
        self._n += 1
        return f"t{self._n}"

    def arg(self, a, dtype) -> str:
        """A node argument: a value's name, or a Python scalar as a constant of ``dtype``."""
        return self.name(a) if isinstance(a, Ref) else self.const(a, dtype)


# ---------------------------------------------------------------- emitters, one per family
UNARY = {
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "sin": "Sin",
    "cos": "Cos",
    "tanh": "Tanh",
    "sqrt": "Sqrt",
    "reciprocal": "Reciprocal",
    "abs": "Abs",
    "sign": "Sign",
    "floor": "Floor",
    "erf": "Erf",
    "logical_not": "Not",
}
BINARY = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "pow": "Pow",
    "maximum": "Max",
    "minimum": "Min",
    "eq": "Equal",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
    "logical_and": "And",
    "logical_or": "Or",
    "logical_xor": "Xor",
}
REDUCE = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}


def _operand_dtype(b, args, dtype):
    for a in args:
        if isinstance(a, Ref):
            return b.dtypes[a]
    return dtype


def unary(b, op, args, p, out, shape, dtype):
    b.node(UNARY[op], [b.name(args[0])], out)


def binary(b, op, args, p, out, shape, dtype):
    od = _operand_dtype(b, args, dtype)
    ins = [b.arg(a, od) for a in args]
    if op == "ne":
        b.node("Not", [b.node("Equal", ins, b.tmp())], out)
    else:
        b.node(BINARY[op], ins, out)


def where(b, op, args, p, out, shape, dtype):
    b.node("Where", [b.arg(args[0], D.bool_), b.arg(args[1], dtype), b.arg(args[2], dtype)], out)


def cast(b, op, args, p, out, shape, dtype):
    b.node("Cast", [b.name(args[0])], out, to=ONNX_TYPES[D.get(p["dtype"])])


def reduce(b, op, args, p, out, shape, dtype):
    axes, keep = list(p["axes"]), int(bool(p.get("keepdims", False)))
    x = b.name(args[0])
    if not axes:
        b.node("Identity", [x], out)
    elif op == "sum" or b.opset >= 18:
        b.node(REDUCE[op], [x, b.ints(axes)], out, keepdims=keep)
    else:
        b.node(REDUCE[op], [x], out, axes=axes, keepdims=keep)


def argmax(b, op, args, p, out, shape, dtype):
    b.node("ArgMax", [b.name(args[0])], out, axis=p["axis"], keepdims=int(bool(p.get("keepdims", False))))


def reshape(b, op, args, p, out, shape, dtype):
    b.node("Reshape", [b.name(args[0]), b.ints(shape)], out)


def permute(b, op, args, p, out, shape, dtype):
    b.node("Transpose", [b.name(args[0])], out, perm=list(p["axes"]))


def expand(b, op, args, p, out, shape, dtype):
    b.node("Expand", [b.name(args[0]), b.ints(shape)], out)


def pad(b, op, args, p, out, shape, dtype):
    widths = p["widths"]
    pads = [lo for lo, _ in widths] + [hi for _, hi in widths]
    b.node("Pad", [b.name(args[0]), b.ints(pads), b.const(p.get("value", 0), dtype)], out)


def slice_(b, op, args, p, out, shape, dtype):
    n = len(p["starts"])
    b.node(
        "Slice", [b.name(args[0]), b.ints(p["starts"]), b.ints(p["stops"]), b.ints(range(n)), b.ints(p["steps"])], out
    )


def flip(b, op, args, p, out, shape, dtype):
    axes = list(p["axes"])
    b.node(
        "Slice",
        [
            b.name(args[0]),
            b.ints([-1] * len(axes)),
            b.ints([-(2**63)] * len(axes)),
            b.ints(axes),
            b.ints([-1] * len(axes)),
        ],
        out,
    )


def concatenate(b, op, args, p, out, shape, dtype):
    b.node("Concat", [b.name(a) for a in args], out, axis=p["axis"])


def take(b, op, args, p, out, shape, dtype):
    b.node("Gather", [b.name(args[0]), b.name(args[1])], out, axis=p["axis"])


def index_add(b, op, args, p, out, shape, dtype):
    # ScatterElements wants indices of the values' shape: broadcast them along the axis.
    x, idx, val = args
    a = p["axis"]
    vshape = b.shapes[val]
    ishape = b.shapes[idx]
    if len(ishape) != 1:
        raise OnnxError("export: index_add with multi-dimensional indices is not supported")
    view = [1] * len(vshape)
    view[a] = ishape[0]
    i = b.node("Reshape", [b.name(idx), b.ints(view)], b.tmp())
    i = b.node("Expand", [i, b.ints(vshape)], b.tmp())
    b.node("ScatterElements", [b.name(x), i, b.name(val)], out, axis=a, reduction="add")


def matmul(b, op, args, p, out, shape, dtype):
    b.node("MatMul", [b.name(args[0]), b.name(args[1])], out)


def conv2d(b, op, args, p, out, shape, dtype):
    ph, pw = p.get("padding", (0, 0))
    b.node(
        "Conv",
        [b.name(args[0]), b.name(args[1])],
        out,
        strides=list(p.get("stride", (1, 1))),
        pads=[ph, pw, ph, pw],
        dilations=list(p.get("dilation", (1, 1))),
        group=p.get("groups", 1),
    )


def full(b, op, args, p, out, shape, dtype):
    import numpy as np

    b.node("Identity", [b.const(np.full(shape, p["value"]), dtype)], out)


def arange(b, op, args, p, out, shape, dtype):
    import numpy as np

    b.node("Identity", [b.const(np.arange(p["start"], p["stop"], p["step"]), dtype)], out)


def _needs(b, opset, what):
    if b.opset < opset:
        raise OnnxError(f"export: {what} needs opset {opset} or newer (exporting at {b.opset})")


def topk(b, op, args, p, out, shape, dtype):
    # ONNX TopK takes the lower index first among equal values, the primitives' rule
    k = p["k"] if op == "argtopk" else b.shapes[args[0]][p["axis"]]
    largest = p.get("largest", True) if op == "argtopk" else p.get("descending", False)
    b.nodes.append(
        _helper().make_node(
            "TopK",
            [b.name(args[0]), b.ints([k])],
            [b.tmp(), out],
            name=f"TopK_{b.tmp()}",
            axis=p["axis"],
            largest=int(bool(largest)),
            sorted=1,
        )
    )


def cumsum(b, op, args, p, out, shape, dtype):
    b.node("CumSum", [b.name(args[0]), b.const(p["axis"], D.int64)], out, reverse=int(bool(p.get("reverse", False))))


BITWISE = {"bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr", "bitwise_xor": "BitwiseXor"}


def bitwise(b, op, args, p, out, shape, dtype):
    _needs(b, 18, "a bitwise operator")
    if op == "bitwise_not":
        b.node("BitwiseNot", [b.name(args[0])], out)
    elif op in BITWISE:
        b.node(BITWISE[op], [b.arg(a, dtype) for a in args], out)
    elif dtype.kind != "u":  # ONNX's BitShift is for unsigned integers
        raise OnnxError(f"export: {op} of {dtype} has no ONNX form (BitShift takes unsigned integers)")
    else:
        b.node(
            "BitShift",
            [b.arg(a, dtype) for a in args],
            out,
            direction="LEFT" if op == "bitwise_left_shift" else "RIGHT",
        )


def bitcast(b, op, args, p, out, shape, dtype):
    _needs(b, 26, "bitcast (BitCast)")
    b.node("BitCast", [b.name(args[0])], out, to=ONNX_TYPES[D.get(p["dtype"])])


def remainder(b, op, args, p, out, shape, dtype):
    ins = [b.arg(a, dtype) for a in args]
    if dtype.kind != "f":
        b.node("Mod", ins, out, fmod=0)
        return
    # ONNX's Mod wants fmod=1 for floats: a - floor(a / b) * b
    q = b.node("Floor", [b.node("Div", ins, b.tmp())], b.tmp())
    b.node("Sub", [ins[0], b.node("Mul", [q, ins[1]], b.tmp())], out)


def _helper():
    from onnx import helper

    return helper


EMIT = {
    **dict.fromkeys(UNARY, unary),
    **dict.fromkeys(list(BINARY) + ["ne"], binary),
    **dict.fromkeys(REDUCE, reduce),
    "where": where,
    "cast": cast,
    "argmax": argmax,
    "reshape": reshape,
    "permute": permute,
    "expand": expand,
    "pad": pad,
    "slice": slice_,
    "flip": flip,
    "concatenate": concatenate,
    "take": take,
    "index_add": index_add,
    "matmul": matmul,
    "conv2d": conv2d,
    "full": full,
    "arange": arange,
    "argsort": topk,
    "argtopk": topk,
    "cumsum": cumsum,
    "bitcast": bitcast,
    "remainder": remainder,
    **dict.fromkeys(
        ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift"),
        bitwise,
    ),
}


def to_model(model, example_inputs, opset=DEFAULT_OPSET):
    """The ONNX ModelProto of ``model`` traced on ``example_inputs``."""
    onnx = onnx_module()
    from onnx import helper, numpy_helper

    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise OnnxError(
            f"export: opset {opset} is not supported (ember writes {MIN_OPSET} to {onnx.defs.onnx_opset_version()})"
        )
    t = trace(model, example_inputs)
    b = Builder(opset)
    b.shapes = {}
    inputs, outputs = [], []
    for _i, (vid, shape, dtype) in enumerate(t.inputs):
        b.dtypes[vid], b.shapes[vid] = dtype, shape
        inputs.append(helper.make_tensor_value_info(b.name(vid), ONNX_TYPES[dtype], list(shape)))
    seen = {}
    for vid, name, tensor in t.params:
        b.dtypes[vid], b.shapes[vid] = tensor.dtype, tuple(tensor.shape)
        if name in seen:  # one tensor captured twice (tied weights)
            b.node("Identity", [seen[name]], b.name(vid))
            continue
        seen[name] = name
        b.inits.append(numpy_helper.from_array(tensor.detach().numpy(), name))
        b.node("Identity", [name], b.name(vid))
    for vid, value in t.consts:
        b.dtypes[vid], b.shapes[vid] = D.get(value.dtype.name), tuple(value.shape)
        b.node("Identity", [b.const(value, D.get(value.dtype.name))], b.name(vid))
    for vid, op, args, params, shape, dtype, origin in t.nodes:
        emit = EMIT.get(op)
        if emit is None:
            raise OnnxError(f"export: primitive {op!r} (made at {origin}) has no ONNX form yet")
        b.dtypes[vid], b.shapes[vid] = dtype, shape
        emit(b, op, args, params, b.name(vid), shape, dtype)
    for i, vid in enumerate(t.outputs):
        name = f"output_{i}" if len(t.outputs) > 1 else "output"
        b.node("Identity", [b.name(vid)], name)
        outputs.append(helper.make_tensor_value_info(name, ONNX_TYPES[b.dtypes[vid]], list(b.shapes[vid])))
    graph = helper.make_graph(b.nodes, type(model).__name__, inputs, outputs, b.inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ember")
    proto.ir_version = min(proto.ir_version, 10)  # what onnxruntime 1.32 reads
    onnx.checker.check_model(proto)
    return proto


def export(
    model: Callable[..., Any],
    example_inputs: Tensor | tuple[Tensor, ...],
    path: str | PathLike[str] | None = None,
    opset: int = DEFAULT_OPSET,
) -> bytes | None:
    """Write ``model`` as ONNX to ``path`` (or return the bytes when path is None).

    ``example_inputs`` is a tensor or a tuple of tensors; the file's input shapes are theirs.

    >>> import ember, ember.onnx
    >>> model = ember.nn.Sequential(ember.nn.Linear(4, 3), ember.nn.ReLU())
    >>> blob = ember.onnx.export(model, ember.randn(2, 4))
    >>> again = ember.onnx.load(blob)
    >>> x = ember.randn(2, 4)
    >>> bool(((again(x) - model(x)).abs().max() < 1e-6).item())
    True
    """
    from ..tensor import Tensor

    inputs = (example_inputs,) if isinstance(example_inputs, Tensor) else tuple(example_inputs)
    proto = to_model(model, inputs, opset)
    data = proto.SerializeToString()
    if path is None:
        return data
    from ..io.atomic import atomic_write

    atomic_write(path, lambda f: f.write(data))
    return None
