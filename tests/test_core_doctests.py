"""Every runnable example in the docstrings of ember and its built-in backends runs and prints what it says."""

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import ember
import ember.backends

# Every module of the package and its built-in backends (a folder of their own), found rather
# than listed, so a new module's examples run too. Skipped: ``__main__`` modules (running them
# runs a program) and the optional ONNX support without ``onnx`` (docs/onnx.md).
FOUND = [
    *pkgutil.walk_packages(ember.__path__, "ember."),
    *pkgutil.walk_packages(ember.backends.__path__, "ember.backends."),
]
MODULES = sorted(
    {m.name for m in FOUND}
    - {m.name for m in FOUND if m.name.endswith("__main__")}
    - (
        {m.name for m in FOUND if m.name.startswith("ember.onnx")}
        if importlib.util.find_spec("onnx") is None
        else set()
    )
)


@pytest.mark.filterwarnings(
    "ignore:ember.backends.numpy_backend moved:DeprecationWarning"
)  # an old name kept a version
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_the_walk_finds_the_core_modules():
    assert {"ember.tensor", "ember.io.tensorbytes", "ember.train.checks", "ember.backends.python.storage"} <= set(
        MODULES
    )


def test_primitives_doc_is_current():
    import pathlib

    from ember.primitives import markdown

    doc = pathlib.Path(__file__).resolve().parents[1] / "docs" / "primitives.md"
    assert doc.read_text() == markdown(), "regenerate: python -m ember.primitives > docs/primitives.md"
