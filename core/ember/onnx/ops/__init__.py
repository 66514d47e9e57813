"""The operator table: ONNX op_type → (handler, first opset, last opset honoured).

Each family module holds one table and one small function per operator (or per group of
operators that differ only in a constant). A handler is ``fn(node, *inputs) -> Tensor | tuple``:
inputs are ember tensors (``None`` for an omitted optional input), attributes are read from
``node.attr(name, default)``, and ``node.version`` is the operator's schema version at the
model's opset, for handlers whose semantics changed between versions.
"""

from __future__ import annotations

from ..reader import OnnxError
from . import (
    attention,
    control,
    elementwise,
    image,
    misc,
    ml,
    nn,
    optional,
    quant,
    random,
    reduce,
    rnn,
    sequence,
    shape,
    strings,
    svm,
    training,
)
from .common import LATEST

FAMILY: dict = {}  # op_type → family module name (the pass table's categories)


def _table(*families, attribute="OPS") -> dict:
    """Merge the families' tables; an entry without a last opset honours up to LATEST."""
    out = {}
    for family in families:
        for name, entry in getattr(family, attribute).items():
            FAMILY[name] = family.__name__.rsplit(".", 1)[1]
            out[name] = entry if len(entry) == 3 else (*entry, LATEST)
    return out


OPS = _table(
    elementwise, reduce, shape, nn, rnn, attention, image, control, quant, sequence, optional, strings, random, misc
)
# Each domain has its own table: the default one, the classic-ML domain's numeric operators, the
# preview domain (FlexAttention) and the training domain's optimizer steps.
DOMAINS = {
    "": OPS,
    "ai.onnx.ml": _table(ml, svm),
    "ai.onnx.preview": _table(attention, attribute="PREVIEW_OPS"),
    "ai.onnx.preview.training": _table(training),
}

# Nodes that draw random numbers: never folded at load.
RANDOM = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
    "Dropout",
}


def lookup(node):
    """``(handler, schema version)`` for a node, or an OnnxError naming what is unsupported."""
    table = DOMAINS.get(node.domain)
    if table is None:
        raise node.error(
            f"operator domain {node.domain!r} is not supported (ember runs {', '.join(repr(d) for d in DOMAINS)})"
        )
    if node.opset is None:
        raise node.error(f"the model imports no opset for the domain {node.domain!r}")
    entry = table.get(node.op_type)
    if entry is None:
        raise node.error("operator not supported by ember")
    fn, first, last = entry
    if not first <= node.opset <= last:
        raise node.error(
            f"opset {node.opset} is outside the range ember honours for {node.op_type} ({first} to {last})"
        )
    from onnx import defs

    try:
        version = defs.get_schema(node.op_type, node.opset, node.domain).since_version
    except defs.SchemaError:  # an op ember knows that the pinned onnx does not
        version = node.opset
    return fn, version


__all__ = ["FAMILY", "OPS", "RANDOM", "OnnxError", "lookup"]
