"""Every runnable example in the core's docstrings runs and prints what it says."""

import doctest
import importlib
import importlib.util

import pytest

MODULES = [
    "ember",
    "ember.dtypes",
    "ember.primitives",
    "ember.primitives.record",
    "ember.primitives.shapes",
    "ember.registry",
    "ember.tensor",
    "ember.dispatch",
    "ember.autodiff",
    "ember.random",
    "ember.train.metrics",
    "ember.train.trainer",
    "ember.distributed",
    "ember.devices",
    "ember.autograd",
    "ember.recompute",
    "ember.dlpack",
    "ember.nn.summary",
    "ember.utils.data",
    "ember.train.recipes",
]
if importlib.util.find_spec("onnx"):  # the optional extra (docs/onnx.md)
    MODULES += ["ember.onnx", "ember.onnx.graph", "ember.onnx.export"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no examples"


def test_primitives_doc_is_current():
    import pathlib

    from ember.primitives import markdown

    doc = pathlib.Path(__file__).resolve().parents[1] / "docs" / "primitives.md"
    assert doc.read_text() == markdown(), "regenerate: python -m ember.primitives > docs/primitives.md"
