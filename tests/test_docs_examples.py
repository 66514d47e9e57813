"""Every python code block in README.md and docs/*.md runs as written.

The convention (also in docs/from-pytorch.md, "Docs examples"):

- A page's ```python blocks run in order, in one namespace per page, so a later block may
  use what an earlier one defined. A block whose first line starts with ``>>>`` is a doctest
  and its output is checked too.
- A line ``<!-- docs-test: requires NAME[, NAME] -->`` right above a block runs it only where
  those modules import (and, for ``gpu``, where ember.cuda.is_available()); otherwise the block
  is skipped with the reason. ``<!-- docs-test: skip REASON -->`` never runs it (say why).
- ``<!-- docs-test: file NAME.py -->`` writes the block to NAME.py in the page's working
  directory instead of running it, for a page that tells the reader to save a module and import it.
- Each page runs in a fresh temporary working directory, so files it writes go away.
"""

import doctest
import importlib.util
import pathlib
import re
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
# A fence may be indented (a block inside a list item); its marker sits on the line above it.
_BLOCK = re.compile(
    r"(?:^[ \t]*<!-- docs-test: (?P<mark>[^>]*?) -->\n)?^(?P<indent>[ \t]*)```python\n"
    r"(?P<code>.*?)^(?P=indent)```",
    re.DOTALL | re.MULTILINE,
)


def blocks(page):
    """``[(line number, marker or None, code)]`` of a page's python blocks."""
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start("code")) + 1, m.group("mark"), textwrap.dedent(m.group("code")))
        for m in _BLOCK.finditer(text)
    ]


def _missing(mark):
    kind, _, rest = (mark or "").partition(" ")
    if kind == "skip":
        return rest or "marked skip"
    if kind == "file":
        return None
    if kind == "requires":
        for name in (n.strip() for n in rest.split(",")):
            if name == "gpu":
                import ember

                if not ember.cuda.is_available():
                    return "needs a usable CUDA backend"
            elif getattr(importlib.util.find_spec(name), "origin", None) is None:
                return f"needs {name}"  # (a folder of that name on sys.path, as tests/onnx, is not it)
    elif mark:
        raise ValueError(f"unknown docs-test marker {mark!r}")
    return None


PAGES_WITH_CODE = [p for p in PAGES if blocks(p)]


@pytest.fixture
def registries():
    """A page may define a primitive and give NumPy an implementation (writing-a-backend.md
    does): afterwards the registries hold what they held before, for the tests that follow."""
    import ember.primitives as package
    from ember.backends.numpy import backend
    from ember.primitives import record

    saved = (
        dict(record.PRIMITIVES),
        {g: list(ps) for g, ps in record.GROUPS.items()},
        set(record.NON_DIFFERENTIABLE),
        dict(backend.IMPLS),
        set(vars(package)),
    )
    yield
    primitives, groups, non_diff, impls, names = saved
    for current, before in ((record.PRIMITIVES, primitives), (record.GROUPS, groups), (backend.IMPLS, impls)):
        current.clear()
        current.update(before)
    record.NON_DIFFERENTIABLE.intersection_update(non_diff)
    for name in set(vars(package)) - names:
        if isinstance(getattr(package, name), record.Primitive):  # defprim's ember.primitives.NAME
            delattr(package, name)


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.name)
def test_page_examples_run(page, tmp_path, monkeypatch, registries):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = {"__name__": f"docs_{page.stem}"}
    skipped = []
    for line, mark, code in blocks(page):
        why = _missing(mark)
        if why:
            skipped.append(f"line {line}: {why}")
            continue
        if mark and mark.startswith("file "):
            name = mark.split(" ", 1)[1].strip()
            (tmp_path / name).write_text(code)
            module = pathlib.Path(name).stem
            monkeypatch.setitem(sys.modules, module, None)  # gone again after the page: a fresh import
            del sys.modules[module]
            continue
        where = f"{page.relative_to(ROOT)}:{line}"
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, namespace, where, where, line)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            runner.run(test, clear_globs=False)
            assert runner.failures == 0, f"doctest block at {where} failed (output above)"
            namespace.update(test.globs)
        else:
            exec(compile(code, where, "exec"), namespace)
    if skipped:
        pytest.skip("; ".join(skipped))


def test_every_marker_is_known():
    for page in PAGES:
        for _, mark, _ in blocks(page):
            if mark:
                assert mark.split(" ")[0] in ("skip", "requires", "file"), f"{page.name}: {mark}"
                assert mark.split(" ")[0] != "file" or mark.endswith(".py"), f"{page.name}: file needs NAME.py"
                assert mark.split(" ")[0] != "skip" or len(mark.split(" ")) > 1, f"{page.name}: skip needs a reason"
