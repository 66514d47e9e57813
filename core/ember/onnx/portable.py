"""An imported ONNX model in ember's own files: a JSON graph and safetensors, loadable without ``onnx``.

Pyodide has no ``onnx`` package, so the browser build (``python -m ember.wasm build SITE --onnx
MODEL``) converts the model where ``onnx`` is installed: :func:`save` loads it with
:func:`ember.onnx.load` (checked, constant subgraphs folded) and writes what is left to run —
the nodes with their attributes, the schema version each handler honours and the body graphs of
If, Loop and Scan — as JSON, and the parameters, the folded constants, the bodies' constants and
any tensor attribute as one safetensors blob (string tensors, which safetensors has no code for,
as lists of str in its metadata: :func:`dump_tensors`).
:func:`restore` rebuilds the same :class:`~ember.onnx.OnnxModule` from those two with the
standard library only (no ``onnx``, no numpy), on any backend.

>>> import ember, ember.onnx
>>> from onnx import helper, TensorProto, numpy_helper
>>> import numpy as np
>>> w = numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")
>>> g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
>>> graph, blob = save(helper.make_model(g))
>>> graph["inputs"], [n["op_type"] for n in graph["nodes"]]
([{'name': 'x', 'shape': [None, 2], 'dtype': 'float32'}], ['MatMul'])
>>> restore(graph, blob, "python")(ember.tensor([[1.0, 2.0]], backend="python")).tolist()
[[1.5, 1.5, 1.5]]
"""

from __future__ import annotations

import json

from .. import autodiff, dtypes as D
from ..io import load_bytes, save_bytes
from ..io.numpy_io import tensor_bytes, tensor_from_bytes
from ..registry import get_backend
from ..tensor import tensor
from .graph import Node, OnnxModule, Program
from .ops import DOMAINS
from .reader import DTYPES, OnnxError, read_model

FORMAT = "ember.onnx-graph"


# ----------------------------------------------------------------------------- ONNX -> ember's files
def save(source) -> tuple:
    """``(graph, blob)``: the JSON-able graph and the safetensors bytes of an ONNX model (a
    path, bytes or a ModelProto). Needs ``onnx``. Body graphs (If, Loop, Scan, SequenceMap)
    go with their node, their own constants in the blob."""
    proto = read_model(source)
    module = OnnxModule(proto)
    tensors: dict = {}
    nodes = _nodes(module.program, tensors, "")
    with autodiff.no_grad():
        params = dict(module.named_parameters())
        for name, t in params.items():
            tensors[f"parameter/{name}"] = t
        for name, t in module._buffers.items():
            tensors[f"constant/{name}"] = t
    graph = {
        "format": FORMAT,
        "version": 1,
        "opsets": module.opsets,
        "inputs": [_value_info(v) for v in proto.graph.input if v.name in module.input_names],
        "outputs": module.output_names,
        "parameters": list(params),
        "constants": list(module._buffers),
        "nodes": nodes,
    }
    return graph, dump_tensors(tensors)


def dump_tensors(tensors: dict) -> bytes:
    """The safetensors bytes of ``{key: Tensor}``. A tensor safetensors cannot hold as it is (the
    4- and 2-bit integers have no code; F4 packs float4 two values a byte, so an odd count does
    not fit) is written as its values in a wider dtype, which is exact, and the metadata's
    ``recast`` names the dtype :func:`load_tensors` casts it back to. A string tensor (safetensors
    has no string dtype) goes into the metadata's ``texts`` as its shape and a list of str.

    >>> import ember
    >>> load_tensors(dump_tensors({"w": ember.tensor([-8, 7]).to(ember.int4)}), "python")["w"]
    tensor([-8, 7], dtype=int4, backend='python')
    """
    from ..io.tensorbytes import UNCODED

    blobs, recast, texts = {}, {}, {}
    with autodiff.no_grad():
        for key, t in tensors.items():
            if t.dtype is D.string:
                texts[key] = {"shape": list(t.shape), "values": t.reshape(-1).tolist()}
                continue
            wider = UNCODED.get(t.dtype.name) or (
                "float32" if t.dtype.name == "float4_e2m1fn" and t.numel() % 2 else None
            )
            if wider:
                recast[key], t = t.dtype.name, t.to(wider)
            blobs[key] = tensor_bytes(t)
    return save_bytes(blobs, {"format": FORMAT, "recast": json.dumps(recast), "texts": json.dumps(texts)})


def load_tensors(blob, backend=None, source: str = "<onnx graph weights>") -> dict:
    """``{key: Tensor}`` on ``backend`` from :func:`dump_tensors`' bytes (or any safetensors)."""
    tensors, metadata = load_bytes(blob, source=source)
    backend = get_backend(backend)
    recast = json.loads((metadata or {}).get("recast", "{}"))
    texts = json.loads((metadata or {}).get("texts", "{}"))
    out = {key: tensor_from_bytes(tb, backend) for key, tb in tensors.items()}
    out = {key: t.to(recast[key]) if key in recast else t for key, t in out.items()}
    for key, text in texts.items():
        out[key] = tensor(text["values"], dtype=D.string, backend=backend).reshape(text["shape"])
    return out


