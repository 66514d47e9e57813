"""The import direction DESIGN.md promises, checked by walking the source's syntax trees.

- The core (``core/ember``) never imports a backend (``ember.backends.*``) or a plugin: the
  built-in backends reach the registry through ember's own entry points, as plugins do.
- The fused-op mechanism (``ember.fused``) never imports ``ember.nn`` or ``ember.optim``:
  they register their ops with it.
- No import cycles among the core's modules.
- Plugins import only the installed ``ember``: never the repository's tests/ or benchmarks/.

Every import counts, the ones inside functions too: a lazy import still ties the two modules
together, it only moves the moment. An edge goes to the module named (``from .x import y``
-> ``x``; ``from . import y`` -> ``y`` when it is a module), not to the packages above it.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE = ROOT / "core"
PLUGINS = ("ember_numba", "ember_cupy", "ember_template")


def _name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p, CORE): p for p in (CORE / "ember").rglob("*.py")}
PACKAGES = {_name(p, CORE) for p in (CORE / "ember").rglob("__init__.py")}


def imports(module: str, path: pathlib.Path) -> list:
    """``(line, absolute module name)`` of every import in the file, at any depth; a
    ``from a import b`` gives ``a.b`` when that is a module of the core, else ``a``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module if module in PACKAGES else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            out += [
                (node.lineno, f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target) for a in node.names
            ]
    return out


def _core_module(name: str):
    """The core module ``name`` stands for (the nearest enclosing one), or None."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name if name in MODULES else None


def _module_strings(path: pathlib.Path) -> list:
    """String constants outside docstrings that look like a module name (``"ember.backends.x"``
    in a table handed to ``import_module``, a ``sys.modules`` lookup): imports by name."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in docstrings
        and n.value.replace(".", "").replace("_", "").isalnum()
        and n.value.startswith(("ember.", *PLUGINS))
    ]


def test_the_walk_sees_what_it_should(tmp_path):
    # guards against a walk that finds nothing and so passes everything
    fused = {m: line for line, m in imports("ember.fused", MODULES["ember.fused"])}
    assert "ember.dispatch" in fused and "ember.autodiff" in fused
    conv = {m for _, m in imports("ember.nn.conv", MODULES["ember.nn.conv"])}
    assert "ember.nn.functional" in conv
    activation = {m for _, m in imports("ember.nn.functional.activation", MODULES["ember.nn.functional.activation"])}
    assert "ember.fused" in activation and "ember.errors" in activation
    table = tmp_path / "table.py"
    table.write_text('"""Mentions ember.backends.numpy in its docstring only."""\nMODS = ("ember.backends.numpy",)\n')
    assert _module_strings(table) == [(2, "ember.backends.numpy")]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_core_never_imports_a_backend_or_a_plugin(module):
    path = MODULES[module]
    found = imports(module, path) + _module_strings(path)
    bad = [
        (line, name)
        for line, name in found
        if name == "ember.backends" or name.startswith("ember.backends.") or name.split(".")[0] in PLUGINS
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: find backends through entry points (ember.registry)"


def test_fused_never_imports_nn_or_optim():
    found = imports("ember.fused", MODULES["ember.fused"])
    bad = [(line, name) for line, name in found if name.split(".")[:2] in (["ember", "nn"], ["ember", "optim"])]
    assert not bad, f"ember/fused.py imports {bad}: nn and optim register their fused ops with it (fused.defop)"


def _cycles(edges: dict) -> list:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_core():
    edges = {m: {d for _, name in imports(m, p) if (d := _core_module(name)) and d != m} for m, p in MODULES.items()}
    cycles = _cycles(edges)
    described = ["; ".join(f"{a} -> {sorted(edges[a] & c)}" for a in sorted(c)) for c in cycles]
    assert not cycles, f"import cycles among core modules: {described}"


@pytest.mark.parametrize("plugin", ["numba", "cupy", "template"])
def test_plugins_import_only_the_installed_ember(plugin):
    root = ROOT / "plugins" / plugin
    for path in root.rglob("*.py"):
        if ".egg-info" in str(path):
            continue
        module = _name(path, root)
        bad = [
            (line, name)
            for line, name in imports(module, path)
            if name.split(".")[0] in ("tests", "benchmarks", "core", "backends")
        ]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}: a plugin is installed without the repository"
