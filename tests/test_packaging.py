"""The core distribution: what it contains and what it pulls in."""

import pathlib
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packages(folder, prefix):
    return {".".join((prefix,) + p.parent.relative_to(folder).parts) for p in folder.rglob("__init__.py")}


def test_every_subpackage_is_listed():
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    on_disk = _packages(ROOT / "core" / "ember", "ember") | _packages(ROOT / "backends", "ember.backends")
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk == set(), "these listed packages are not on disk"


@pytest.mark.parametrize("plugin", ["numba", "cupy"])
def test_every_plugin_subpackage_is_listed(plugin):
    # an editable install finds an unlisted subpackage anyway; a wheel would leave it out
    folder = ROOT / "plugins" / plugin
    listed = set(tomllib.loads((folder / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed == _packages(folder / f"ember_{plugin}", f"ember_{plugin}")


def test_every_built_in_backend_is_an_entry_point():
    # the core never imports ember.backends (tests/test_import_direction.py): a backend folder
    # that is not an entry point would never be found
    folders = {p.parent.name for p in (ROOT / "backends").glob("*/__init__.py")}
    entry_points = pyproject()["project"]["entry-points"]["ember"]
    assert folders == {"numpy", "python", "webgpu"}
    assert {name: entry_points.get(name) for name in folders} == {n: f"ember.backends.{n}" for n in folders}


def test_runtime_dependencies_are_numpy_and_pluggy_only():
    deps = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in pyproject()["project"]["dependencies"]]
    assert sorted(deps) == ["numpy", "pluggy"]


@pytest.mark.slow
def test_fresh_venv_install_pulls_only_numpy_and_pluggy(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], check=True, timeout=600)
    listed = subprocess.run(
        [str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split("==")[0].lower() for line in listed.split()} - {"pip", "setuptools", "wheel"}
    assert names == {"ember", "numpy", "pluggy"}, names
    out = subprocess.run(
        [
            str(py),
            "-c",
            "import sys, ember; x = ember.ones(2) * 3; print(x.tolist(), "
            "sorted(m for m in ('numba', 'cupy', 'torch') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.stdout.strip() == "[3.0, 3.0] []", out.stderr
    cli = subprocess.run([str(venv / "bin" / "ember"), "backends"], capture_output=True, text=True, timeout=120)
    assert "numpy" in cli.stdout and cli.returncode == 0, cli.stderr


def test_certify_names_its_own_extra(monkeypatch):
    """`ember certify` runs on pytest and hypothesis; the `certify` extra brings them and the
    error for a missing one names it."""
    import argparse

    from ember.conformance import certify

    extra = pyproject()["project"]["optional-dependencies"]["certify"]
    assert sorted(d.split(">")[0] for d in extra) == ["hypothesis", "pytest"]
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # makes `import hypothesis` fail
    msg = certify._check_setup(argparse.Namespace(backend_module=[]))
    assert msg == "the conformance suite needs hypothesis: pip install 'ember[certify]'"


def test_onnx_is_an_optional_extra_with_pinned_versions():
    project = pyproject()["project"]
    # ml_dtypes makes the official int4/int2 cast cases' expected values; its rule changed in 0.7
    assert project["optional-dependencies"]["onnx"] == ["onnx==1.23.2", "onnxruntime==1.32.0", "ml_dtypes>=0.7"]
    assert {"ember.onnx", "ember.onnx.ops"} <= set(pyproject()["tool"]["setuptools"]["packages"])


def test_every_distribution_ships_py_typed():
    # PEP 561: type checkers read a package's annotations only when py.typed is installed with it
    for project, package in [
        (".", "ember"),
        ("plugins/numba", "ember_numba"),
        ("plugins/cupy", "ember_cupy"),
        ("plugins/template", "ember_template"),
    ]:
        config = tomllib.loads((ROOT / project / "pyproject.toml").read_text())
        assert "py.typed" in config["tool"]["setuptools"]["package-data"][package], project
        folder = "core/ember" if package == "ember" else f"{project}/{package}"
        assert (ROOT / folder / "py.typed").is_file(), folder
