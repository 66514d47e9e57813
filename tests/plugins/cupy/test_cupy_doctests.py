"""The runnable examples in ember-cupy's docstrings run and print what they say (none needs a GPU)."""

import doctest
import importlib

import pytest

MODULES = [
    "ember_cupy.render",
    "ember_cupy.kernels",
    "ember_cupy.fusion",
    "ember_cupy.device",
    "ember_cupy.backend",
    "ember_cupy.storage",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no examples"