def _nodes(program, tensors: dict, prefix: str) -> list:
    """The JSON records of ``program``'s nodes; tensor attributes and body constants go into
    ``tensors`` under keys that ``prefix`` keeps apart per body."""
    out = []
    for i, node in enumerate(program.nodes):
        attrs, tensor_attrs, graphs = {}, {}, {}
        for name, value in node.attrs.items():
            if name in node.graphs:
                graphs[name] = _body(node.graphs[name], tensors, f"{prefix}{i}/{name}/")
            elif hasattr(value, "dtype") and hasattr(value, "shape"):  # a tensor attribute
                key = f"attribute/{prefix}{i}/{name}"
                tensors[key] = tensor(value)
                tensor_attrs[name] = key
            elif hasattr(value, "SerializeToString"):
                continue  # a TypeProto (Optional's `type`): no handler reads it
            else:
                attrs[name] = value
        record = {
            "op_type": node.op_type,
            "domain": node.domain,
            "name": node.name,
            "inputs": node.inputs,
            "outputs": node.outputs,
            "opset": node.opset,
            "version": node.version,
            "attrs": attrs,
            "tensor_attrs": tensor_attrs,
        }
        if graphs:
            record["graphs"] = graphs
        out.append(record)
    return out


def _body(program, tensors: dict, prefix: str) -> dict:
    constants = {}
    for name, t in program.constants.items():
        constants[name] = key = f"body/{prefix}{name}"
        tensors[key] = t
    return {
        "inputs": program.inputs,
        "outputs": program.outputs,
        "constants": constants,
        "nodes": _nodes(program, tensors, prefix),
    }


def _value_info(vi) -> dict:
    """Name, shape and dtype of a graph input; ``kind`` ("sequence", "optional",
    "optional sequence") when the tensor comes wrapped."""
    t, wrapped = vi.type, []
    while t.WhichOneof("value") in ("optional_type", "sequence_type"):
        kind = t.WhichOneof("value")
        wrapped.append(kind.split("_")[0])
        t = getattr(t, kind).elem_type
    tt = t.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    info = {"name": vi.name, "shape": shape, "dtype": DTYPES[tt.elem_type].name}
    return {**info, "kind": " ".join(wrapped)} if wrapped else info


# ----------------------------------------------------------------------------- ember's files -> Module
def restore(graph: dict, blob, backend=None) -> OnnxModule:
    """The :class:`OnnxModule` that :func:`save` wrote, its tensors on ``backend`` (default:
    the current one). Standard library only: this runs in Pyodide."""
    found = graph.get("format") if isinstance(graph, dict) else None
    if found != FORMAT:
        raise OnnxError(f"not an ember ONNX graph (format {found!r}, expected {FORMAT!r})")
    backend = get_backend(backend)
    tensors = load_tensors(blob, backend)

    def get(key):
        if key not in tensors:
            raise OnnxError(f"the graph's weights lack {key!r}")
        return tensors[key]

    program = _program([v["name"] for v in graph["inputs"]], graph["outputs"], {}, graph["nodes"], get)
    module = OnnxModule.__new__(OnnxModule)
    super(OnnxModule, module).__init__()
    module._assemble(
        {n: get(f"parameter/{n}") for n in graph["parameters"]},
        {n: get(f"constant/{n}") for n in graph["constants"]},
        program,
        dict(graph["opsets"]),
        program.inputs,
    )
    return module


def _program(inputs, outputs, constants: dict, nodes: list, get) -> Program:
    program = Program.__new__(Program)
    program.graph = None
    program.constants = {name: get(key) for name, key in constants.items()}
    program.inputs, program.outputs = list(inputs), list(outputs)
    program.nodes = [_node(record, get, program) for record in nodes]
    return program


def _node(record: dict, get, program) -> Node:
    node = Node.__new__(Node)
    node.op_type, node.domain, node.name = record["op_type"], record["domain"], record["name"]
    node.inputs, node.outputs = list(record["inputs"]), list(record["outputs"])
    node.opset, node.version = record["opset"], record["version"]
    node.attrs = dict(record["attrs"])
    for name, key in record["tensor_attrs"].items():
        t = get(key)  # handlers read tensor attributes as arrays where numpy is
        node.attrs[name] = _array(t)
    node.graphs = {
        name: _program(b["inputs"], b["outputs"], b["constants"], b["nodes"], get)
        for name, b in record.get("graphs", {}).items()
    }
    node.scope, node.program, node.memo = None, program, {}
    entry = DOMAINS.get(node.domain, {}).get(node.op_type)
    if entry is None:
        raise node.error("operator not supported by this ember")
    node.handler = entry[0]
    return node


def _array(t):
    try:
        return t.numpy()
    except ImportError:  # no numpy (Pyodide): the tensor itself
        return t
