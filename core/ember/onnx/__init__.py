"""ONNX in and out: run models exported from other frameworks, export ember models.

>>> import ember.onnx                       # needs: pip install 'ember[onnx]'
>>> sorted(n for n in ("Conv", "Relu", "Gemm") if n in ember.onnx.supported_operators())
['Conv', 'Gemm', 'Relu']

``load(path_or_bytes)`` gives an ordinary :class:`ember.nn.Module`; ``export(model, inputs,
path)`` writes an ember model as ONNX through its ember.jit graph (docs/onnx.md). The ``onnx``
package is imported only when a model is read, so ``import ember`` never imports it.
"""

from __future__ import annotations

from .export import export
from .graph import OnnxModule, load
from .reader import OnnxError


def supported_operators() -> dict[str, tuple[int, int]]:
    """op_type → (first opset, last opset) that ember honours."""
    from .ops import OPS

    return {name: (first, last) for name, (_, first, last) in sorted(OPS.items())}


__all__ = ["OnnxError", "OnnxModule", "export", "load", "supported_operators"]
