"""The core distribution: what it contains and what it pulls in."""
import os
import pathlib
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed():
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    on_disk = {"ember." + ".".join(p.parent.relative_to(ROOT / "core" / "ember").parts)
               for p in (ROOT / "core" / "ember").rglob("__init__.py")}
    on_disk = {name.rstrip(".") for name in on_disk} | {"ember.backends"}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_runtime_dependencies_are_numpy_and_pluggy_only():
    deps = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in pyproject()["project"]["dependencies"]]
    assert sorted(deps) == ["numpy", "pluggy"]


@pytest.mark.slow
def test_fresh_venv_install_pulls_only_numpy_and_pluggy(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], check=True, timeout=600)
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout
    names = {line.split("==")[0].lower() for line in listed.split()} - {"pip", "setuptools", "wheel"}
    assert names == {"ember", "numpy", "pluggy"}, names
    out = subprocess.run([str(py), "-c", "import sys, ember; x = ember.ones(2) * 3; print(x.tolist(), "
                          "sorted(m for m in ('numba', 'cupy', 'torch') if m in sys.modules))"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.stdout.strip() == "[3.0, 3.0] []", out.stderr
    cli = subprocess.run([str(venv / "bin" / "ember"), "backends"], capture_output=True, text=True, timeout=120)
    assert "numpy" in cli.stdout and cli.returncode == 0, cli.stderr


def test_onnx_is_an_optional_extra_with_pinned_versions():
    project = pyproject()["project"]
    assert project["optional-dependencies"]["onnx"] == ["onnx==1.23.2", "onnxruntime==1.32.0"]
    assert {"ember.onnx", "ember.onnx.ops"} <= set(pyproject()["tool"]["setuptools"]["packages"])
