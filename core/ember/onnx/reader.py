"""Stage 1 of loading: bytes → a checked ONNX ModelProto, and ONNX values → ember values.

Parsing is the ``onnx`` package's job (never by hand); this module only turns what it parsed
into ember's terms: element types into ember dtypes, initializers and attributes into ember
tensors and Python values, and a malformed file into one :class:`OnnxError`.
"""

from __future__ import annotations

import os

from .. import dtypes as D
from ..errors import EmberError

# ONNX TensorProto element type → ember dtype. Types ember lacks (complex) are absent, so they
# fail with the node's name. The onnx package unpacks 4- and 2-bit tensors, one value a byte,
# and gives strings as object arrays of bytes or str (ember.text decodes them).
DTYPES = {
    1: D.float32,
    2: D.uint8,
    3: D.int8,
    4: D.uint16,
    5: D.int16,
    6: D.int32,
    7: D.int64,
    8: D.string,
    9: D.bool_,
    10: D.float16,
    11: D.float64,
    12: D.uint32,
    13: D.uint64,
    16: D.bfloat16,
    17: D.float8_e4m3fn,
    18: D.float8_e4m3fnuz,
    19: D.float8_e5m2,
    20: D.float8_e5m2fnuz,
    21: D.uint4,
    22: D.int4,
    23: D.float4_e2m1fn,
    24: D.float8_e8m0fnu,
    25: D.uint2,
    26: D.int2,
}
ONNX_TYPES = {d: code for code, d in DTYPES.items()}
TYPE_NAMES = {
    0: "undefined",
    1: "float",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "double",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float8e4m3fn",
    18: "float8e4m3fnuz",
    19: "float8e5m2",
    20: "float8e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4e2m1",
    24: "float8e8m0",
    25: "uint2",
    26: "int2",
}


class OnnxError(EmberError, ValueError):
    """A model ember cannot load or run: malformed file, unsupported operator, opset or dtype."""


def onnx_module():
    """The ``onnx`` package, or an OnnxError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise OnnxError("ember.onnx needs the onnx package: pip install 'ember[onnx]'") from None
    return onnx


def read_model(source):
    """A ModelProto from a path, bytes or a ModelProto, or an OnnxError naming what is wrong."""
    onnx = onnx_module()
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, where = bytes(source), "<bytes>"
    else:
        where = os.fspath(source)
        try:
            with open(where, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OnnxError(f"cannot read ONNX model {where}: {e.strerror}") from None
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeWarning-made errors, ...
        raise OnnxError(f"{where} is not an ONNX model (protobuf parse failed: {e})") from None
    if not model.HasField("graph") or not model.graph.node and not model.graph.output:
        raise OnnxError(f"{where} is not an ONNX model (no graph)")
    for f in model.graph.initializer:
        if f.data_location == 1:  # EXTERNAL: weights in files beside the model
            if where == "<bytes>":
                raise OnnxError(f"initializer {f.name!r} is stored in an external file; load the model by path")
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, os.path.dirname(where))
            break
    return model


def dtype_of(code: int, what: str) -> D.DType:
    """The ember dtype of ONNX element type ``code``, or an OnnxError naming ``what`` needs it."""
    try:
        return DTYPES[code]
    except KeyError:
        raise OnnxError(
            f"{what}: element type {TYPE_NAMES.get(code, code)} is not an ember dtype "
            f"(ember has {', '.join(TYPE_NAMES[c] for c in DTYPES)})"
        ) from None


def to_numpy(proto, what: str):
    """A TensorProto's values as a NumPy array of an ember dtype."""
    from onnx import numpy_helper

    dtype_of(proto.data_type, what)
    return numpy_helper.to_array(proto)


def attributes(node, what: str) -> dict:
    """A node's attributes as Python values (tensors as NumPy arrays, graphs as GraphProtos)."""
    from onnx import helper

    out = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise OnnxError(
                f"{what}: attribute {a.name!r} refers to a function attribute, which ember does not support"
            )
        if a.type == a.TENSOR:
            out[a.name] = to_numpy(a.t, f"{what}, attribute {a.name!r}")
        else:
            v = helper.get_attribute_value(a)
            if isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [s.decode() for s in v]
            out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def opsets(model) -> dict:
    """Domain → opset version ("" is the default ONNX domain; "ai.onnx" is the same)."""
    out = {}
    for o in model.opset_import:
        out["" if o.domain in ("", "ai.onnx") else o.domain] = o.version
    return out
