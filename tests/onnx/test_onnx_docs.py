"""docs/onnx.md's examples run as written: its Python blocks in order, then its `ember` commands."""

import importlib.util
import pathlib
import re
import shlex

import pytest

pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "onnx.md"


def blocks(lang):
    """The page's blocks in ``lang``, leaving out those marked ``docs-test: requires X`` for an X
    that is not installed (tests/test_docs_examples.py reports those as skipped)."""
    found = re.findall(rf"(?:<!-- docs-test: requires ([^>]*?) -->\n)?```{lang}\n(.*?)```", DOC.read_text(), re.DOTALL)
    have = lambda names: all(importlib.util.find_spec(n.strip()) for n in names.split(",") if n.strip())  # noqa: E731
    return [code for needs, code in found if have(needs)]


def test_python_examples_and_commands_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scope = {}
    for code in blocks("python"):
        exec(compile(code, str(DOC), "exec"), scope)  # noqa: S102 - the page's own examples
    from ember.cli import main

    commands = [line for b in blocks("bash") for line in b.splitlines() if line.startswith("ember ")]
    assert commands
    for line in commands:
        assert main(shlex.split(line.split("#")[0])[1:]) == 0, line
    assert "output: shape (1, 10) float32" in capsys.readouterr().out
