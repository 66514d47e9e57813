"""The runnable examples in ember.onnx's docstrings."""
import doctest
import importlib

import pytest

pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx

MODULES = ["ember.onnx", "ember.onnx.graph", "ember.onnx.export"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no examples"
