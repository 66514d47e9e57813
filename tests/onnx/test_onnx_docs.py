"""docs/onnx.md's examples run as written: its Python blocks in order, then its `ember` commands."""

import pathlib
import re
import shlex

import pytest

pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "onnx.md"


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.DOTALL)


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
