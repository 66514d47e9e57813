"""The runnable examples in ember.jit's docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "ember.jit",
    "ember.jit.api",
    "ember.jit.passes",
    "ember.jit.trace",
    "ember.jit.pytree",
    "ember.jit.leaks",
    "ember.jit.buffers",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no examples"
