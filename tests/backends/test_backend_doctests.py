"""The backend folders' entry-point modules and their examples."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    [
        "ember.backends.numpy",
        "ember.backends.python",
        "ember.backends.webgpu",
        "ember.backends.numpy.bfloat16",
        "ember.backends.numpy.float8",
        "ember.backends.numpy.conv",
        "ember.backends.numpy.winograd",
        "ember.backends.python.backend",
        "ember.backends.webgpu.backend",
    ],
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
