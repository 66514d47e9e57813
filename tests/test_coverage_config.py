"""pyproject.toml's coverage exclusions, read by coverage.py's own parser: every @numba.njit
kernel of the numba plugin is left out of the measure whole (it runs compiled, where line
tracing cannot see it), and the njit pattern leaves out nothing else."""

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "numba" / "ember_numba"
NJIT = r"^[ \t]*@numba\.njit\b"


def _excluded(text, patterns):
    """The lines coverage.py leaves out of ``text`` under ``patterns`` (as its report does)."""
    from coverage.misc import join_regex
    from coverage.parser import PythonParser

    parser = PythonParser(text=text, exclude=join_regex(patterns))
    parser.parse_source()
    return parser.excluded


def _kernels(text):
    """{name: (first line, last line, its statements' lines)} of the functions decorated numba.njit."""
    found = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
            if "numba.njit" in names:
                body = {s.lineno for s in ast.walk(node) if isinstance(s, ast.stmt) and s is not node}
                found[node.name] = (node.decorator_list[0].lineno, node.end_lineno, body)
    return found


def test_numba_kernels_and_nothing_else_are_excluded_from_coverage():
    pytest.importorskip("coverage")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["coverage"]["report"]["exclude_also"]
    assert NJIT in patterns
    others = [p for p in patterns if p != NJIT]
    kernels = 0
    for path in sorted(PLUGIN.rglob("*.py")):
        text = path.read_text()
        found = _kernels(text)
        kernels += len(found)
        by_njit = _excluded(text, patterns) - _excluded(text, others)
        inside = set()
        for name, (first, last, body) in found.items():
            assert body <= by_njit, f"{path.name}: {name}'s body is measured: {sorted(body - by_njit)}"
            inside |= set(range(first, last + 1))
        # what the pattern leaves out lies within the kernels: nothing the interpreter runs besides their def
        assert by_njit <= inside, f"{path.name}: excluded outside a kernel: {sorted(by_njit - inside)}"
    assert kernels > 30  # the plugin's kernels were found (dozens)
