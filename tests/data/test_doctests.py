"""The examples in ember.data's docstrings run and say what they show."""

import doctest
import importlib

import pytest

MODULES = ["__init__", "cifar", "dataset", "download", "idx", "loader", "mnist", "safe_pickle", "sources", "transforms"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module("ember.data" + ("" if name == "__init__" else "." + name))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
